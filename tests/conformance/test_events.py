"""Events (`when`, `stop when`) on the numpy reference: closed forms and scipy.

The bouncing ball under constant g is a polynomial between bounces, which rk4
integrates exactly, so its located bounce times and apex heights match the closed
form to rounding (bisection to 2^-40 of a 0.01 step in float64). Integrate-and-fire
neurons fire with period tau * ln(I / (I - 1)). scipy's solve_ivp with events (a
terminal one, at tight tolerances) is the truth for a nonlinear field.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import StatusWarning
from vgpu_compiler.ir.events import BISECTIONS, BRACKET

from event_fields import apex, ball, bounce_times, lif, lif_count

solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp


def run(src, h0=None, **kw):
    kw.setdefault("backend", "numpy")
    kw.setdefault("dtype", "float64")
    return vgpu.solve(src, h0, **kw)


def test_bisection_constants_match_the_bracket():
    for dtype, k in BISECTIONS.items():
        assert 2.0 ** -k < BRACKET[dtype] <= 2.0 ** -(k - 1)


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 1000)", "dopri5(t1 = 10)"])
def test_ball_bounce_times_match_the_closed_form(method):
    heights = np.array([1.0, 1.7, 2.3])
    K = np.arange(1, 11, dtype=float)
    h0 = np.repeat(heights, 10)
    k = np.tile(K, 3)
    sol = run(ball(method), h0, params={"K": k})
    want = np.array([bounce_times(h, 0.9, 10)[int(n) - 1] for h, n in zip(h0, k)])
    assert (sol.status == 1).all()
    tol = 1e-12 if method.startswith("rk4") else 1e-6
    np.testing.assert_allclose(sol.t, want, rtol=0, atol=tol)
    assert (sol.event_counts[:, 0] == k).all()
    # the velocity just after the K-th bounce: e^K * sqrt(2 g h)
    np.testing.assert_allclose(sol.states[:, 1], 0.9 ** k * np.sqrt(2 * 9.81 * h0),
                               rtol=0, atol=100 * tol)


def test_ball_apex_heights_match_the_closed_form():
    """Ten bounces: the highest point after each (from a history every step) is
    h * e^(2k)."""
    src = ball("rk4(dt = 0.001, steps = 6000)")
    sol = run(src, np.array([1.0]), save_every=1)
    y, n = sol.history[:, 0, 0], sol.history[:, 0, 2]
    for k in range(1, 8):
        top = y[n == k].max()
        assert abs(top - apex(1.0, 0.9, k)) < 1e-5       # sampled at steps of 1e-3
    assert sol.event_counts[0, 0] == 10 or sol.event_counts[0, 0] > 10


def test_lif_spike_counts_match_the_closed_form_over_a_sweep():
    current = np.linspace(1.1, 4.0, 23)
    for method in ["rk4(dt = 1e-4, steps = 10000)", "dopri5(t1 = 1, rtol = 1e-9, atol = 1e-12)"]:
        sol = run(lif(method), params={"I": current}, dims={"N": 23})
        want = lif_count(current, 1.0)
        assert (sol.event_counts[:, 0] == want).all(), method
        np.testing.assert_array_equal(sol.outputs["spikes"], want)
        assert sol.outputs["bins"].sum() == want.sum()


def test_flux_in_when_deposits_at_each_firing_with_the_event_time():
    src = """field f {
        output times[8]
        state x = 0, n = 0
        dx/dt = 1
        dn/dt = 0
        when x > 0.25 { x = 0; n = n + 1; flux times[int(n)] += t }
        solve rk4(dt = 0.1, steps = 10)
    }"""
    sol = run(src, dims={"N": 1})
    # flux values see the state before the assignments (n = 0 at the first); x > 0.25
    # holds just after t = 0.25, 0.5, 0.75 (at 1.0 x is 0.25 less the bracket: no fourth)
    np.testing.assert_allclose(sol.outputs["times"][:5], [0.25, 0.5, 0.75, 0, 0], atol=1e-11)
    assert sol.event_counts[0, 0] == 3


def test_condition_holding_at_t0_fires_only_after_being_false():
    src = """field f {
        state x = 1, n = 0
        dx/dt = -1
        dn/dt = 0
        when x > 0.5 { n = n + 1 }
        solve rk4(dt = 0.1, steps = 10)
    }"""
    sol = run(src, dims={"N": 1})
    assert sol.event_counts[0, 0] == 0          # true at t0, then false: never fires
    src2 = src.replace("dx/dt = -1", "dx/dt = where(t < 0.6, -1.0, 1.0)")
    sol = run(src2, dims={"N": 1})
    assert sol.event_counts[0, 0] == 1          # false after t = 0.5, true again later
    np.testing.assert_allclose(sol.t, 1.0)


def test_two_events_in_one_step_happen_in_time_order():
    """Both conditions turn true inside one step: the earlier happens first and the
    later sees its assignment."""
    src = """field f {
        state x = 0, a = 0, b = 0
        dx/dt = 1
        da/dt = 0
        db/dt = 0
        when x > 0.7 { b = a + 10 }
        when x > 0.3 { a = t }
        solve euler(dt = 1, steps = 1)
    }"""
    sol = run(src, dims={"N": 1})
    x, a, b = sol.states[0]
    np.testing.assert_allclose(a, 0.3, atol=1e-11)
    np.testing.assert_allclose(b, 10.3, atol=1e-11)
    assert x == pytest.approx(1.0)
    assert sol.event_counts[0].tolist() == [1, 1]


def test_events_at_one_time_happen_in_written_order_and_see_each_other():
    src = """field f {
        state x = 0, n = 0, m = 0
        dx/dt = 1
        dn/dt = 0
        dm/dt = 0
        when x > 0.5 { n = n + 1 }
        when x > 0.5 { m = n * 10 }
        stop when n >= 1
        solve rk4(dt = 0.1, steps = 10)
    }"""
    sol = run(src, dims={"N": 1})
    x, n, m = sol.states[0]
    assert (n, m) == (1, 10)
    assert sol.status[0] == 1
    np.testing.assert_allclose(sol.t[0], 0.5, atol=1e-11)


def test_zeno_ball_ends_with_status_4_at_the_accumulation_time():
    """Restitution 0.5 bounces infinitely often before t* = t1 (1 + e) / (1 - e)."""
    t_star = math.sqrt(2 / 9.81) * 3
    for method in ["rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3)"]:
        for dtype in ("float64", "float32"):
            with pytest.warns(StatusWarning, match="too many events"):
                sol = run(ball(method), np.array([1.0]), params={"e": 0.5}, dtype=dtype)
            assert sol.status[0] == 4
            assert abs(sol.t[0] - t_star) < (1e-6 if dtype == "float64" else 1e-4)
            assert sol.event_counts[0, 0] >= 64


def test_events_against_scipy_solve_ivp_terminal_event():
    """A pendulum released at angle a stops when it crosses zero; solve_ivp's located
    event (DOP853, rtol = atol = 1e-12) is the truth."""
    src = """field pendulum {
        state x, w = 0
        dx/dt = w
        dw/dt = -sin(x)
        stop when x < 0
        solve %s
    }"""
    a = np.array([0.3, 1.0, 2.0, 3.0])
    truth = []
    for a0 in a:
        ev = lambda t, y: y[0]       # noqa: E731
        ev.terminal, ev.direction = True, -1
        r = solve_ivp(lambda t, y: [y[1], -np.sin(y[0])], (0, 20), [a0, 0], method="DOP853",
                      rtol=1e-12, atol=1e-12, events=ev)
        truth.append(r.t_events[0][0])
    for method, tol in [("rk4(dt = 0.001, steps = 20000)", 1e-9),
                        ("dopri5(t1 = 20, rtol = 1e-10, atol = 1e-12)", 1e-8),
                        ("tsit5(t1 = 20, rtol = 1e-10, atol = 1e-12)", 1e-8),
                        ("bs3(t1 = 20, rtol = 1e-8, atol = 1e-10)", 1e-5)]:
        sol = run(src % method, a)
        assert (sol.status == 1).all(), method
        np.testing.assert_allclose(sol.t, truth, rtol=0, atol=tol, err_msg=method)
        assert (np.abs(sol.states[:, 0]) < 10 * tol).all()


def test_lif_with_reset_matches_scipy_spike_times():
    """Spike times of a neuron driven by a sine, against solve_ivp with a reset loop."""
    src = """field f {
        param tau = 0.02
        output times[40]
        state v = 0, n = 0
        dv/dt = (2 + sin(40 * t) - v) / tau
        dn/dt = 0
        when v > 1 { v = 0; flux times[int(n)] += t; n = n + 1 }
        solve dopri5(t1 = 0.5, rtol = 1e-10, atol = 1e-12)
    }"""
    sol = run(src, dims={"N": 1})
    ev = lambda t, y: y[0] - 1      # noqa: E731
    ev.terminal, ev.direction = True, 1
    t, spikes = 0.0, []
    while True:
        r = solve_ivp(lambda t, y: [(2 + np.sin(40 * t) - y[0]) / 0.02], (t, 0.5), [0.0],
                      method="DOP853", rtol=1e-12, atol=1e-12, events=ev)
        if r.status != 1:
            break
        t = r.t_events[0][0]
        spikes.append(t)
    n = len(spikes)
    assert sol.event_counts[0, 0] == n
    np.testing.assert_allclose(sol.outputs["times"][:n], spikes, rtol=0, atol=1e-8)


def test_basin_step_ends_at_the_earliest_event_of_its_lanes():
    """In a basin, every lane steps to each lane's event time: the ball's bounce times
    (rk4 is exact between bounces) are unchanged, and stopped lanes keep their state."""
    heights = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1])
    K = np.array([3, 5, 2, 10, 4, 1], float)
    sol = run(ball("rk4(dt = 0.01, steps = 1000)", basin="basin l < 4"), heights,
              params={"K": K})
    want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(heights, K)]
    assert (sol.status == 1).all()
    np.testing.assert_allclose(sol.t, want, atol=1e-11)
    np.testing.assert_allclose(sol.states[:, 0], 0, atol=1e-9)
    assert sol.event_counts[:, 0].tolist() == K.astype(int).tolist()


def test_coupled_basin_with_events_matches_per_lane_stepping():
    """A coupled mean in a basin: stops freeze a lane, whose coupled value stays its
    final state's; the others keep integrating."""
    src = """field f {
        basin l < 4
        state x
        coupled s = x
        dx/dt = 1 + 0 * mean(s)
        stop when x > 2
        solve rk4(dt = 0.1, steps = 30)
    }"""
    sol = run(src, np.array([0.0, 0.5, 1.0, 1.5]))
    np.testing.assert_allclose(sol.t, [2.0, 1.5, 1.0, 0.5], atol=1e-11)
    np.testing.assert_allclose(sol.states, 2.0, atol=1e-11)


