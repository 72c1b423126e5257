"""Repeated calls of cached kernels: what a call may skip, and what it must not.

A repeated call reuses its kernel's plan (chunks, workgroups, fixed uniforms) and
skips binding the storage buffers when that kernel's buffers are still the bound
ones. These tests interleave kernels and limits so that any state wrongly kept
from the previous call would give a wrong answer.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import vgpu
from field_examples import LORENZ, MATMUL
from vgpu_compiler.backends.glsl import runner as glsl_runner
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.call.bind import prepare

RNG = np.random.default_rng(11)
ROOT = Path(__file__).resolve().parents[3]


def _matmul(m, k, n):
    A = RNG.standard_normal((m, k)).astype(np.float32)
    B = RNG.standard_normal((k, n)).astype(np.float32)
    C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="glsl")
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def _lorenz(n):
    h0 = RNG.normal(size=(n, 3)).astype(np.float32)
    got = vgpu.run_field(LORENZ, h0, backend="glsl", steps=20)
    np.testing.assert_array_equal(got, vgpu.run_field(LORENZ, h0, backend="numpy", steps=20))


def test_kernels_called_in_turn_each_read_their_own_new_data(glsl):
    """Three kernels (two of them with the same buffer layout) in an interleaved order:
    a kernel whose buffers were not bound again would read another kernel's data."""
    for order in ([0, 1, 2, 0, 0, 1, 1, 2, 2, 0], [2, 1, 0, 2, 0, 1]):
        for which in order:
            (lambda: _matmul(16, 16, 16), lambda: _matmul(7, 5, 9), lambda: _lorenz(300))[which]()


def test_one_plan_per_kernel_and_limits_and_the_same_answer_under_each(glsl):
    h0 = RNG.normal(size=(1000, 3)).astype(np.float32)
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=30)
    runs = [vgpu.run_field(LORENZ, h0, backend="glsl", steps=30)]
    with limits(max_block=4096, max_steps=7):         # several chunks, several dispatches
        runs.append(vgpu.run_field(LORENZ, h0, backend="glsl", steps=30))
    runs.append(vgpu.run_field(LORENZ, h0, backend="glsl", steps=30))   # back to one dispatch
    for got in runs:
        np.testing.assert_array_equal(got, ref)
    prepared, _ = prepare(vgpu.compile(LORENZ).select(None), h0, steps=30)
    kernel = prepared.slots["glsl"][2]          # this call's kernel (not another test's)
    assert glsl_runner.MEMORY.get(kernel.key) is kernel
    assert len(kernel.plans) == 2
    per_chunk = 4096 // (3 * 4)                        # trajectories of 3 float32 states
    assert sorted(len(p.chunks) for _, p in kernel.plans.values()) == [1, -(-1000 // per_chunk)]


def test_new_scalar_params_dt_and_steps_reach_a_cached_kernel(glsl):
    """Uniforms are set only when they changed: every changed value must still arrive."""
    src = ("field decay { param k = 1\n state x\n dx/dt = -k * x\n"
           " solve rk4(dt = 0.01, steps = 100) }")
    h0 = np.linspace(0.5, 2.0, 64).astype(np.float32)
    for k, dt, steps in [(1.0, 0.01, 100), (2.0, 0.01, 100), (2.0, 0.02, 100), (2.0, 0.02, 50),
                         (1.0, 0.01, 100)]:
        got = vgpu.run_field(src, h0, backend="glsl", params={"k": k}, dt=dt, steps=steps)
        np.testing.assert_allclose(got, h0 * np.exp(-k * dt * steps), rtol=1e-5)


def test_results_are_fresh_writable_arrays(glsl):
    """A one-dispatch run hands back what the driver returned without extra copies on
    the way: what the caller gets must still be its own, writable array."""
    A = RNG.standard_normal((4, 4)).astype(np.float32)
    first = vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    second = vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    assert first.flags.writeable and first.flags.c_contiguous and first.dtype == np.float32
    first[:] = 0
    np.testing.assert_allclose(second, A.astype(np.float64) @ A, rtol=1e-5, atol=1e-5)
    h0 = RNG.normal(size=(8, 3)).astype(np.float32)
    sol = vgpu.solve(LORENZ, h0, backend="glsl", steps=3)
    assert sol.states.flags.writeable and sol.states.shape == (8, 3)
    assert sol.steps_taken.flags.writeable


# --- where the GL work runs (device.py: direct, or handed to the worker) ---------------------
HANDOFF = """
import json, sys, threading
import numpy as np
import vgpu
from vgpu_compiler.backends.glsl import device as gl
from field_examples import LORENZ
gl.GL.prefer_direct = sys.argv[1] == "direct"
h0 = np.random.default_rng(2).normal(size=(50, 3))
ref = vgpu.run_field(LORENZ, h0, steps=20, backend="numpy")
threads = {}
def where(ctx):
    return threading.current_thread().name
def work(k):
    got = vgpu.run_field(LORENZ, h0, steps=20, backend="glsl")
    threads[k] = (bool(np.array_equal(got, ref)), gl.call(where))
pool = [threading.Thread(target=work, args=(k,), name=f"caller{k}") for k in range(4)]
for t in pool:
    t.start()
for t in pool:
    t.join()
print(json.dumps({"direct": gl.GL.direct, "main": gl.call(where),
                  "threads": sorted(threads.values())}))
"""


def _handoff(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run([sys.executable, "-c", HANDOFF, mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_direct_mode_runs_gl_work_on_each_callers_own_thread(glsl):
    out = _handoff("direct")
    assert out["direct"] is True and out["main"] == "MainThread"
    assert out["threads"] == sorted([True, f"caller{k}"] for k in range(4))


def test_worker_mode_hands_gl_work_to_the_gl_thread(glsl):
    out = _handoff("worker")
    assert out["direct"] is False and out["main"] == "vgpu-gl"
    assert out["threads"] == [[True, "vgpu-gl"]] * 4


USERS_OWN_CONTEXT = """
import json
import moderngl
import numpy as np
import vgpu
from field_examples import MATMUL
mine = moderngl.create_standalone_context(require=430, backend="egl")   # current here
buf = mine.buffer(reserve=16)
rng = np.random.default_rng(4)
ok = []
for k in range(3):
    A, B = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="glsl")
    ok.append(bool(np.allclose(C, A @ B, rtol=1e-4, atol=1e-4)))
    data = np.arange(4, dtype=np.float32) + k
    buf.write(data.tobytes())                   # on the user's context, still current
    ok.append(bool(np.array_equal(np.frombuffer(buf.read(), np.float32), data)))
print(json.dumps(ok))
"""


def test_a_users_own_current_context_stays_current_across_calls(glsl):
    """Direct mode makes VGPU's context current for a call and then restores the one that
    was current on the caller's thread (moderngl's __enter__/__exit__)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run([sys.executable, "-c", USERS_OWN_CONTEXT], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True] * 6
