"""GLSL float64 `exp`, `log` and `log2` (OpenGL's double type has none): the helpers
vg_dexp, vg_dlog and vg_dlog2 (fdlibm's e_exp.c and e_log.c, codegen/build/helpers.py)
against numpy, within 1 ulp (log2: 2) over their whole ranges (subnormal results and
arguments included), log2 exact at powers of two,
numpy's answers on special inputs, an adaptive float64 run that calls them taking the
numpy reference's steps, and the functions still refused naming a way out."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu


def values(expr: str, x, backend: str) -> np.ndarray:
    """``state z = expr`` with x = a[i] over the inputs, float64."""
    src = (f"field f {{ input a[N]\n grid i < N\n let x = a[i]\n state z = {expr}\n"
           f" dz/dt = 0\n solve euler(dt = 1, steps = 0) }}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = vgpu.run_field(src, inputs={"a": np.asarray(x, np.float64)}, backend=backend,
                             dtype="float64")
    return np.asarray(sol).ravel()


def ulps(got, want) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.abs(got - want) / np.spacing(np.abs(want))


RNG = np.random.default_rng(31)
EXP_X = np.concatenate([RNG.uniform(-745.1, 709.7, 20000), RNG.uniform(-1, 1, 4000),
                        RNG.uniform(-1e-8, 1e-8, 1000), [-745.13, -708.4, -708.3, 709.78]])
LOG_X = np.concatenate([10.0 ** RNG.uniform(-307, 308, 20000), RNG.uniform(0.5, 2.0, 4000),
                        1 + RNG.uniform(-1e-8, 1e-8, 1000),
                        5e-324 * RNG.integers(1, 2 ** 52, 2000).astype(float),
                        [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]])


@pytest.mark.parametrize("fn, x, most", [("exp", EXP_X, 1.0), ("log", LOG_X, 1.0),
                                         ("log2", LOG_X, 2.0)])
def test_within_one_ulp_of_numpy(glsl, fn, x, most):
    got = values(f"{fn}(x)", x, "glsl")
    want = getattr(np, fn)(x)
    assert ulps(got, want).max() <= most, x[np.argmax(ulps(got, want))]


def test_log2_is_exact_at_powers_of_two(glsl):
    k = np.arange(-1074, 1024)
    np.testing.assert_array_equal(values("log2(x)", np.ldexp(1.0, k), "glsl"), k)


@pytest.mark.parametrize("fn, x", [
    ("exp", [0.0, -0.0, 710.0, -746.0, 1e308, -1e308, np.inf, -np.inf, np.nan]),
    ("log", [0.0, -0.0, -1.0, -5e-324, 1.0, np.inf, -np.inf, np.nan]),
    ("log2", [0.0, -0.0, -1.0, -5e-324, 1.0, np.inf, -np.inf, np.nan])])
def test_special_inputs_give_numpys_answers(glsl, fn, x):
    got = values(f"{fn}(x)", x, "glsl")
    with np.errstate(all="ignore"):
        want = getattr(np, fn)(np.asarray(x))
    np.testing.assert_array_equal(got, want)
    real = ~np.isnan(want)
    assert (np.signbit(got[real]) == np.signbit(want[real])).all()


def test_exp_and_fmod_in_one_kernel(glsl):
    """vg_dexp (exp) and vg_cfmod's exponent helper (vg_dilogb) in one shader: the two
    once shared a name, and the driver refused the kernel."""
    x = np.linspace(-7.5, 7.5, 31)
    got = values("exp(x) + x % 3.0", x, "glsl")
    np.testing.assert_allclose(got, np.exp(x) + np.mod(x, 3.0), rtol=1e-15)


def test_an_adaptive_float64_run_with_exp_and_log_takes_numpys_steps(glsl):
    """Arrhenius-like rates (exp) and a log in the right-hand side: dopri5 at rtol 1e-10
    on GLSL float64 against the numpy reference (same steps, states to ~1e-13)."""
    src = """field f {
        param k = 1.0
        grid i < N
        state x = 0.5, y = 1
        dx/dt = exp(-k * y) - 0.3 * x
        dy/dt = log(1 + x * x) - 0.1 * y
        solve dopri5(t1 = 20, rtol = 1e-10, atol = 1e-12)
    }"""
    ks = np.linspace(0.5, 2.0, 16)
    ref = vgpu.solve(src, params={"k": ks}, backend="numpy", dtype="float64")
    got = vgpu.solve(src, params={"k": ks}, backend="glsl", dtype="float64")
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-12)


@pytest.mark.parametrize("fn", ["sin", "cos", "tanh", "sinh", "atan"])
def test_the_other_functions_are_still_refused(glsl, fn):
    with pytest.raises(vgpu.BackendError, match=f"`{fn}` has no double-precision version"):
        values(f"{fn}(x)", [0.5], "glsl")
