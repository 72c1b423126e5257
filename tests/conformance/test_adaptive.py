"""Adaptive methods (bs3, dopri5, tsit5) on the numpy reference, against scipy.

scipy's ``solve_ivp(method="DOP853", rtol=atol=1e-12)`` in float64 is the truth;
scipy's ``RK45`` (the same pair and controller as dopri5) is the yardstick for
step counts. Coefficients are checked against scipy's own copies where it has them.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.ir import controller as C
from vgpu_compiler.ir.embedded import ADAPTIVE, DOPRI5, BS3, dense_coefficients
from vgpu_compiler.ir.step import step_program

scipy_ivp = pytest.importorskip("scipy.integrate")
solve_ivp = scipy_ivp.solve_ivp

METHODS = ("bs3", "dopri5", "tsit5")

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
    solve METHOD(t1 = 6)
}
"""

DECAY = """
field decay {
    param k
    state x
    dx/dt = -k * x
    solve METHOD(t1 = 1)
}
"""


BACKENDS = ["numpy", "glsl", "cpu"]


def on(backend, request):
    """The backend name; a compiled backend's test needs it (its conftest fixture)."""
    if backend != "numpy":
        request.getfixturevalue(backend)
    return backend


def truth(f, y0, t1, t_eval=None):
    r = solve_ivp(f, (0.0, t1), y0, method="DOP853", rtol=1e-12, atol=1e-12, t_eval=t_eval)
    assert r.success
    return r.y


# --- the coefficients ------------------------------------------------------------------
def test_dopri5_coefficients_are_scipys():
    from scipy.integrate._ivp.rk import RK45
    b = np.array([float(x) for x in DOPRI5.b[:6]])
    np.testing.assert_allclose(b, RK45.B, rtol=0, atol=1e-16)
    np.testing.assert_allclose([float(x) for x in DOPRI5.err], RK45.E, rtol=0, atol=1e-16)
    np.testing.assert_allclose(np.array(DOPRI5.dense, float), RK45.P, rtol=1e-15, atol=0)
    for s, row in enumerate(DOPRI5.a[1:6], 1):
        np.testing.assert_allclose([float(x) for x in row], RK45.A[s, :s], rtol=0, atol=1e-16)


def test_bs3_coefficients_are_scipys():
    from scipy.integrate._ivp.rk import RK23
    np.testing.assert_allclose([float(x) for x in BS3.b[:3]], RK23.B, atol=1e-16)
    np.testing.assert_allclose(np.abs([float(x) for x in BS3.err]), np.abs(RK23.E), atol=1e-16)


@pytest.mark.parametrize("name", METHODS)
def test_tableaux_are_consistent(name):
    """Row sums are the nodes, weights sum to 1, the error weights to 0, the continuous
    extension at theta = 1 is the step itself, FSAL: the last row of a is b."""
    tab = ADAPTIVE[name]
    for s, row in enumerate(tab.a):
        assert abs(float(sum(row) - tab.c[s])) < 1e-15
    assert abs(float(sum(tab.b)) - 1) < 1e-15
    assert abs(float(sum(tab.err))) < 1e-15
    for row, b in zip(dense_coefficients(tab), tab.b):
        assert abs(float(sum(row) - b)) < 1e-15
    assert tuple(tab.a[-1]) == tuple(tab.b[:-1]) and tab.b[-1] == 0
    program = step_program(tab)
    assert program.fsal and program.q == (2 if name == "bs3" else 4)


