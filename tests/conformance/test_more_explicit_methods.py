"""dop853, vern7, vern9 (the explicit methods of "More methods"): their coefficients'
order conditions, dop853 against scipy's DOP853 (steps and answers), each method's
order measured under step halving (fixed steps: dt0 = dtmax = h, tolerances that
accept every step), save_at and events against closed forms, every backend against
the numpy reference, a Simulation, and the kernel without the dense-only stages."""
from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.shader.adaptive_host import lean_field
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.embedded import ADAPTIVE, lean
from vgpu_compiler.ir.step import step_program

from once import once

scipy_ivp = pytest.importorskip("scipy.integrate")
solve_ivp = scipy_ivp.solve_ivp

# (order of the propagated solution, of the error estimate(s), of the interpolant,
#  stages every step computes, stages of the interpolant)
METHODS = {"dop853": (8, (5, 3), 7, 13, 16), "vern7": (7, (6,), 7, 11, 16),
           "vern9": (9, (8,), 9, 17, 26)}

LORENZ = """
field lorenz {
    param sigma = 10.0
    param rho = 28.0
    param beta = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve METHOD(t1 = 1)
}
"""

VDP = """
field vdp {
    param mu = 1.0
    state x, y
    dx/dt = y
    dy/dt = mu * (1 - x^2) * y - x
    solve dop853(t1 = 6)
}
"""

OSC = """
field osc {
    state x, v
    dx/dt = v
    dv/dt = -x
    EVENT
    solve METHOD(t1 = 8)
}
"""

PENDULUM = """
field pendulum {
    state x, v
    dx/dt = v
    dv/dt = -sin(x) - 0.1 * v * x^2
    solve METHOD(t1 = 4)
}
"""


def _pendulum(t, y):
    return [y[1], -np.sin(y[0]) - 0.1 * y[1] * y[0] ** 2]


def on(backend, request):
    if backend != "numpy":
        request.getfixturevalue(backend)
    return backend


# --- the coefficients ----------------------------------------------------------------
def _powers(c, k):
    return [x ** k for x in c]


def _dot(u, v):
    return sum(x * y for x, y in zip(u, v))


def _times_a(tab, v):
    return [_dot(row, v) for row in tab.a]


@pytest.mark.parametrize("name", METHODS)
def test_order_conditions(name):
    """Row sums of a are c; the weights satisfy b.c^(k-1) = 1/k up to the order and
    the first trees beyond the bushy ones (b.A.c = 1/6, b.(c*A.c) = 1/8, b.A.A.c = 1/24,
    b.A.c^(p-2) = 1/(p(p-1))), and fail the next bushy one; each error estimate is
    orthogonal to c^(k-1) up to its order; the interpolant's weights b_s(theta) satisfy
    the bushy conditions sum_s b_s(theta) c_s^(k-1) = theta^k / k up to its order and
    reach b at theta = 1. The digits are as printed (decimals to 30 or 40 places, Vern9's
    sqrt(6) to 80), so the conditions hold to those places, far below float64."""
    tab = ADAPTIVE[name]
    p, qs, pd, m, total = METHODS[name]
    tiny = Fr(1, 10 ** 25)
    assert len(tab.a) == total and tab.step_stages == m and tab.extra == total - m
    for row, ci in zip(tab.a, tab.c):
        assert abs(sum(row) - ci) < tiny
    b, c = tab.b, tab.c
    for k in range(1, p + 1):
        assert abs(_dot(b, _powers(c, k - 1)) - Fr(1, k)) < tiny, k
    assert abs(_dot(b, _powers(c, p)) - Fr(1, p + 1)) > Fr(1, 10 ** 8)
    ac = _times_a(tab, c)
    assert abs(_dot(b, ac) - Fr(1, 6)) < tiny
    assert abs(_dot(b, [x * y for x, y in zip(c, ac)]) - Fr(1, 8)) < tiny
    assert abs(_dot(b, _times_a(tab, ac)) - Fr(1, 24)) < tiny
    assert abs(_dot(b, _times_a(tab, _powers(c, p - 2))) - Fr(1, p * (p - 1))) < tiny
    estimates = (tab.err,) if tab.err2 is None else (tab.err, tab.err2)
    assert len(estimates) == len(qs)
    for err, q in zip(estimates, qs):
        for k in range(1, q + 1):
            assert abs(_dot(err, _powers(c, k - 1))) < tiny, (q, k)
        assert abs(_dot(err, _powers(c, q))) > Fr(1, 10 ** 8)
    assert len(tab.dense[0]) == pd      # theta^1 .. theta^pd
    for k in range(1, pd + 1):
        ck = _powers(c, k - 1)
        for power in range(1, pd + 1):
            got = sum(row[power - 1] * x for row, x in zip(tab.dense, ck))
            assert abs(got - (Fr(1, k) if power == k else 0)) < tiny, (k, power)
    for row, bs in zip(tab.dense, b):
        assert abs(sum(row) - bs) < tiny
    # FSAL: the last stage every step computes is F at the new state
    assert tuple(tab.a[m - 1]) == tuple(b[:m - 1]) and tab.c[m - 1] == 1 and tab.fsal
    assert all(x == 0 for x in b[m - 1:]) and all(x == 0 for x in tab.err[m - 1:])
    assert step_program(tab).last == m - 1
    assert step_program(tab).q == {"dop853": 7, "vern7": 6, "vern9": 8}[name]   # the contract's


