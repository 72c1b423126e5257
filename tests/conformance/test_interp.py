"""``interp(A, u)`` and ``interp(A, e1, ..., u)`` (frontend/interp.py): a table read between
its samples, on every backend, against ``np.interp``, closed forms, scipy's ``solve_ivp``
with ``np.interp`` in the right-hand side, and its derivative (rodas4's Jacobian) against
the slope of the segment; misuse is a located error."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import NameError_, ProgramIndexError, TypeError_
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.diff import derivative
from vgpu_compiler.ir.evaluate import Context, evaluate
from vgpu_compiler.ir.nodes import Sym
from vgpu_compiler.ir.ops import SymKind, Type

solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp

BACKENDS = ("numpy", "cpu", "glsl", "wgpu")
DTYPES = ("float32", "float64")
TOL = {"float32": dict(rtol=2e-6, atol=2e-6), "float64": dict(rtol=1e-13, atol=1e-13)}


def _needs(request, backend):
    if backend != "numpy":
        request.getfixturevalue(backend)


READ = """
field read {
    input A[M]
    param u
    state y = 0
    dy/dt = interp(A, u)
    solve euler(dt = 1, steps = 1)
}
"""

TABLE = np.array([1.0, 3.0, -2.0, 5.0, 0.25, 4.0])
LAST = len(TABLE) - 1


def _positions(rng):
    """Inside, on every sample, at both ends, outside both ends, and the infinities."""
    return np.concatenate([rng.uniform(-2, LAST + 2, 200), np.arange(LAST + 1),
                           [0.0, LAST, -0.0, LAST - 1e-7, 1e-7, -1e-7, LAST + 1e-7,
                            np.inf, -np.inf, 1e30, -1e30]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_interp_is_np_interp_on_every_backend(request, backend, dtype):
    _needs(request, backend)
    u = _positions(np.random.default_rng(1))
    A = TABLE.astype(dtype)
    got = vgpu.run_field(READ, params={"u": u.astype(dtype)}, inputs={"A": A},
                         dims={"N": len(u)}, backend=backend, dtype=dtype)
    uu = u.astype(dtype).astype(np.float64)
    want = np.interp(uu, np.arange(LAST + 1), A.astype(np.float64))
    np.testing.assert_allclose(got, want, **TOL[dtype])
    ends = np.isin(uu, [0.0, LAST]) | (uu < 0) | (uu > LAST)
    np.testing.assert_array_equal(got[ends], want[ends])     # the clamp is exact
    samples = np.isin(uu, np.arange(LAST + 1))
    np.testing.assert_array_equal(got[samples], want[samples])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_position_gives_nan(request, backend, dtype):
    _needs(request, backend)
    u = np.array([np.nan, 1.5, np.nan, -1.0, 9.0])
    with pytest.warns(vgpu.NonFiniteWarning):
        got = vgpu.run_field(READ, params={"u": u}, inputs={"A": TABLE}, dims={"N": len(u)},
                             backend=backend, dtype=dtype)
    assert np.isnan(got[[0, 2]]).all()
    np.testing.assert_allclose(got[[1, 3, 4]], [0.5, TABLE[0], TABLE[-1]], rtol=1e-6)


ROWS = """
field rows {
    input B[R, M]
    param u
    param shift = 0
    grid i < N
    state y = 0
    dy/dt = interp(B, i % R + int(shift), u)
    solve euler(dt = 1, steps = 1)
}
"""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_higher_rank_table_is_read_along_its_last_axis(request, backend, dtype):
    _needs(request, backend)
    rng = np.random.default_rng(2)
    B = rng.normal(size=(3, 7))
    n = 60
    u = rng.uniform(-1, 7, n)
    got = vgpu.run_field(ROWS, params={"u": u}, inputs={"B": B}, dims={"N": n},
                         backend=backend, dtype=dtype)
    Bd = B.astype(dtype).astype(np.float64)
    uu = u.astype(dtype).astype(np.float64)
    want = [np.interp(uu[i], np.arange(7), Bd[i % 3]) for i in range(n)]
    np.testing.assert_allclose(got, want, **TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_leading_index_out_of_range_is_an_error_naming_the_table(request, backend):
    _needs(request, backend)
    with pytest.raises(ProgramIndexError, match=r"B\[3, \d\] but input B has shape \(3, 7\)"):
        vgpu.run_field(ROWS, params={"u": 2.5, "shift": 1.0}, inputs={"B": np.ones((3, 7))},
                       dims={"N": 4}, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_table_of_one_sample_is_that_sample_everywhere(request, backend):
    _needs(request, backend)
    u = np.array([-3.0, 0.0, 0.5, 7.0])
    got = vgpu.run_field(READ, params={"u": u}, inputs={"A": np.array([2.5])},
                         dims={"N": 4}, backend=backend)
    np.testing.assert_array_equal(got, 2.5)


# --- closed forms and scipy ----------------------------------------------------------------
DRIVE = """
field driven {
    input drive[M]
    param tau = 0.5
    state x = 0
    dx/dt = interp(drive, t / tau)
    solve rk4(dt = 0.125, steps = 1)
}
"""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_rk4_integrates_a_piecewise_linear_drive_exactly(request, backend, dtype):
    """Steps aligned to the samples (tau = 4 dt): each step sees one linear piece, which
    rk4 integrates exactly, so x(T) is the trapezoid rule of the samples (then the last
    sample held, past the table's end)."""
    _needs(request, backend)
    drive = np.array([0.0, 2.0, -1.0, 3.0, 3.0, 0.5])
    tau, dt, steps = 0.5, 0.125, 56                     # T = 7 > (len - 1) tau = 2.5
    x = vgpu.run_field(DRIVE, inputs={"drive": drive}, dims={"N": 1}, steps=steps,
                       backend=backend, dtype=dtype)
    T = steps * dt
    want = tau * np.sum((drive[1:] + drive[:-1]) / 2) + (T - LAST_T(drive, tau)) * drive[-1]
    np.testing.assert_allclose(x, want, **TOL[dtype])


def LAST_T(drive, tau):
    return (len(drive) - 1) * tau


DOSING = """
field dosing {
    input dose[M]                 # infusion rate, one sample per hour
    param k = 0.3                 # elimination rate
    param hour = 1.0
    state c = 0
    dc/dt = interp(dose, t / hour) - k * c
    solve dopri5(t1 = 30, rtol = 1e-10, atol = 1e-12)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dosing_schedule_matches_solve_ivp_with_np_interp(request, backend):
    _needs(request, backend)
    rng = np.random.default_rng(3)
    dose = rng.uniform(0, 2, 24)
    k = np.array([0.1, 0.3, 1.0, 2.5])
    dtype = "float32" if backend == "wgpu" else "float64"
    got = vgpu.solve(DOSING, params={"k": k}, inputs={"dose": dose}, dims={"N": 4},
                     backend=backend, dtype=dtype, save_at=np.linspace(0, 30, 31))
    hours = np.arange(24)
    for j, kj in enumerate(k):
        ref = solve_ivp(lambda t, c: np.interp(t, hours, dose) - kj * c, (0, 30), [0.0],
                        method="DOP853", rtol=1e-12, atol=1e-14, t_eval=got.times,
                        max_step=0.25)
        tol = 1e-7 if dtype == "float64" else 2e-5     # (dopri5 across the hourly kinks)
        np.testing.assert_allclose(got.history[:, j], ref.y[0], rtol=tol, atol=tol)


# --- the derivative --------------------------------------------------------------------------
STIFF = """
field stiff {
    input g[M]                    # a steep rate, tabulated every h in x
    param h = 0.05
    param s = 5000
    state x = 1.5
    dx/dt = s - interp(g, x / h)
    solve rodas4(t1 = 1, rtol = 1e-8, atol = 1e-10)
}
"""
XS = 0.05 * np.arange(41)
G = 1e4 * (XS + XS ** 3)


class _At(Context):
    def __init__(self, x, arrays):
        self.x, self.arrays = x, arrays

    def symbol(self, node):
        return {"x": self.x, "h": np.float64(0.05), "s": np.float64(5000)}[node.name] if node.kind in (
            SymKind.STATE, SymKind.PARAM) else np.int32(len(self.arrays["g"]))

    def array(self, name):
        return self.arrays[name]


def test_the_jacobian_is_the_slope_of_the_segment_and_0_outside():
    field = compile_program(STIFF, "stiff.field").select(None)
    x = np.concatenate([np.linspace(-0.5, 2.5, 301), [0.05 * 40, 0.05 * 7, 0.05 * 7.5]])
    with np.errstate(all="ignore"):
        entry = np.broadcast_to(evaluate(field.jacobian.matrix[0][0], _At(x, {"g": G}),
                                         np.float64, mask=False), x.shape)
    u = x / 0.05
    k = np.clip(np.floor(u), 0, len(G) - 2).astype(int)
    slope = np.where((u < 0) | (u >= len(G) - 1), 0.0, (G[k + 1] - G[k]) / 0.05)
    np.testing.assert_allclose(entry, -slope, rtol=1e-12, atol=1e-9)
    assert (entry[(u > 0) & (u < len(G) - 1)] < 0).all()


def test_the_derivative_in_the_position_needs_no_piecewise_rule():
    """d/du of the expansion is the slope whether or not step functions are allowed (the
    int of ``floor(u)`` is never differentiated), so Milstein's dG/dx can read a table."""
    src = ("field f {\n    input A[M]\n    state u, y\n    du/dt = 1\n"
           "    dy/dt = interp(A, u)\n    solve euler(dt = 1, steps = 1)\n}\n")
    field = compile_program(src, "f.field").select(None)
    u = Sym(SymKind.STATE, "u", Type.FLOAT)
    a, b = derivative(field.derivs[1], u), derivative(field.derivs[1], u, piecewise=True)
    assert a == b


@pytest.mark.parametrize("backend", BACKENDS)
def test_rodas4_with_a_table_matches_radau_with_np_interp(request, backend):
    _needs(request, backend)
    dtype = "float32" if backend == "wgpu" else "float64"
    tols = {} if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    sol = vgpu.solve(STIFF, inputs={"g": G}, dims={"N": 2}, backend=backend, dtype=dtype,
                     **tols, save_at=np.concatenate([np.linspace(0, 1e-3, 6), [0.5, 1.0]]))
    ref = _radau(sol.times.astype(np.float64).tobytes())
    tol = 1e-6 if dtype == "float64" else 1e-3
    np.testing.assert_allclose(sol.history[:, 0], ref.y[0], rtol=tol, atol=tol)
    assert (sol.status == 0).all()
    assert sol.steps_taken[0] < _explicit_steps(dtype) / 5      # the Jacobian is used


@functools.lru_cache(maxsize=None)
def _radau(times):
    """scipy's Radau at the saved times (given as float64 bytes), once for the backends
    that save at the same ones."""
    return solve_ivp(lambda t, x: 5000 - np.interp(x, XS, G), (0, 1), [1.5], method="Radau",
                     rtol=1e-12, atol=1e-14, t_eval=np.frombuffer(times, np.float64))


@functools.lru_cache(maxsize=None)
def _explicit_steps(dtype):
    tols = {} if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)
    return vgpu.solve(STIFF.replace("rodas4", "dopri5"), inputs={"g": G}, dims={"N": 1},
                      backend="numpy", dtype="float64",
                      **tols).steps_taken[0]


