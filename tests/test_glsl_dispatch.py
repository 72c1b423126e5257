"""How the GLSL runtime splits a long integration over dispatches (backends/glsl/execute.py)."""
import pathlib

import numpy as np
import pytest

import vgpu
from field_examples import LORENZ
from vgpu_compiler.backends.glsl.execute import _Pacer, _segments

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _covered(segs, steps):
    ends = [s1 for s0, s1 in segs if s1 > s0]
    starts = [s0 for s0, s1 in segs if s1 > s0]
    assert starts == ([0] + ends[:-1] if ends else []), segs     # contiguous, in order
    assert (ends[-1] if ends else 0) == steps


@pytest.mark.parametrize("steps,per,history", [(10, 3, None), (10, 20, None), (0, 5, None),
                                               (12, 5, [0, 4, 8, 12]), (7, 2, [0, 3, 6, 7])])
def test_segments_cover_every_step_once_and_stop_at_saved_steps(steps, per, history):
    segs = list(_segments(steps, _Pacer(per, None), history))
    _covered(segs, steps)
    assert all(s1 - s0 <= per for s0, s1 in segs)
    if history:
        assert segs[0] == (0, 0)                    # the start is saved on its own
        assert set(history) <= {s1 for _, s1 in segs}
    if steps == 0:
        assert segs == [(0, 0)]


def test_the_pacer_sizes_dispatches_by_time_grows_gently_and_keeps_its_cap():
    p = _Pacer(10, None)
    p.record(10, 0.001)                 # far too short: grows, but at most 4x at a time
    assert p.steps == 40
    p.record(40, 1.0)                   # too long: shrinks to the target at once
    assert p.steps == int(40 * _Pacer.TARGET_SECONDS / 1.0)
    capped = _Pacer(100, 7)
    assert capped.steps == 7
    capped.record(7, 1e-6)
    assert capped.steps == 7
    p.record(0, 0.0)                    # an empty dispatch teaches nothing
    assert p.steps >= 1


def test_segments_follow_the_pacer_as_it_changes():
    pacer = _Pacer(2, None)
    segs = []
    for s0, s1 in _segments(30, pacer, None):
        segs.append((s0, s1))
        pacer.record(s1 - s0, 1e-4)     # fast dispatches: the next ones are longer
    _covered(segs, 30)
    assert segs[0] == (0, 2) and segs[1] == (2, 10)


def test_a_paced_run_reports_progress_and_matches_the_reference(glsl):
    h0 = np.random.default_rng(5).normal(size=(2048, 3)).astype(np.float32)
    seen = []
    sol = vgpu.solve(LORENZ, h0, backend="glsl", steps=3000, dt=0.001,
                     progress=lambda done, total: seen.append((done, total)))
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=3000, dt=0.001)
    np.testing.assert_array_equal(sol.states, ref)
    assert seen[-1] == (3000, 3000)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_more_steps_than_llvmpipes_loop_limiter_allows_in_one_dispatch(glsl):
    """llvmpipe silently ends loops after 65535 iterations per invocation and dispatch:
    the runtime must split so that every step is taken (x counts them exactly)."""
    src = "field f { state x\n dx/dt = 1\n solve euler(dt = 1, steps = 70000) }"
    np.testing.assert_array_equal(vgpu.run_field(src, np.zeros(64), backend="glsl"), 70000.0)
    powi = "field f { state x\n dx/dt = x^3 - x^3 + 1\n solve euler(dt = 1, steps = 140000) }"
    np.testing.assert_array_equal(vgpu.run_field(powi, np.zeros(8), backend="glsl"), 140000.0)


def test_a_basin_reduction_over_many_steps_matches_the_reference(glsl):
    """A serial or tree reduction loops inside every step: fewer steps fit in a dispatch."""
    src = (ROOT / "examples" / "kuramoto.field").read_text()
    rng = np.random.default_rng(0)
    theta = rng.uniform(0, 6.28, 300).astype(np.float32)
    omega = rng.normal(size=300).astype(np.float32)
    args = dict(inputs={"omega": omega}, steps=2000)
    gpu = vgpu.run_field(src, theta, backend="glsl", **args)
    ref = vgpu.run_field(src, theta, backend="numpy", **args)
    np.testing.assert_allclose(gpu, ref, atol=2e-4)