# --- accuracy against DOP853 --------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_lorenz_sweep_matches_scipy(method, backend, request):
    n = 12
    rho = np.linspace(0, 21, n)
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    tol = 1e-8
    sol = vgpu.solve(LORENZ.replace("METHOD", method), h0, params={"rho": rho},
                     backend=on(backend, request), dtype="float64", rtol=tol, atol=tol)
    assert (sol.status == 0).all() and np.all(sol.t == 1.0)
    for i, r in enumerate(rho):
        def f(t, y, r=r):
            return [10 * (y[1] - y[0]), y[0] * (r - y[2]) - y[1], y[0] * y[1] - 8 / 3 * y[2]]
        want = truth(f, h0[i], 1.0)[:, -1]
        err = np.abs(sol.states[i] - want) / (tol + tol * np.abs(want))
        assert err.max() < 200, (method, r, err)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_vanderpol_mu_sweep_matches_scipy_with_save_at(method, backend, request):
    mu = np.array([0.1, 0.5, 1.0, 2.0, 5.0, 10.0])
    h0 = np.tile([2.0, 0.0], (len(mu), 1))
    times = np.linspace(0, 6, 13)
    tol = 1e-7
    sol = vgpu.solve(VDP.replace("METHOD", method), h0, params={"mu": mu},
                     backend=on(backend, request), dtype="float64", rtol=tol, atol=tol,
                     save_at=times)
    assert sol.history.shape == (13, len(mu), 2)
    np.testing.assert_array_equal(sol.times, times)
    for i, m in enumerate(mu):
        def f(t, y, m=m):
            return [y[1], m * (1 - y[0] ** 2) * y[1] - y[0]]
        want = truth(f, h0[i], 6.0, t_eval=times)
        scale = tol + tol * np.abs(want.T)
        assert (np.abs(sol.states[i] - want[:, -1]) / scale[-1]).max() < 500, (method, m)
        assert (np.abs(sol.history[:, i] - want.T) / scale).max() < 500, (method, m)
    np.testing.assert_array_equal(sol.history[-1], sol.states)
    np.testing.assert_array_equal(sol.history[0], h0)


