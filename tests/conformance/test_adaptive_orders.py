"""The orders of the first adaptive methods (bs3, dopri5, tsit5), measured as
tests/conformance/test_more_explicit_methods.py measures dop853's, vern7's and vern9's: fixed steps h
(dt0 = dtmax = h, tolerances so loose every step is accepted) halved twice; the error
at t1 falls by 2^p per halving, that of save_at values inside the steps (the continuous
extension: bs3's cubic Hermite, dopri5's and tsit5's order-4 interpolants) by at least
2^(its order). The truth is scipy's DOP853 at rtol 2.5e-14."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import vgpu

PENDULUM = """
field pendulum {
    state x, v
    dx/dt = v
    dv/dt = -sin(x) - 0.1 * v * x^2
    solve METHOD(t1 = 4)
}
"""
# (order of the solution, of the interpolant, the step sizes)
METHODS = {"bs3": (3, 3, (0.2, 0.1, 0.05)), "dopri5": (5, 4, (0.2, 0.1, 0.05)),
           "tsit5": (5, 4, (0.2, 0.1, 0.05))}


def _pendulum(t, y):
    return [y[1], -np.sin(y[0]) - 0.1 * y[1] * y[0] ** 2]


@pytest.mark.parametrize("name", METHODS)
def test_order_under_step_halving(name):
    p, pd, steps = METHODS[name]
    ref = solve_ivp(_pendulum, (0, 4), [2.0, 0.0], method="DOP853", rtol=2.5e-14,
                    atol=1e-15, dense_output=True)
    errs, herrs = [], []
    for h in steps:
        ts = np.arange(0, 4 - 1e-9, h) + 0.37 * h
        sol = vgpu.solve(PENDULUM.replace("METHOD", name), np.array([[2.0, 0.0]]),
                         backend="numpy", dtype="float64", rtol=1e3, atol=1e3, dt0=h,
                         dtmax=h, save_at=ts)
        assert sol.steps_taken[0] == round(4 / h) and sol.steps_rejected[0] == 0
        errs.append(np.abs(sol.states[0] - ref.sol(4.0)).max())
        herrs.append(np.abs(sol.history[:, 0, :].T - ref.sol(ts)).max())
    orders = np.log2(np.array(errs[:-1]) / errs[1:])
    dense_orders = np.log2(np.array(herrs[:-1]) / herrs[1:])
    assert np.all(orders > p - 0.3) and np.all(orders < p + 1), (errs, orders)
    assert np.all(dense_orders > pd - 0.3), dense_orders
