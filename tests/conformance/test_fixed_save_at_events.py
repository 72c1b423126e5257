"""A fixed-step method's ``save_at`` with events (docs/language.md, "save_at"), ``dt`` in
the partial steps after an event, and the location of the first crossing in a coarse
step, on every backend: against closed forms, hand-written float64 loops and the numpy
reference.

- save_at: each time from the cubic Hermite interpolant of the (partial) step that
  covers it, after the events before it; a time equal to an event time is the state
  after the event's assignments; saving changes no step, event or final state.
- ``dt``, as a field reads it, is a partial step's length in every stage of it, and
  the full dt again in the next full step.
- A condition that holds, stops and holds again inside one step is located at its
  first crossing (ir.events.SAMPLES samples before the bisection).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import StatusWarning

from event_fields import G, ball, bounce_times

BACKENDS = ["numpy", "cpu", "glsl", "wgpu"]


def solve(src, backend, request, h0=None, **kw):
    if backend != "numpy":
        request.getfixturevalue(backend)    # its fixture: skip, or fail on CI
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatusWarning)
        sol = vgpu.solve(src, h0, backend=backend, **kw)
    assert sol.backend == backend
    return sol


def dtype_of(backend: str) -> str:
    return "float32" if backend == "wgpu" else "float64"


def ball_closed_form(t, height: float, e: float):
    """(y, v) of a ball dropped from rest at ``height``, restitution e, at times t."""
    hits = bounce_times(height, e, 60)
    y, v = np.empty_like(t), np.empty_like(t)
    for j, s in enumerate(t):
        k = int(np.searchsorted(hits, s, side="right"))     # bounces at or before s
        if k == 0:
            y[j], v[j] = height - G / 2 * s * s, -G * s
        else:
            v0 = e ** k * math.sqrt(2 * G * height)
            dt = s - hits[k - 1]
            y[j], v[j] = v0 * dt - G / 2 * dt * dt, v0 - G * dt
    return y, v


# --- save_at with events ---------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_ball_save_at_matches_the_closed_form(backend, request):
    """rk4 integrates the falling ball exactly and the cubic Hermite holds a parabola:
    the saved states are the closed form's, bounces included, to the location's
    bracket (and float32 on wgpu)."""
    heights = np.array([1.0, 1.7, 0.6])
    times = np.linspace(0, 2.5, 101)
    sol = solve(ball("rk4(dt = 0.01, steps = 250)"), backend, request, heights,
                save_at=times, dtype=dtype_of(backend))
    assert sol.history.shape == (len(times), 3, 3)
    np.testing.assert_array_equal(sol.times, times.astype(sol.times.dtype))
    tol = 2e-4 if backend == "wgpu" else 1e-8
    for j, height in enumerate(heights):
        y, v = ball_closed_form(times, height, 0.9)
        np.testing.assert_allclose(sol.history[:, j, 0], y, atol=tol)
        np.testing.assert_allclose(sol.history[:, j, 1], v, atol=tol * 10)
        count = np.searchsorted(bounce_times(height, 0.9, 60), times, side="right")
        np.testing.assert_array_equal(sol.history[:, j, 2], count)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("basin", ["", "basin l < 2"])
def test_saving_changes_no_step_event_or_final_state(backend, basin, request):
    """The same call with and without save_at: states, t, status, steps and event
    counts bit-identical; and on the compiled backends the history equals numpy's."""
    heights = np.array([1.0, 1.3, 1.9, 2.4])
    K = np.array([3.0, 5.0, 2.0, 40.0])
    src = ball("heun(dt = 0.01, steps = 400)", basin)
    times = np.concatenate([[0.0], np.sort(np.random.default_rng(4).uniform(0, 4, 40)), [4.0]])
    kw = dict(params={"K": K}, dtype=dtype_of(backend))
    plain = solve(src, backend, request, heights, **kw)
    saved = solve(src, backend, request, heights, save_at=times, **kw)
    for name in ("states", "t", "status", "steps_taken", "event_counts"):
        np.testing.assert_array_equal(getattr(saved, name), getattr(plain, name), err_msg=name)
    if backend != "numpy":
        ref = solve(src, "numpy", request, heights, save_at=times, **kw)
        if backend == "cpu":
            np.testing.assert_array_equal(saved.history, ref.history)
        else:
            np.testing.assert_allclose(saved.history, ref.history, rtol=1e-5, atol=1e-5)
    assert (saved.status == 1).sum() == 3
    for j in np.nonzero(saved.status == 1)[0]:      # stopped: later times repeat the end
        late = times >= saved.t[j]
        np.testing.assert_array_equal(saved.history[late, j],
                                      np.broadcast_to(saved.states[j], (late.sum(), 3)))


