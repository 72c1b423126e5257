"""How the GLSL runtime splits a long integration over dispatches (backends/glsl/execute.py;
the pacing rules themselves: tests/runtime/test_pacing.py)."""
import pathlib

import numpy as np
import pytest

import vgpu
from field_examples import LORENZ

ROOT = pathlib.Path(__file__).resolve().parents[3]


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
