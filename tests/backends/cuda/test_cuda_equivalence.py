"""The cuda backend against the numpy reference, on an NVIDIA GPU only (the ``cuda``
fixture skips without one, also on CI; benchmarks/device_h200.sh sets VGPU_REQUIRE_CUDA
and runs ``pytest -k cuda``). The examples' own tests (test_examples.py) and the feature
probes (test_docs_truth.py) run on cuda too; these cover what is the cuda Device's own:
kernel calls in several segments, both dtypes, float64 functions, a run-time error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import runner

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LORENZ = """field lorenz { param sigma = 10.0
 param rho = 28.0
 param beta = 2.6666667
 state x, y, z
 dx/dt = sigma * (y - x)
 dy/dt = x * (rho - z) - y
 dz/dt = x * y - beta * z
 solve rk4(dt = 0.001, steps = 500) }"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_lorenz_agrees_bit_for_bit_with_numpy(cuda, dtype):
    """Arithmetic only, no fused multiply-add (--fmad=false): numpy's numbers exactly."""
    h0 = np.random.default_rng(1).normal(size=(1000, 3)) + [0, 0, 20]
    rho = np.linspace(0, 40, 1000)
    ref = vgpu.solve(LORENZ, h0, backend="numpy", dtype=dtype, params={"rho": rho})
    got = vgpu.solve(LORENZ, h0, backend="cuda", dtype=dtype, params={"rho": rho})
    assert got.backend == "cuda"
    np.testing.assert_array_equal(got.states, ref.states)


def test_cuda_several_kernel_calls_and_a_history(cuda, monkeypatch):
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1000 * 64)    # 64 steps a call
    h0 = np.tile([1.0, 1.0, 20.0], (1000, 1))
    seen = []
    ref = vgpu.solve(LORENZ, h0, backend="numpy", save_every=50)
    got = vgpu.solve(LORENZ, h0, backend="cuda", save_every=50,
                     progress=lambda done, total: seen.append((done, total)))
    np.testing.assert_array_equal(got.history, ref.history)
    assert seen[-1] == (500, 500)


def test_cuda_float64_functions_are_close_to_numpys(cuda):
    src = ("field f { input w[N]\n grid i < N\n state y = sin(w[i]) * exp(w[i] / 10) + "
           "log(1 + w[i] * w[i]) + atan2(w[i], 2.0)\n dy/dt = 0\n solve euler(dt = 1, steps = 0) }")
    w = np.linspace(-20, 20, 10001)
    ref = vgpu.run_field(src, inputs={"w": w}, backend="numpy", dtype="float64")
    got = vgpu.run_field(src, inputs={"w": w}, backend="cuda", dtype="float64")
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-14)


def test_cuda_events_agree(cuda):
    """bouncing_ball: a fixed-step method with events (templates/events.c.j2's kernel)."""
    ball = vgpu.load(EXAMPLES / "bouncing_ball.field")
    ref = vgpu.solve(ball, dims={"N": 256}, backend="numpy", dtype="float64")
    got = vgpu.solve(ball, dims={"N": 256}, backend="cuda", dtype="float64")
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_cuda_an_index_out_of_range_is_the_reference_error(cuda):
    src = ("field f { input w[N]\n grid i < N\n state y\n dy/dt = w[i + 1]\n"
           " solve euler(dt = 1, steps = 1) }")
    args = dict(h0=np.zeros(4), inputs={"w": np.ones(4)})
    with pytest.raises(vgpu.VgpuError) as want:
        vgpu.run_field(src, backend="numpy", **args)
    with pytest.raises(type(want.value)) as got:
        vgpu.run_field(src, backend="cuda", **args)
    assert "w" in str(got.value)