def test_dop853_coefficients_are_scipys():
    from scipy.integrate._ivp import dop853_coefficients as D
    tab = ADAPTIVE["dop853"]
    A = np.array([[float(x) for x in row] + [0.0] * (16 - len(row)) for row in tab.a])
    np.testing.assert_array_equal(A, D.A)
    np.testing.assert_array_equal([float(x) for x in tab.c], D.C)
    np.testing.assert_allclose([float(x) for x in tab.err[:13]], D.E5, rtol=0, atol=1e-16)
    np.testing.assert_allclose([float(x) for x in tab.err2[:13]], D.E3, rtol=0, atol=1e-16)


def test_lean_drops_only_the_dense_stages():
    for name, (_, _, _, m, _) in METHODS.items():
        tab = lean(ADAPTIVE[name])
        assert len(tab.a) == len(tab.b) == len(tab.c) == len(tab.err) == m
        assert tab.extra == 0 and step_program(tab).last == m - 1
    for name in ("bs3", "dopri5", "tsit5"):
        assert lean(ADAPTIVE[name]) is ADAPTIVE[name]
    field = compile_program(LORENZ.replace("METHOD", "vern9")).checked.fields[0]
    assert len(lean_field(field).solver.tableau.a) == 17 and lean_field(field) is lean_field(field)


# --- against scipy's DOP853 ------------------------------------------------------------
@pytest.mark.parametrize("tol", [1e-6, 1e-8, 1e-10])
def test_dop853_steps_and_answers_match_scipy(tol):
    """The same pair, first step (Hairer's, with q = 7) and error norm as scipy's DOP853:
    accepted steps within 15% of scipy's, the same answers to the tolerance. (Our
    controller grows a step at most 5x, scipy's 10x: it did not matter here.)"""
    mus = np.array([0.5, 2.0, 5.0])
    h0 = np.tile([2.0, 0.0], (3, 1))
    sol = vgpu.solve(VDP, h0, params={"mu": mus}, backend="numpy", dtype="float64",
                     rtol=tol, atol=tol)
    for i, mu in enumerate(mus):
        r = solve_ivp(lambda t, y, mu=mu: [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]],
                      (0, 6), h0[i], method="DOP853", rtol=tol, atol=tol)
        theirs = r.t.size - 1
        assert abs(int(sol.steps_taken[i]) - theirs) <= 0.15 * theirs, (mu, theirs)
        assert np.abs(sol.states[i] - r.y[:, -1]).max() < 50 * tol
    # the truth, far tighter
    for i, mu in enumerate(mus):
        r = solve_ivp(lambda t, y, mu=mu: [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]],
                      (0, 6), h0[i], method="DOP853", rtol=1e-13, atol=1e-13)
        assert np.abs(sol.states[i] - r.y[:, -1]).max() < 200 * tol


