"""The one-dispatch fast path (glsl fast.OneDispatch, kept in a Prepared's slots).

A repeated call of a signature whose run is one chunk and one dispatch skips the
Bound, the plan and the host arrays: it must give exactly what the full path gives
(the first call of the signature takes the full path), refuse what it refuses,
and step aside whenever the kernel, the limits, VGPU_REDUCTION or the thread's
situation changed.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import vgpu
from field_examples import COLLAPSE, HISTOGRAM, LORENZ, MATMUL
from vgpu_compiler.backends.glsl import fast as glsl_fast
from vgpu_compiler.backends.glsl import runner as glsl_runner
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.call.bind import prepare
from vgpu_compiler.errors import ProgramIndexError

RNG = np.random.default_rng(5)
PARTIAL = """
field partial {
    param k = 1.0
    param g = 0.5
    state x, v = 0.25
    dx/dt = v
    dv/dt = -k * x - g * v
    solve rk4(dt = 0.01, steps = 40)
}
"""
SETTLE = """
field settle1 {
    grid i < N
    basin l < 8
    state x
    dx/dt = -x
    collapse when x < 0.5
    solve euler(dt = 0.1, steps = 100)
}
"""
OOB = """
field oob {
    input A[N]
    param at = 0
    grid i < M
    state s = 0
    ds/dt = A[int(at) + i]
    solve euler(dt = 1, steps = 1)
}
"""


def _fast_of(src, *args, **kwargs):
    prepared, _ = prepare(vgpu.compile(src).select(None), *args, **kwargs)
    return prepared.slots.get("glsl_fast")


@pytest.fixture
def counted(monkeypatch):
    """How many calls took the full path (execute) and the fast one (OneDispatch.call)."""
    seen = {"full": 0, "fast": 0}
    full, fast = glsl_runner.execute, glsl_fast.OneDispatch.call

    def count_full(*a, **k):
        seen["full"] += 1
        return full(*a, **k)

    def count_fast(self, data):
        seen["fast"] += 1
        return fast(self, data)
    monkeypatch.setattr(glsl_runner, "execute", count_full)
    monkeypatch.setattr(glsl_fast.OneDispatch, "call", count_fast)
    return seen


def test_a_repeated_call_takes_the_fast_path_with_new_data(glsl, counted):
    for _ in range(4):
        A = RNG.standard_normal((16, 16)).astype(np.float32)
        B = RNG.standard_normal((16, 16)).astype(np.float32)
        C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="glsl")
        np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    A = np.zeros((16, 16), np.float32)
    assert _fast_of(MATMUL, inputs={"A": A, "B": A}) is not None
    assert counted["fast"] >= 3 and counted["full"] <= 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_calls_equal_full_calls(glsl, dtype, monkeypatch):
    """h0 for some states (others start from their expression), per-trajectory and scalar
    params with new values each call, several states: the fast path's answer is the full
    path's, bit for bit."""
    cases = []
    for _ in range(3):
        h0 = RNG.normal(size=(50,)).astype(dtype)
        k = RNG.uniform(0.5, 2.0, size=50).astype(dtype)
        cases.append((h0, {"k": k, "g": float(RNG.uniform(0.1, 0.9))}))
    fast = [vgpu.solve(PARTIAL, h0, params=p, backend="glsl", dtype=dtype) for h0, p in cases]
    monkeypatch.setattr(glsl_runner, "_still", lambda fast, slots: False)   # full path only
    full = [vgpu.solve(PARTIAL, h0, params=p, backend="glsl", dtype=dtype) for h0, p in cases]
    for a, b in zip(fast, full):
        np.testing.assert_array_equal(a.states, b.states)
        np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
        assert a.states.dtype == b.states.dtype and a.states.shape == b.states.shape == (50, 2)
    assert _fast_of(PARTIAL, cases[0][0], params=cases[0][1], dtype=dtype) is not None


def test_outputs_and_collapse_on_the_fast_path(glsl, counted, monkeypatch):
    h = [vgpu.solve(HISTOGRAM, RNG.uniform(0, 2, 300).astype(np.float32), backend="glsl")
         for _ in range(3)]
    h0s = [RNG.uniform(0.6, 3.0, 40).astype(np.float32) for _ in range(3)]
    c = [vgpu.solve(SETTLE, h0, backend="glsl") for h0 in h0s]
    d = [vgpu.solve(COLLAPSE, backend="glsl", dims={"M": 16, "P": 8}) for _ in range(3)]
    assert counted["fast"] >= 6
    for sol in h:
        assert sol.outputs["counts"].sum() == 300 and sol.outputs["counts"].flags.writeable
    monkeypatch.setattr(glsl_runner, "_still", lambda fast, slots: False)
    for sol, h0 in zip(c, h0s):
        ref = vgpu.solve(SETTLE, h0, backend="glsl")
        np.testing.assert_array_equal(sol.states, ref.states)
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
        assert sol.steps_taken.dtype == np.int32 and sol.steps_taken.min() < 100
        assert len(set(sol.steps_taken.tolist())) > 1
    ref = vgpu.solve(COLLAPSE, backend="glsl", dims={"M": 16, "P": 8})
    for sol in d:
        np.testing.assert_array_equal(sol.states, ref.states)
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)