# a table read at a position that depends on the state (the read's index does): rk4's
# steps of the joined field are the derivative of rk4's steps (Runge-Kutta methods
# commute with differentiation), so central differences of the same steps check it
RECORDED = """
field recorded {
    input dose[H]
    param k = 0.3
    param c0 = 0.5
    state c = c0
    dc/dt = interp(dose, t + 0.5 * c) - k * c
    solve rk4(dt = 0.02, steps = 500)
}
"""
DOSE = np.random.default_rng(1).uniform(0, 2, 24)
RATES = np.array([0.1, 0.3, 1.0])


@functools.lru_cache(maxsize=None)
def _differences():
    def end(k, c0):
        return vgpu.solve(RECORDED, params={"k": k, "c0": c0}, inputs={"dose": DOSE},
                          dims={"N": 3}, backend="numpy", dtype="float64").states.reshape(3)
    e = 1e-6
    return np.stack([(end(RATES + e, 0.5) - end(RATES - e, 0.5)) / (2 * e),
                     (end(RATES, 0.5 + e) - end(RATES, 0.5 - e)) / (2 * e)], axis=-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sensitivities_through_a_position_that_reads_the_state(request, backend):
    _needs(request, backend)
    dtype = "float32" if backend == "wgpu" else "float64"
    sol = vgpu.solve(RECORDED, params={"k": RATES}, inputs={"dose": DOSE}, dims={"N": 3},
                     backend=backend, dtype=dtype, sensitivities=["k", "init(c)"])
    tol = 1e-7 if dtype == "float64" else 1e-4
    np.testing.assert_allclose(sol.sensitivities[:, 0, :], _differences(), rtol=tol, atol=tol)


# --- misuse ----------------------------------------------------------------------------------
def _field(body: str) -> str:
    return ("field f {\n    input A[M], B[2, M]\n    output H[3]\n    param p = 1\n"
            f"    state x = 0\n    dx/dt = {body}\n    solve euler(dt = 1, steps = 1)\n}}\n")


@pytest.mark.parametrize("body, error, message", [
    ("interp(x, 0.5)", TypeError_, r"must be the name of an input; `x` is a state"),
    ("interp(p, 0.5)", TypeError_, r"must be the name of an input; `p` is a param"),
    ("interp(H, 0.5)", TypeError_, r"must be the name of an input; `H` is an output"),
    ("interp(Z, 0.5)", TypeError_, r"must be the name of an input; `Z` is unknown"),
    ("interp(A[0], 0.5)", TypeError_, r"must be the name of an input"),
    ("interp()", TypeError_, r"must be the name of an input"),
    ("interp(A)", TypeError_, r"input `A` \(rank 1\) takes a position .*not 0 arguments"),
    ("interp(A, 0, 0.5)", TypeError_, r"takes a position .*`interp\(A, u\)`, not 2"),
    ("interp(B, 0.5)", TypeError_, r"rank 2\) takes 1 int index and a position .*"
                                   r"`interp\(B, e1, u\)`"),
    ("interp(B, 0.5, 0.5)", TypeError_, r"an index of `B` must be an int"),
    ("interp(A, x > 0)", TypeError_, r"a condition \(bool\) is not a number"),
])
def test_misuse_is_a_located_error(body, error, message):
    src = _field(body)
    with pytest.raises(error, match=message) as info:
        vgpu.run_field(src, inputs={"A": np.ones(4), "B": np.ones((2, 4))}, dims={"N": 1},
                       backend="numpy")
    assert info.value.line == 6 and "^" in str(info.value)


def test_an_int_position_is_a_sample():
    got = vgpu.run_field(_field("interp(A, 2)"), inputs={"A": TABLE[:4], "B": np.ones((2, 4))},
                         dims={"N": 1}, backend="numpy")
    assert got == TABLE[2]


def test_interp_is_a_reserved_name():
    src = "field f {\n    param interp = 1\n    state x\n    dx/dt = 0\n    solve euler(dt = 1, steps = 1)\n}\n"
    with pytest.raises(NameError_, match="`interp` is a function name"):
        vgpu.run_field(src, np.zeros(1), backend="numpy")


def test_interp_is_not_allowed_where_inputs_are_not():
    src = ("field f {\n    input A[M]\n    param p = interp(A, 0.5)\n    state x\n"
           "    dx/dt = p\n    solve euler(dt = 1, steps = 1)\n}\n")
    with pytest.raises(NameError_, match="a param default may not use `A`"):
        vgpu.run_field(src, np.zeros(1), inputs={"A": np.ones(3)}, backend="numpy")


START = """
field start {
    input A[M]
    param u
    state y = interp(A, u)
    dy/dt = interp(A, u + t)
    solve euler(dt = 0.5, steps = 1)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_interp_in_a_start_expression(request, backend):
    _needs(request, backend)
    u = np.linspace(-1, 6, 15)
    got = vgpu.run_field(START, params={"u": u}, inputs={"A": TABLE}, dims={"N": len(u)},
                         backend=backend)
    at = np.interp(u, np.arange(LAST + 1), TABLE)
    np.testing.assert_allclose(got, at + 0.5 * at, rtol=1e-6, atol=1e-6)
