"""save_every histories written by the shader (shader/history.py; glsl/ and wgpu/runner.run): every saved state is the
state a run of that many steps ends with, bit for bit, however the run is split into
dispatches and chunks; the times are the reference's; a field with collapse keeps the
dispatch-per-saved-step path."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import plan as glsl_plan
from vgpu_compiler.call.bound import saved_steps
from vgpu_compiler.call.counters import COUNTERS

VDP = open("examples/vanderpol.field").read()
OU = open("examples/ou.field").read()


@pytest.fixture(params=("glsl", "wgpu", "cpu"))
def gpu(request) -> str:
    """A backend whose kernel writes histories (its own fixture decides skip or fail)."""
    request.getfixturevalue(request.param)
    return request.param


def _check(src, h0, steps, every, backend="glsl", **kw):
    sol = vgpu.solve(src, h0, backend=backend, steps=steps, save_every=every, **kw)
    ref = vgpu.solve(src, h0, backend="numpy", steps=steps, save_every=every, **kw)
    np.testing.assert_array_equal(sol.times, ref.times)
    assert sol.history.shape == ref.history.shape
    for m, n in enumerate(saved_steps(steps, every)):
        alone = vgpu.run_field(src, h0, backend=backend, steps=n, **kw)
        np.testing.assert_array_equal(sol.history[m], alone)
    np.testing.assert_array_equal(sol.history[-1], sol.states)
    np.testing.assert_allclose(sol.history, ref.history, rtol=2e-4, atol=2e-5)
    return sol


@pytest.mark.parametrize("steps, every", [(23, 1), (23, 5), (25, 5), (7, 30), (0, 3)])
def test_history_is_the_states_of_shorter_runs(gpu, steps, every):
    h0 = np.tile(np.float32([2, 0]), (37, 1))
    _check(VDP, h0, steps, every, gpu,
           params={"mu": np.linspace(0, 5, 37).astype(np.float32)})


def test_split_into_dispatches_and_chunks(glsl):
    h0 = np.tile(np.float32([2, 0]), (300, 1))
    with glsl_plan.limits(max_steps=3, max_block=2 * 4 * 128):     # 3 chunks, 3 steps each
        _check(VDP, h0, 20, 2)


def test_noise_and_float64(glsl):
    _check(OU, np.linspace(-1, 1, 50), 17, 4, seed=5, dtype="float64")


def test_cpu_noise_float64_and_progress(cpu):
    _check(OU, np.linspace(-1, 1, 50), 17, 4, "cpu", seed=5, dtype="float64")
    seen = []
    sol = vgpu.solve(VDP, np.tile([2.0, 0.0], (30, 1)), backend="cpu", steps=300,
                     save_every=7, progress=lambda done, total: seen.append(done))
    assert seen[-1] == 300 and len(sol.history) == len(saved_steps(300, 7))


def test_wgpu_split_into_dispatches_and_noise(wgpu):
    from vgpu_compiler.backends.wgpu import runner
    with runner.limits(max_steps=3):
        _check(VDP, np.tile(np.float32([2, 0]), (100, 1)), 20, 2, "wgpu")
    _check(OU, np.linspace(-1, 1, 50).astype(np.float32), 17, 4, "wgpu", seed=5)


def test_one_dispatch_for_many_saved_states(gpu):
    h0 = np.tile(np.float32([2, 0]), (64, 1))
    vgpu.solve(VDP, h0, backend=gpu, steps=200, save_every=1)
    before = COUNTERS.snapshot()["dispatches"]
    vgpu.solve(VDP, h0, backend=gpu, steps=200, save_every=1)
    assert COUNTERS.snapshot()["dispatches"] - before <= 3   # the start, then the steps