def test_status_t_steps_for_stopped_trajectories_fixed_step():
    src = """field f {
        state x = 0
        dx/dt = 1
        stop when x >= 0.25
        solve euler(dt = 0.1, steps = 10)
    }"""
    sol = run(src, dims={"N": 1})
    assert sol.status[0] == 1
    np.testing.assert_allclose(sol.t[0], 0.25, atol=1e-11)
    assert sol.steps_taken[0] == 3          # the step in which it stopped counts
    assert sol.event_counts.shape == (1, 0)


def test_event_counts_shape_and_dtype():
    sol = run(lif("rk4(dt = 1e-3, steps = 100)"), params={"I": np.array([1.5, 2.0])},
              dims={"N": 2})
    assert sol.event_counts.dtype == np.int32 and sol.event_counts.shape == (2, 1)
    plain = run("field f {\n state x\n dx/dt = 1\n solve euler(dt = 1, steps = 1)\n}",
                np.zeros(3))
    assert plain.event_counts.shape == (3, 0)


def test_noise_events_happen_at_the_step_end():
    src = """field f {
        noise xi
        state x = 0, n = 0
        dx/dt = 1 + 0 * xi
        dn/dt = 0
        when x > 0.25 { x = 0; n = n + 1 }
        solve euler(dt = 0.1, steps = 10)
    }"""
    sol = run(src, dims={"N": 2})
    # x reaches 0.3 > 0.25 at the end of step 3 (no location): reset there, three times
    assert sol.event_counts[:, 0].tolist() == [3, 3]
    np.testing.assert_allclose(sol.states[:, 0], 0.1, atol=1e-12)


def test_float32_ball_bounce_times():
    sol = run(ball("rk4(dt = 0.01, steps = 1000)"), np.array([1.0, 2.0]),
              params={"K": np.array([10.0, 10.0])}, dtype="float32")
    want = [bounce_times(h, 0.9, 10)[-1] for h in (1.0, 2.0)]
    np.testing.assert_allclose(sol.t, want, atol=2e-5)


def test_save_every_with_events():
    sol = run(ball("rk4(dt = 0.01, steps = 100)"), np.array([1.0]), save_every=10)
    assert sol.history.shape == (11, 1, 3)
    np.testing.assert_allclose(sol.history[-1], sol.states)


def test_save_at_with_events():
    """Adaptive: the saved states come from the extension inside each step, up to the
    event (fixed steps: test_fixed_save_at_events.py)."""
    times = np.linspace(0, 3, 31)
    sol = run(ball("dopri5(t1 = 3, rtol = 1e-9, atol = 1e-12)"), np.array([1.0]),
              save_at=times)
    t1 = bounce_times(1.0, 0.9, 1)[0]
    before = times < t1
    np.testing.assert_allclose(sol.history[before, 0, 0], 1 - 9.81 / 2 * times[before] ** 2,
                               atol=1e-8)