# --- orders, measured ------------------------------------------------------------------
STEPS = {"dop853": (0.8, 0.4, 0.2), "vern7": (0.4, 0.2, 0.1), "vern9": (1.0, 0.5, 0.25)}


@pytest.mark.parametrize("name", METHODS)
def test_order_under_step_halving(name):
    """Fixed steps h (dt0 = dtmax = h; tolerances so loose every step is accepted): the
    error at t1 falls by 2^p per halving of h, and that of the interpolated values at
    0.37 of each step by at least 2^(its order) (a nonlinear pendulum; the truth is
    scipy's DOP853 at rtol 2.5e-14)."""
    p, _, pd, _, _ = METHODS[name]
    errs, herrs = [], []
    for h in STEPS[name]:
        ts = np.arange(0, 4 - 1e-9, h) + 0.37 * h
        ref = solve_ivp(_pendulum, (0, 4), [2.0, 0.0], method="DOP853", rtol=2.5e-14,
                        atol=1e-15, dense_output=True)
        sol = vgpu.solve(PENDULUM.replace("METHOD", name), np.array([[2.0, 0.0]]),
                         backend="numpy", dtype="float64", rtol=1e3, atol=1e3, dt0=h,
                         dtmax=h, save_at=ts)
        assert sol.steps_taken[0] == round(4 / h) and sol.steps_rejected[0] == 0
        errs.append(np.abs(sol.states[0] - ref.sol(4.0)).max())
        herrs.append(np.abs(sol.history[:, 0, :].T - ref.sol(ts)).max())
    orders = np.log2(np.array(errs[:-1]) / errs[1:])
    dense_orders = np.log2(np.array(herrs[:-1]) / herrs[1:])
    assert np.all(orders > p - 0.5) and np.all(orders < p + 2), orders
    assert np.all(dense_orders > pd - 0.7), dense_orders


# --- save_at and events against closed forms -------------------------------------------
@pytest.mark.parametrize("name", METHODS)
def test_save_at_and_event_on_the_oscillator(name):
    """x = cos t: save_at values within a few tolerances of cos; `stop when x < 0` stops
    at pi/2 (located on the interpolant); saving never changes the steps."""
    tol = 1e-10
    ts = np.linspace(0, 8, 33)
    src = OSC.replace("METHOD", name)
    plain = vgpu.solve(src.replace("EVENT", ""), np.array([[1.0, 0.0]]), backend="numpy",
                       dtype="float64", rtol=tol, atol=tol)
    saved = vgpu.solve(src.replace("EVENT", ""), np.array([[1.0, 0.0]]), backend="numpy",
                       dtype="float64", rtol=tol, atol=tol, save_at=ts)
    np.testing.assert_array_equal(plain.steps_taken, saved.steps_taken)
    np.testing.assert_array_equal(plain.states, saved.states)
    assert np.abs(saved.history[:, 0, 0] - np.cos(ts)).max() < 20 * tol
    assert np.abs(saved.history[:, 0, 1] + np.sin(ts)).max() < 20 * tol
    stop = vgpu.solve(src.replace("EVENT", "stop when x < 0"), np.array([[1.0, 0.0]]),
                      backend="numpy", dtype="float64", rtol=tol, atol=tol)
    assert stop.status[0] == 1 and abs(stop.t[0] - np.pi / 2) < 1e-9


