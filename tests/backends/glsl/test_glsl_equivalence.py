"""The compiled backends (GLSL, wgpu, cpu) against the numpy reference, from program text.

Every test runs once per compiled backend (the autouse ``gpu`` fixture).

Every case runs on each compiled backend (the ``compiled_backend`` fixture) and runs both backends through vgpu.solve and compares states,
outputs, steps taken and histories. The stage combinations are emitted
``precise``, so most float32 cases agree bit for bit; the tolerance covers
the transcendental functions and the order of reductions and atomics.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import BackendError, ProgramIndexError, ZeroDivision

from field_examples import COLLAPSE, HEAT, HISTOGRAM, KURAMOTO, LORENZ, MATMUL
from vgpu_compiler.backends.glsl.plan import limits as glsl_limits

RNG = np.random.default_rng(1234)
GPU = "glsl"        # the backend under test (set by the gpu fixture)


@pytest.fixture(autouse=True, params=["glsl", "wgpu", "cpu"])
def gpu(request):
    """Run the test on each compiled backend (its fixture fails when it is missing on CI)."""
    global GPU
    request.getfixturevalue(request.param)
    GPU = request.param
    yield request.param
    GPU = "glsl"


def limits(**kw):
    """The splitting limits of the backend under test (max_steps per dispatch)."""
    if GPU == "wgpu":
        from vgpu_compiler.backends.wgpu.runner import limits as wgpu_limits
        return wgpu_limits(**kw)
    return glsl_limits(**kw)


def exact(gpu, ref):
    """Bit for bit on GLSL (``precise``) and cpu (no contraction); on wgpu to the suite's float32 tolerance: WGSL
    has no ``precise``, and the Vulkan driver may contract a * b + c into one fused
    multiply-add."""
    if GPU in ("glsl", "cpu"):
        np.testing.assert_array_equal(gpu.states, ref.states)
    else:
        np.testing.assert_allclose(gpu.states, ref.states, rtol=2e-5, atol=2e-6)


def refuses_float64():
    """wgpu has no float64 (WGSL): a BackendError naming the backend and the ways out
    (float32, or the fastest backend here that has float64)."""
    from vgpu_compiler.backends import fastest
    with pytest.raises(BackendError) as e:
        vgpu.solve(LORENZ, np.zeros((2, 3)), dtype="float64", backend="wgpu")
    instead = fastest("float64", exclude=("wgpu",))
    assert "wgpu" in str(e.value) and "dtype='float32'" in str(e.value)
    assert f"backend='{instead}' for float64" in str(e.value)


def _solve_noting_warnings(src, h0, backend, kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", vgpu.NonFiniteWarning)
        sol = vgpu.solve(src, h0, backend=backend, **kw)
    return sol, [str(w.message) for w in caught if w.category is vgpu.NonFiniteWarning]


def both(src, h0=None, rtol=2e-5, atol=2e-6, **kw):
    ref, ref_warned = _solve_noting_warnings(src, h0, "numpy", kw)
    gpu, gpu_warned = _solve_noting_warnings(src, h0, GPU, kw)
    assert gpu_warned == ref_warned     # the same count of NaN / inf trajectories, once each
    np.testing.assert_allclose(gpu.states, ref.states, rtol=rtol, atol=atol)
    assert gpu.states.dtype == ref.states.dtype
    np.testing.assert_array_equal(gpu.steps_taken, ref.steps_taken)
    assert sorted(gpu.outputs) == sorted(ref.outputs)
    for name in ref.outputs:
        np.testing.assert_allclose(gpu.outputs[name], ref.outputs[name], rtol=rtol, atol=atol)
    if ref.history is not None:
        np.testing.assert_allclose(gpu.history, ref.history, rtol=rtol, atol=atol)
        np.testing.assert_array_equal(gpu.times, ref.times)
    return ref, gpu


def test_lorenz_bitwise():
    h0 = RNG.normal(size=(3000, 3)).astype(np.float32)
    ref, gpu = both(LORENZ, h0, steps=300)
    exact(gpu, ref)


def test_lorenz_per_trajectory_rho():
    h0 = RNG.normal(size=(500, 3)).astype(np.float32)
    both(LORENZ, h0, steps=100, params={"rho": np.linspace(0, 50, 500)})


DECAY = """
field decay {
    param rate
    state x
    dx/dt = -rate * x
    solve METHOD(dt = 0.05, steps = 40)
}
"""


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun", "rk4"])
def test_decay_per_trajectory_rate(method):
    src = DECAY.replace("METHOD", method)
    h0 = RNG.uniform(0.5, 2, 1000).astype(np.float32)
    ref, gpu = both(src, h0, params={"rate": RNG.uniform(0, 3, 1000)})
    exact(gpu, ref)
    both(src, h0, params={"rate": 0.7}, t0=1.5)


OSCILLATOR = """
field osc {
    param w = 2.0
    state x, v = 0
    dx/dt = v
    dv/dt = -w^2 * x + 0.1 * sin(t)
    solve rk4(dt = 0.01, steps = 300)
}
"""


def test_oscillator_with_time():
    both(OSCILLATOR, RNG.normal(size=700).astype(np.float32), t0=0.25)


@pytest.mark.parametrize("m,k,n", [(37, 19, 23), (1, 1, 1), (5, 64, 3)])
def test_matmul_odd_shapes(m, k, n):
    A = RNG.normal(size=(m, k)).astype(np.float32)
    B = RNG.normal(size=(k, n)).astype(np.float32)
    ref, gpu = both(MATMUL, inputs={"A": A, "B": B})
    assert gpu.states.shape == (m, n)
    np.testing.assert_allclose(gpu.states, A @ B, rtol=1e-4, atol=1e-4)


def test_kuramoto_partial_basin():
    omega = RNG.normal(size=300).astype(np.float32)
    both(KURAMOTO, RNG.uniform(0, 6, 300).astype(np.float32), inputs={"omega": omega},
         steps=200, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("edge", ["clamp", "wrap", "zero"])
@pytest.mark.parametrize("n", [64, 100, 7])
def test_heat_stencil_edges(edge, n):
    src = HEAT.replace("edge zero", f"edge {edge}")
    assert f"edge {edge}" in src
    u0 = RNG.uniform(0, 1, n).astype(np.float32)
    both(src, u0, steps=50)


BASIN2D = """
field plate {
    grid i < M, j < N
    basin a < 4, b < 8
    state u
    coupled v = u edge wrap, w = u * u edge zero
    du/dt = 0.1 * (v[a + 1, b] + v[a, b - 1] - 2 * u) + 0.01 * w[a - 1, b + 1] - 0.05 * mean(v) + 0.001 * max(w)
    solve heun(dt = 0.1, steps = 20)
}
"""


@pytest.mark.parametrize("shape", [(8, 16), (10, 13), (3, 5)])
def test_basin_2d_partial(shape):
    u0 = RNG.uniform(0, 1, shape).astype(np.float32)
    both(BASIN2D, u0, rtol=1e-5, atol=1e-5)


WELLS = """
field wells {
    param tol = 1e-3
    state x
    basin l < 64
    dx/dt = x - x^3
    collapse when abs(abs(x) - 1) < tol
    solve rk4(dt = 0.01, steps = 3000)
}
"""


def test_collapse_step_counts():
    h0 = RNG.uniform(-2, 2, 300).astype(np.float32)
    ref, gpu = both(WELLS, h0)
    assert len(np.unique(gpu.steps_taken)) > 1


@pytest.mark.parametrize("shape", [(16, 16), (13, 9)])
def test_collapse_2d_basin(shape):
    both(COLLAPSE, dims={"M": shape[0], "P": shape[1]}, rtol=1e-5, atol=1e-5)


def test_collapse_with_history_and_chunks():
    h0 = RNG.uniform(-2, 2, 200).astype(np.float32)
    with limits(max_steps=130):
        both(WELLS, h0, save_every=370)


def test_flux_histogram():
    h0 = RNG.uniform(-1, 2, 5000).astype(np.float32)
    ref, gpu = both(HISTOGRAM, h0, rtol=0, atol=0)
    assert gpu.outputs["counts"].sum() == 5000


def test_history():
    ref, gpu = both(OSCILLATOR, RNG.normal(size=50).astype(np.float32), save_every=7)
    assert gpu.history.shape[0] == len(range(0, 300, 7)) + 1


GUARD = """
field guard {
    input v[N]
    grid i < N
    state x = 0
    dx/dt = where(i > 0, v[i - 1], 0.0) + where(i < N - 1 and v[i + 1] > 0, 1.0, 0.0)
    solve euler(dt = 1, steps = 3)
}
"""


def test_where_guards_an_index():
    v = RNG.normal(size=40).astype(np.float32)
    both(GUARD, inputs={"v": v})


def test_index_out_of_range_is_an_error():
    src = GUARD.replace("where(i > 0, v[i - 1], 0.0)", "v[i - 1]")
    v = np.ones(10, np.float32)
    for backend in ("numpy", GPU):
        with pytest.raises(ProgramIndexError) as e:
            vgpu.solve(src, inputs={"v": v}, backend=backend)
        assert e.value.line == 6 and "v[-1]" in str(e.value)


def test_flux_out_of_range_is_an_error():
    src = HISTOGRAM.replace("clamp(int(x * 16), 0, 31)", "int(x * 16) + 30")
    for backend in ("numpy", GPU):
        with pytest.raises(ProgramIndexError):
            vgpu.solve(src, np.full(10, 5.0, np.float32), backend=backend)


INTDIV = """
field intdiv {
    grid i < N
    state x = 0, y = 0
    dx/dt = float((i - 7) // (i % 5 - 2)) + float((i - 9) % (3 - i % 7))
    dy/dt = float(i) // 3.5 + (float(i) - 10.0) % 2.5 + 2.0 ^ (i % 4 - 2)
    solve euler(dt = 1, steps = 1)
}
"""


def test_int_floor_division_and_modulo():
    ref, gpu = both(INTDIV.replace("(3 - i % 7)", "(3 - i % 3)").replace("% 5 - 2", "% 5 - 7"),
                    dims={"N": 30})
    exact(gpu, ref)


def test_int_division_by_zero_is_an_error():
    for backend in ("numpy", GPU):
        with pytest.raises(ZeroDivision) as e:
            vgpu.solve(INTDIV, dims={"N": 30}, backend=backend)
        assert e.value.line == 5


EDGES = """
field edges {
    input a[N], b[N]
    grid i < N
    state p = 0, q = 0, r = 0, s = 0, u = 0, w = 0
    dp/dt = a[i] ^ b[i]
    dq/dt = min(a[i], b[i]) + max(b[i], a[i])
    dr/dt = float(int(a[i])) + sign(b[i]) + abs(a[i])
    ds/dt = clamp(a[i], -1.0, b[i]) + floor(b[i]) - ceil(a[i])
    du/dt = sqrt(a[i]) + log(b[i]) + exp(-a[i] * a[i]) + tanh(b[i] * 50) + atan2(a[i], b[i])
    dw/dt = float(int(a[i] * 3) % 4 - (-7) // 2) + a[i] // b[i] + a[i] % b[i]
    solve euler(dt = 1, steps = 1)
}
"""


def test_numpy_edge_cases():
    vals = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, 3.0, np.nan, np.inf, -np.inf, 1.0, -1.0],
                    np.float32)
    a, b = (x.ravel().astype(np.float32) for x in np.meshgrid(vals, vals))
    ref, gpu = both(EDGES, inputs={"a": a, "b": b}, rtol=1e-5, atol=1e-6)
    # NaN where numpy has NaN, infinities where numpy has them
    np.testing.assert_array_equal(np.isnan(gpu.states), np.isnan(ref.states))


def test_pow_signs():
    src = "field p { input a[N], b[N]\n grid i < N\n state x = 0\n dx/dt = a[i] ^ b[i]\n" \
          " solve euler(dt = 1, steps = 1) }"
    a = np.array([-2, -2, 0, 0, 2, -8, 1, 3, -1.5, 10], np.float32)
    b = np.array([2, 0.5, -1, -2, 0.5, 1 / 3, np.nan, 40, 3, -3], np.float32)
    ref, gpu = both(src, inputs={"a": a, "b": b})
    assert gpu.states[0] == 4 and np.isnan(gpu.states[1]) and np.isinf(gpu.states[2])


def test_float64_lorenz():
    if GPU == "wgpu":
        return refuses_float64()
    h0 = RNG.normal(size=(200, 3))
    ref, gpu = both(LORENZ, h0, dtype="float64", steps=200, rtol=1e-12, atol=1e-12)
    assert gpu.states.dtype == np.float64


def test_float64_flux_and_collapse():
    if GPU == "wgpu":
        return refuses_float64()
    both(HISTOGRAM, RNG.uniform(-1, 2, 300), dtype="float64", rtol=0, atol=0)
    both(WELLS, RNG.uniform(-2, 2, 100), dtype="float64", rtol=1e-12, atol=1e-12)


def test_float64_transcendental_is_refused_on_glsl_only():
    if GPU == "wgpu":
        return refuses_float64()
    if GPU == "cpu":            # every function in float64 (libm)
        both(OSCILLATOR, RNG.normal(size=50), dtype="float64", rtol=1e-12, atol=1e-12)
        return
    from vgpu_compiler.backends import fastest
    with pytest.raises(BackendError) as e:
        vgpu.solve(OSCILLATOR, np.zeros(4), dtype="float64", backend="glsl")
    instead = fastest("float64", exclude=("glsl",))      # cpu where it is available
    assert "sin" in str(e.value) and f"backend='{instead}' for float64" in str(e.value)


NAMES = """
field main {
    param uniform = 0.5
    state void, gl_Position, main_, _x, a__b
    let buffer = uniform * void
    dvoid/dt = -buffer
    dgl_Position/dt = void - gl_Position
    dmain_/dt = 1
    d_x/dt = _x * 0.1
    da__b/dt = -a__b
    solve rk4(dt = 0.1, steps = 10)
}
"""


def test_glsl_keywords_as_names():
    both(NAMES, RNG.normal(size=(20, 5)).astype(np.float32), params={"uniform": 0.25})


CONVERGE = """
field converge {
    param rate = 5.0
    state x, y = 2 * x
    let target = sin(init(x)) + init(y)
    dx/dt = -rate * (x - target)
    dy/dt = step * 0.001 + t
    solve rk4(dt = 0.01, steps = 100)
}
"""


def test_init_and_step_over_many_dispatches():
    h0 = np.linspace(-3, 3, 100).astype(np.float32)
    with limits(max_steps=9):
        both(CONVERGE, h0, save_every=25)


def test_zero_steps():
    both(CONVERGE, np.linspace(-1, 1, 10).astype(np.float32), steps=0, save_every=3)