def test_saving_never_changes_the_steps():
    mu = np.array([0.5, 3.0])
    h0 = np.tile([2.0, 0.0], (2, 1))
    src = VDP.replace("METHOD", "tsit5")
    plain = vgpu.solve(src, h0, params={"mu": mu}, backend="numpy", dtype="float64")
    saved = vgpu.solve(src, h0, params={"mu": mu}, backend="numpy", dtype="float64",
                       save_at=np.linspace(0, 6, 101))
    np.testing.assert_array_equal(plain.states, saved.states)
    np.testing.assert_array_equal(plain.steps_taken, saved.steps_taken)
    np.testing.assert_array_equal(plain.steps_rejected, saved.steps_rejected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_decay_rates_over_four_decades(method, backend, request):
    k = np.logspace(-2, 2, 9)
    tol = 1e-8
    sol = vgpu.solve(DECAY.replace("METHOD", method), np.ones(9), params={"k": k},
                     backend=on(backend, request), dtype="float64", rtol=tol, atol=tol)
    err = np.abs(sol.states - np.exp(-k)) / (tol + tol * np.exp(-k))
    assert err.max() < 100, err


@pytest.mark.parametrize("backend", BACKENDS)
def test_decay_steps_follow_each_rate_like_scipy_rk45(backend, request):
    """Per-trajectory adaptivity: each rate's accepted steps are within 1.5x of scipy's
    RK45 for that rate alone, and the ensemble's total is far below N x the hardest."""
    k = np.logspace(-2, 2, 17)
    rtol, atol = 1e-6, 1e-9
    sol = vgpu.solve(DECAY.replace("METHOD", "dopri5"), np.ones(len(k)), params={"k": k},
                     backend=on(backend, request), dtype="float64", rtol=rtol, atol=atol)
    for i, kk in enumerate(k):
        r = solve_ivp(lambda t, y, kk=kk: -kk * y, (0, 1), [1.0], method="RK45",
                      rtol=rtol, atol=atol)
        ours, theirs = int(sol.steps_taken[i]), r.t.size - 1
        assert theirs / 1.5 <= ours <= theirs * 1.5, (kk, ours, theirs)
    assert sol.steps_taken.sum() < 0.5 * len(k) * sol.steps_taken.max()
    assert sol.steps_taken.max() > 10 * sol.steps_taken.min()


def test_float32_meets_a_float32_tolerance():
    k = np.logspace(-1, 1, 5)
    tol = 1e-5
    sol = vgpu.solve(DECAY.replace("METHOD", "tsit5"), np.ones(5), params={"k": k},
                     backend="numpy", dtype="float32", rtol=tol, atol=tol)
    assert sol.states.dtype == np.float32 and (sol.status == 0).all()
    assert np.abs(sol.states - np.exp(-k)).max() < 20 * tol


# --- the controller's rules ---------------------------------------------------------------
def test_dt0_dtmax_and_last_step_cut():
    src = DECAY.replace("METHOD", "dopri5")
    a = vgpu.solve(src, np.ones(1), params={"k": 1.0}, backend="numpy", dtype="float64",
                   dtmax=0.1)
    assert a.steps_taken[0] >= 10 and a.t[0] == 1.0            # never a step above 0.1
    b = vgpu.solve(src, np.ones(1), params={"k": 1.0}, backend="numpy", dtype="float64",
                   dt0=1.0, rtol=1e-2, atol=1e-2)
    assert b.t[0] == 1.0 and b.status[0] == 0
    # t1 given at call time overrides the program's: no step past it
    c = vgpu.solve(src, np.ones(1), params={"k": 1.0}, backend="numpy", dtype="float64",
                   t1=0.3, rtol=1e-9, atol=1e-12)
    assert c.t[0] == 0.3 and abs(c.states[0] - np.exp(-0.3)) < 1e-8


def test_factor_rules():
    err = np.array([0.0, 1e-12, 0.5, 1.0, 4.0, 1e6, np.nan])
    f = C.factor(err, 4, np.zeros(7, bool))
    assert f[0] == C.FACTOR_MAX and f[1] == C.FACTOR_MAX
    assert f[2] == pytest.approx(0.9 * 0.5 ** -0.2) and f[3] == pytest.approx(0.9)
    assert f[5] == C.FACTOR_MIN and f[6] == C.FACTOR_MIN
    g = C.factor(err, 4, np.ones(7, bool))
    assert g.max() <= 1.0                                       # no growth after a reject


def test_status_max_steps_and_underflow_warn_once():
    blow = """
    field blow {
        state x
        dx/dt = x * x
        solve dopri5(t1 = 2)
    }"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sol = vgpu.solve(blow, np.array([1.0, -1.0]), backend="numpy", dtype="float64")
    assert sol.status.tolist() == [C.STEP_UNDERFLOW, 0]
    assert 0.99 < sol.t[0] < 1.0 and sol.t[1] == 2.0
    assert np.isfinite(sol.states[0])                          # its last accepted state
    status_warnings = [w for w in caught if issubclass(w.category, vgpu.StatusWarning)]
    assert len(status_warnings) == 1 and "1 of 2" in str(status_warnings[0].message)
    with pytest.warns(vgpu.StatusWarning, match="reached max_steps"):
        sol = vgpu.solve(DECAY.replace("METHOD", "bs3"), np.ones(2),
                         params={"k": np.array([0.01, 100.0])}, backend="numpy",
                         dtype="float64", max_steps=5)
    assert sol.status.tolist() == [0, C.MAX_STEPS] and sol.steps_taken[1] == 5
    assert sol.t[1] < 1.0
    assert sol.steps_rejected.dtype == np.int32 and sol.status.dtype == np.int8


def test_basin_shares_one_step_size():
    src = """
    field pair {
        param k
        grid i < N
        basin b < 4
        state x
        dx/dt = -k * x
        solve dopri5(t1 = 1, rtol = 1e-8, atol = 1e-10)
    }"""
    k = np.array([0.1, 1.0, 10.0, 50.0, 0.1, 0.2, 0.3, 0.4])
    sol = vgpu.solve(src, np.ones(8), params={"k": k}, backend="numpy", dtype="float64")
    assert len(set(sol.steps_taken[:4])) == 1 and len(set(sol.steps_taken[4:])) == 1
    assert sol.steps_taken[0] > 3 * sol.steps_taken[4]          # the stiff lane sets it
    np.testing.assert_allclose(sol.states, np.exp(-k), rtol=1e-6, atol=1e-9)


def test_fixed_step_methods_report_status_and_time():
    src = DECAY.replace("METHOD(t1 = 1)", "rk4(dt = 0.25, steps = 8)")
    sol = vgpu.solve(src, np.ones(3), params={"k": 1.0}, backend="numpy", dtype="float64")
    assert sol.status.tolist() == [0, 0, 0] and sol.t.tolist() == [2.0, 2.0, 2.0]
    assert sol.steps_rejected.tolist() == [0, 0, 0]


def test_every_trajectory_progresses_to_the_end():
    seen = []
    vgpu.solve(DECAY.replace("METHOD", "tsit5"), np.ones(4),
               params={"k": np.array([1.0, 2.0, 40.0, 0.5])}, backend="numpy",
               dtype="float64", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_auto_runs_adaptive_methods_on_the_reference():
    sol = vgpu.solve(DECAY.replace("METHOD", "dopri5"), np.ones(2), params={"k": 1.0},
                     dtype="float64")
    np.testing.assert_allclose(sol.states, np.exp(-1.0), rtol=1e-3)


@pytest.mark.parametrize("method, bound", [("rk4", 1e-7), ("heun", 1e-3), ("euler", 1e-1)])
def test_fixed_step_save_at_is_cubic_hermite(method, bound):
    """A fixed-step method's save_at values: the cubic Hermite interpolant of its own
    steps, as accurate as the method allows (vs. DOP853), the steps unchanged, and
    exactly the step's state at a step end."""
    src = VDP.replace("METHOD(t1 = 6)", f"{method}(dt = 0.01, steps = 300)")
    mu, h0 = np.array([0.5, 2.0]), np.tile([2.0, 0.0], (2, 1))
    times = np.array([0.0, 0.005, 0.123, 1.0, 2.2222, 2.999, 3.0])
    sol = vgpu.solve(src, h0, params={"mu": mu}, backend="numpy", dtype="float64",
                     save_at=times)
    every = vgpu.solve(src, h0, params={"mu": mu}, backend="numpy", dtype="float64",
                       save_every=100)
    np.testing.assert_array_equal(sol.states, every.states)
    np.testing.assert_array_equal(sol.history[[0, 3, 6]], every.history[[0, 1, 3]])
    for i, m in enumerate(mu):
        want = truth(lambda t, y, m=m: [y[1], m * (1 - y[0] ** 2) * y[1] - y[0]], h0[i], 3.0,
                     t_eval=times)
        assert np.abs(sol.history[:, i] - want.T).max() < bound, method


def test_compacting_the_working_set_changes_nothing(monkeypatch):
    """Finished rows leave the working set (per-lane params, starts, inputs indexed down):
    the same numbers as when every row is kept to the end."""
    from vgpu_compiler.backends.numpy import adaptive as numpy_adaptive
    src = """
    field pair {
        param k
        input w[N]
        grid i < N
        basin b < 2
        state x, v = x * 0.5
        coupled xc = x
        dx/dt = -k * x + 0.01 * mean(xc) + w[i] * v
        dv/dt = -v + 0.1 * init(x) + 0 * float(b)
        solve tsit5(t1 = 2, rtol = 1e-8, atol = 1e-10)
    }"""
    n = 40
    k = np.logspace(-1, 2, n)
    w = np.linspace(-1, 1, n)
    kw = dict(params={"k": k}, inputs={"w": w}, backend="numpy", dtype="float64",
              save_at=np.linspace(0, 2, 7))
    monkeypatch.setattr(numpy_adaptive, "COMPACT_BELOW", 10 ** 9)
    whole = vgpu.solve(src, np.ones(n), **kw)
    monkeypatch.setattr(numpy_adaptive, "COMPACT_BELOW", 0)
    compact = vgpu.solve(src, np.ones(n), **kw)
    for name in ("states", "steps_taken", "steps_rejected", "t", "status", "history"):
        np.testing.assert_array_equal(getattr(compact, name), getattr(whole, name))
    assert compact.steps_taken.max() > 5 * compact.steps_taken.min()


CONSTANT_RATE = """
field counter {
    state x, n
    dx/dt = -x
    dn/dt = 0
    solve dopri5(t1 = 1, rtol = 1e-8, atol = 1e-10)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_constant_derivative_beside_a_varying_one(backend, request):
    """dn/dt = 0 is one number, not an array per lane: the reference broadcasts it."""
    on(backend, request)
    h0 = np.ones((4, 2))
    out = vgpu.run_field(CONSTANT_RATE, h0, backend=backend, dtype="float64")
    np.testing.assert_allclose(out[:, 0], np.exp(-1.0), rtol=1e-7)
    np.testing.assert_array_equal(out[:, 1], 1.0)