# --- every backend against the reference ----------------------------------------------
def _reference(src, h0, **kw):
    """The numpy reference of a call, computed once for the backends that compare with it
    (cpu and glsl share the float64 ones: tests/once.py)."""
    return once(vgpu.solve, src, h0, backend="numpy", **kw)


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
@pytest.mark.parametrize("name", METHODS)
def test_backends_match_numpy(name, backend, request):
    """A Lorenz sweep, plain and with save_at, then an event: the same steps and the
    same numbers as the numpy reference (float64; float32 on wgpu). In float32 the
    interpolated values differ by the rounding of the interpolant's weights: vern9's
    reach 1e4 (the sum of one stage's |r_sp| 3.4e4), so about 3e4 * 2^-24 of a step's
    change, near 1e-2 here."""
    on(backend, request)
    dtype = "float32" if backend == "wgpu" else "float64"
    tol = 1e-5 if dtype == "float32" else 1e-9
    close = dict(rtol=2e-3, atol=2e-3) if dtype == "float32" else dict(rtol=1e-8, atol=1e-8)
    n = 6
    rho = np.linspace(5, 28, n)
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    src = LORENZ.replace("METHOD", name)
    ts = np.linspace(0, 1, 9)
    for kw in ({}, {"save_at": ts}):
        ref = _reference(src, h0, params={"rho": rho}, dtype=dtype, rtol=tol, atol=tol, **kw)
        got = vgpu.solve(src, h0, params={"rho": rho}, backend=backend, dtype=dtype,
                         rtol=tol, atol=tol, **kw)
        assert (got.status == 0).all()
        assert np.abs(got.steps_taken.astype(int) - ref.steps_taken).max() <= 1
        np.testing.assert_allclose(got.states, ref.states, **close)
        if kw:
            loose = dict(close, atol=3e-2) if dtype == "float32" and name == "vern9" else close
            np.testing.assert_allclose(got.history, ref.history, **loose)
    ev = src.replace("solve", "stop when z > 20\n    solve")
    ref = _reference(ev, h0, params={"rho": rho}, dtype=dtype, rtol=tol, atol=tol)
    got = vgpu.solve(ev, h0, params={"rho": rho}, backend=backend, dtype=dtype, rtol=tol,
                     atol=tol)
    np.testing.assert_array_equal(got.status, ref.status)
    assert (ref.status == 1).any()
    np.testing.assert_allclose(got.t, ref.t, **close)


@pytest.mark.parametrize("backend", ["numpy", "cpu", "glsl"])
def test_simulation_reads_the_interpolant(backend, request):
    """A Simulation's advance(until=u) gives the values the interpolant gives at u, and
    the run to t1 is the plain call's."""
    on(backend, request)
    src = LORENZ.replace("METHOD", "vern9")
    h0 = np.tile([1.0, 0.0, 0.0], (3, 1))
    rho = np.array([10.0, 20.0, 28.0])
    kw = dict(params={"rho": rho}, backend=backend, dtype="float64", rtol=1e-9, atol=1e-9)
    saved = vgpu.solve(src, h0, save_at=[0.4, 1.0], **kw)
    sim = vgpu.Simulation(src, h0, **kw)
    sim.advance(until=0.4)
    np.testing.assert_allclose(sim.states, saved.history[0], rtol=1e-12, atol=1e-12)
    sim.advance(until=1.0)
    np.testing.assert_allclose(sim.states, saved.states, rtol=1e-12, atol=1e-12)


BASIN = """
field pair {
    param k
    input w[N]
    output tot[2]
    grid i < N
    basin b < 4
    state x
    coupled xc = x
    dx/dt = -k * x + 0.01 * mean(xc) + w[i] * t + 0 * dt
    solve METHOD(t1 = 1, rtol = 1e-9, atol = 1e-11)
    flux tot[i % 2] += x + float(step) * 0
}
"""


@pytest.mark.parametrize("backend", ["cpu", "glsl"])
@pytest.mark.parametrize("name", ["dop853", "vern9"])
def test_a_basin_shares_its_steps(name, backend, request):
    """Coupled lanes share one step size (dop853's norm folded over the basin): the
    reference's steps and values, with save_at."""
    on(backend, request)
    n = 8
    kw = dict(params={"k": np.linspace(0.5, 3, n)}, inputs={"w": np.linspace(0, 1, n)},
              dims={"N": n}, dtype="float64", save_at=[0.5, 1.0])
    src = BASIN.replace("METHOD", name)
    ref = vgpu.solve(src, np.ones(n), backend="numpy", **kw)
    got = vgpu.solve(src, np.ones(n), backend=backend, **kw)
    assert len(set(ref.steps_taken[:4])) == 1 and ref.steps_taken[0] != ref.steps_taken[4]
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-12, atol=1e-12)