RECORD = """field rec {
    state x = 0, te = -1, n = 0
    dx/dt = 1 + 0.5 * x
    dte/dt = 0
    dn/dt = 0
    when x > 0.3 { x = x - 0.3; te = t; n = n + 1 }
    solve rk4(dt = 0.1, steps = 10)
}"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_time_equal_to_an_event_time_gives_the_state_after_it(backend, request):
    """The first event's time (te, recorded by the event) as a save time: the state
    there is after the assignments (x = 0.3 - 0.3, te set, n = 1); just before it the
    state before (x near 0.3, n = 0)."""
    dt = dtype_of(backend)
    first = solve(RECORD.replace("steps = 10", "steps = 3"), backend, request, dtype=dt,
                  dims={"N": 1})
    te = float(first.states[..., 1].ravel()[0])
    assert 0.2 < te < 0.3
    before = np.nextafter(np.asarray(te, dt), np.asarray(0, dt))
    sol = solve(RECORD, backend, request, save_at=np.array([before, te, 0.3]), dtype=dt,
                dims={"N": 1})
    tol = 1e-5 if dt == "float32" else 1e-12
    at = sol.history[1].ravel()
    assert at[2] == 1 and at[1] == np.asarray(te, dt) and abs(at[0]) < tol
    was = sol.history[0].ravel()
    assert was[2] == 0 and was[1] == -1 and abs(was[0] - 0.3) < 1e-4


LIF = """field lif {
    param I = 1.5
    param tau = 0.02
    state v = 0
    dv/dt = (I - v) / tau
    when v > 1 { v = 0 }
    solve rk4(dt = 1e-4, steps = 2000)
}"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_lif_save_at_matches_the_closed_form(backend, request):
    """Between spikes v = I (1 - exp(-(t - t_k) / tau)), t_k = k tau ln(I / (I - 1))."""
    currents = np.array([1.5, 2.0, 3.1])
    times = np.linspace(0, 0.2, 97)
    sol = solve(LIF, backend, request, params={"I": currents}, save_at=times,
                dtype=dtype_of(backend))
    for j, current in enumerate(currents):
        period = 0.02 * math.log(current / (current - 1))
        since = times - np.floor(times / period) * period
        want = current * (1 - np.exp(-since / 0.02))
        np.testing.assert_allclose(sol.history[:, j], want, atol=2e-4 if backend == "wgpu"
                                   else 1e-6)


# --- dt in a partial step ------------------------------------------------------------
DT_FIELD = """field dtread {
    state x = 0, y = 0
    dx/dt = (1 + x) * dt
    dy/dt = 1
    when y > 0.25 { y = -10 }
    solve rk4(dt = 0.1, steps = 5)
}"""


def _rk4(f, x, t, h):
    k1 = f(t, x, h)
    k2 = f(t + h / 2, x + h / 2 * k1, h)
    k3 = f(t + h / 2, x + h / 2 * k2, h)
    k4 = f(t + h, x + h * k3, h)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def _dt_field_by_hand() -> float:
    """x(0.5) of DT_FIELD in float64: rk4 steps of 0.1 in which `dt` is 0.1; the event
    at t = 0.25 (y = t) on step [0.2, 0.3]'s cubic Hermite (its slopes with dt = 0.1),
    then the rest of that step, [0.25, 0.3], one rk4 step in which `dt` is 0.05."""
    f = lambda t, x, h: (1 + x) * h     # noqa: E731
    x = 0.0
    for n in range(2):
        x = _rk4(f, x, 0.1 * n, 0.1)
    x0, x1 = x, _rk4(f, x, 0.2, 0.1)
    theta, h = 0.5, 0.1
    h00, h10 = 1 - 3 * theta ** 2 + 2 * theta ** 3, theta - 2 * theta ** 2 + theta ** 3
    h01, h11 = 3 * theta ** 2 - 2 * theta ** 3, theta ** 3 - theta ** 2
    x = h00 * x0 + h10 * h * f(0, x0, h) + h01 * x1 + h11 * h * f(0, x1, h)
    x = _rk4(f, x, 0.25, 0.05)
    for n in range(3, 5):
        x = _rk4(f, x, 0.1 * n, 0.1)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_dt_in_a_partial_step_is_its_length(backend, request):
    sol = solve(DT_FIELD, backend, request, dtype=dtype_of(backend), dims={"N": 1})
    want = _dt_field_by_hand()
    assert sol.event_counts.ravel()[0] == 1
    tol = 1e-6 if backend == "wgpu" else 1e-11
    assert abs(float(sol.states.ravel()[0]) - want) < tol, (sol.states, want)


# --- the first crossing in a coarse step --------------------------------------------------
def _crossing(method: str) -> str:
    return f"""field cross {{
    state p = 0
    dp/dt = 1
    stop when (p - 0.1) * (p - 0.3) * (p - 0.8) > 0
    solve {method}
}}"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["rk4(dt = 1, steps = 1)",
                                    "dopri5(t1 = 1, dt0 = 1, dtmax = 1, rtol = 1, atol = 1)"])
def test_the_first_crossing_in_a_coarse_step_is_located(backend, method, request):
    """(t - 0.1)(t - 0.3)(t - 0.8) > 0 holds on (0.1, 0.3), then from 0.8: one step over
    [0, 1] locates 0.1 (a plain bisection, false at theta = 1/2, found 0.8)."""
    sol = solve(_crossing(method), backend, request, dtype=dtype_of(backend), dims={"N": 1})
    assert sol.status.ravel()[0] == 1
    tol = 1e-5 if backend == "wgpu" else 1e-10
    assert abs(float(sol.t.ravel()[0]) - 0.1) < tol, sol.t