def test_float64_flux_and_histories_keep_the_full_path(glsl):
    x = RNG.uniform(0, 2, 100)
    for _ in range(2):
        vgpu.solve(HISTOGRAM, x, backend="glsl", dtype="float64")
        vgpu.solve(LORENZ, RNG.normal(size=(10, 3)), backend="glsl", steps=10, save_every=5)
    assert _fast_of(HISTOGRAM, x, dtype="float64") is None
    assert _fast_of(LORENZ, RNG.normal(size=(10, 3)), steps=10, save_every=5) is None


def test_results_are_fresh_and_writable_each_call(glsl):
    A = np.eye(4, dtype=np.float32)
    first = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    second = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    third = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    for sol in (second, third):
        assert sol.states.flags.writeable and sol.steps_taken.flags.writeable
    second.states[:] = 7
    second.steps_taken[:] = -1
    np.testing.assert_array_equal(third.states, A)
    np.testing.assert_array_equal(third.steps_taken, np.full((4, 4), 4))
    assert not np.shares_memory(second.states, third.states)


def test_a_repeated_call_refuses_what_the_first_refuses_and_recovers(glsl):
    A = np.arange(8, dtype=np.float32)
    ok = vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": 1.0},
                        backend="glsl")
    np.testing.assert_array_equal(ok, A[1:5])
    messages = []
    for _ in range(2):
        with pytest.raises(ProgramIndexError) as info:
            vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": 6.0},
                           backend="glsl")
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "A[" in messages[0] and "line" in messages[0]
    again = vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": 2.0},
                           backend="glsl")
    np.testing.assert_array_equal(again, A[2:6])      # the error slot was reset


def test_signatures_sharing_a_kernel_set_their_own_uniforms(glsl):
    """Two signatures (dt differs) share one kernel: each fast call must set its own dt."""
    src = "field d { state x\n dx/dt = -x\n solve euler(dt = 0.1, steps = 10) }"
    h0 = np.ones(32, np.float32)
    want = {dt: vgpu.run_field(src, h0, backend="numpy", dt=dt) for dt in (0.1, 0.05, -0.0)}
    for dt in [0.1, 0.05, 0.1, 0.1, 0.05, 0.05, -0.0, 0.1, -0.0]:
        np.testing.assert_allclose(vgpu.run_field(src, h0, backend="glsl", dt=dt), want[dt],
                                   rtol=1e-6)


def test_the_fast_path_steps_aside_when_anything_changed(glsl, counted, monkeypatch):
    A = RNG.standard_normal((8, 8)).astype(np.float32)

    def call():
        C = vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
        np.testing.assert_allclose(C, A.astype(np.float64) @ A, rtol=1e-4, atol=1e-4)
    call(), call()
    before = counted["full"]
    vgpu.clear_cache(disk=False)            # the kernel is gone: found again, in full
    call()
    with limits(max_steps=3):               # another plan (three dispatches)
        call()
    monkeypatch.setenv("VGPU_REDUCTION", "serial")
    call()
    monkeypatch.delenv("VGPU_REDUCTION")
    call()
    assert counted["full"] - before == 4
    call()
    assert counted["full"] - before == 4    # and back on the fast path


def test_concurrent_fast_calls_each_get_their_own_answer(glsl):
    A0 = np.ones((16, 16), np.float32)
    vgpu.run_field(MATMUL, inputs={"A": A0, "B": A0}, backend="glsl")
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                A = rng.standard_normal((16, 16)).astype(np.float32)
                B = rng.standard_normal((16, 16)).astype(np.float32)
                C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="glsl")
                np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
        except BaseException as exc:       # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_both_shader_backends_run_the_one_algorithm():
    """The fast path is written once (shader/fast.py): glsl's and wgpu's OneDispatch
    add only their device trip, not a call of their own."""
    from vgpu_compiler.backends.shader import fast as shared
    from vgpu_compiler.backends.wgpu import fast as wgpu_fast
    for cls in (glsl_fast.OneDispatch, wgpu_fast.OneDispatch):
        assert issubclass(cls, shared.OneDispatch) and cls is not shared.OneDispatch
        assert "call" not in vars(cls) and "_trip" in vars(cls)
