"""Events on the GLSL backend, against the numpy reference (and closed forms).

Everything runs inside the shader (codegen/build/events.py): the conditions,
the bisection, the events, flux at each firing, the partial steps. numpy and
GLSL must agree on event counts and located times.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import vgpu

from event_fields import ball, bounce_times, lif, lif_count, reference, solve_quietly

HEIGHTS = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1, 3.0])
K = np.array([3, 5, 2, 10, 4, 1, 7], float)


def both(src, h0=None, **kw):
    return [reference(src, h0, **kw), solve_quietly(src, h0, "glsl", **kw)]


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 1000)", "heun(dt = 0.005, steps = 2000)",
                                    "dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_ball_glsl_matches_numpy(glsl, method, basin):
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K})
    assert got.backend == "glsl"
    assert (got.status == ref.status).all() and (got.status == 1).all()
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-5)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.states, ref.states, atol=1e-4)
    if method.startswith("rk4"):
        want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(HEIGHTS, K)]
        np.testing.assert_allclose(got.t, want, atol=2e-5)


def test_ball_glsl_float64_closed_form(glsl):
    ref, got = both(ball("rk4(dt = 0.01, steps = 1000)"), HEIGHTS, params={"K": K},
                    dtype="float64")
    want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(HEIGHTS, K)]
    np.testing.assert_allclose(got.t, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.t, ref.t, rtol=0, atol=1e-13)


def test_lif_glsl_counts_and_flux_match_numpy_and_the_closed_form(glsl):
    current = np.linspace(1.1, 4.0, 37)
    for method in ["rk4(dt = 2e-4, steps = 5000)", "dopri5(t1 = 1, rtol = 1e-7)"]:
        ref, got = both(lif(method), params={"I": current}, dims={"N": 37})
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.event_counts[:, 0], lif_count(current, 1.0))
        np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
        np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])


def test_zeno_glsl_status_4(glsl):
    t_star = math.sqrt(2 / 9.81) * 3
    for method in ["rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3)"]:
        ref, got = both(ball(method), np.array([1.0, 2.0]), params={"e": 0.5})
        assert (got.status == 4).all() and (ref.status == 4).all()
        np.testing.assert_allclose(got.t[0], t_star, atol=1e-4)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_order_and_sweep_glsl(glsl):
    src = """field f {
        state x = 0, a = 0, b = 0, n = 0, m = 0
        dx/dt = 1
        da/dt = 0
        db/dt = 0
        dn/dt = 0
        dm/dt = 0
        when x > 0.7 { b = a + 10 }
        when x > 0.3 { a = t }
        when x > 0.5 { n = n + 1 }
        when x > 0.5 { m = n * 10 }
        stop when n >= 1 and x > 0.9
        solve euler(dt = 1, steps = 3)
    }"""
    ref, got = both(src, dims={"N": 3}, dtype="float64")
    np.testing.assert_allclose(got.states, ref.states, atol=1e-12)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    assert got.status.tolist() == ref.status.tolist() == [1, 1, 1]
    np.testing.assert_allclose(got.t, 0.9, atol=1e-11)


def test_coupled_basin_with_stops_glsl(glsl):
    src = """field f {
        basin l < 4
        state x, y = 0
        coupled s = x
        dx/dt = 1 + 0.1 * mean(s)
        dy/dt = x
        stop when x > 2
        solve rk4(dt = 0.1, steps = 30)
    }"""
    h0 = np.array([0.0, 0.5, 1.0, 1.5, 0.2, 0.3])
    ref, got = both(src, h0, dtype="float64")
    np.testing.assert_allclose(got.t, ref.t, atol=1e-12)
    np.testing.assert_allclose(got.states, ref.states, atol=1e-12)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)


def test_events_glsl_many_dispatches(glsl):
    """A run long enough for several dispatches: events carried between them."""
    current = np.linspace(1.5, 3.0, 300)
    ref, got = both(lif("euler(dt = 2e-5, steps = 15000)"), params={"I": current},
                    dims={"N": 300})
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_init_inside_an_event_glsl(glsl):
    """init(x) read only by an event: the kernel keeps the start values (b_init)."""
    src = """field f {
        state x
        dx/dt = 1
        when x > 2 * init(x) { x = init(x) }
        solve rk4(dt = 0.01, steps = 300)
    }"""
    ref, got = both(src, np.array([0.5, 1.0]))
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts[:, 0], [5, 2])   # (t = 3 ends on x == 2 init(x))
    np.testing.assert_allclose(got.states, ref.states, atol=1e-5)


SAVE_EVERY_CASES = [("rk4(dt = 0.01, steps = 1000)", "", 10),
                    ("rk4(dt = 0.01, steps = 1000)", "basin l < 4", 7),
                    ("heun(dt = 0.005, steps = 2000)", "", 300)]


@pytest.mark.parametrize("method,basin,every", SAVE_EVERY_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_save_every_with_events_glsl(glsl, method, basin, every, dtype):
    """save_every with events (a fixed-step method): the states at saved step ends, written
    in the shader; a stopped trajectory repeats its final state (as numpy)."""
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, save_every=every,
                    dtype=dtype)
    assert got.backend == "glsl" and got.history.shape == ref.history.shape
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-6, atol=1e-6)


def test_save_every_with_events_collapse_and_many_dispatches_glsl(glsl):
    src = """field f {
        basin l < 4
        state x, n = 0
        dx/dt = 1
        dn/dt = 0
        when x > 1 { x = 0; n = n + 1 }
        collapse when n >= 2
        solve rk4(dt = 0.1, steps = 60)
    }"""
    h0 = np.array([0.0, 0.5, 0.9, 0.2, 0.3, 0.7, 0.1, 0.05])
    ref, got = both(src, h0, save_every=4)
    np.testing.assert_array_equal(got.history, ref.history)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    current = np.linspace(1.5, 3.0, 300)
    ref, got = both(lif("euler(dt = 2e-5, steps = 15000)"), params={"I": current},
                    dims={"N": 300}, save_every=1000)
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


@pytest.mark.parametrize("method", ["dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_save_at_with_events_glsl(glsl, method, basin):
    """save_at with events (an adaptive method): the times up to an event from the step's
    extension, the event's own time the state after it (as numpy)."""
    times = np.linspace(0, 10, 201)
    for dtype in ("float32", "float64"):
        ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, save_at=times,
                        dtype=dtype)
        np.testing.assert_array_equal(got.times, ref.times)
        # (float32: the states' rounding over many steps, as test_ball_glsl_matches_numpy)
        atol = 2e-3 if dtype == "float32" else 1e-11
        np.testing.assert_allclose(got.history, ref.history, rtol=0, atol=atol)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_save_at_with_events_lif_glsl(glsl):
    current = np.linspace(1.1, 4.0, 37)
    times = np.linspace(0, 1, 77)
    ref, got = both(lif("dopri5(t1 = 1, rtol = 1e-7)"), params={"I": current},
                    dims={"N": 37}, save_at=times)
    np.testing.assert_allclose(got.history, ref.history, rtol=0, atol=1e-3)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


NOISY = """field f {
    noise xi
    %(basin)s
    param s = 0.5
    state v = 0, n = 0
    dv/dt = (1.5 - v) / 0.05 + s * xi * (1 + v)
    dn/dt = 0
    when v > 1 { v = 0; n = n + 1 }
    stop when n >= 12
    solve %(method)s(dt = 1e-3, steps = %(steps)d)
}"""


def noisy(method="euler", basin="", steps=2000):
    return NOISY % {"method": method, "basin": basin, "steps": steps}


@pytest.mark.parametrize("method", ["euler", "milstein"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_events_with_noise_glsl(glsl, method, basin, dtype):
    """Events in a stochastic field: conditions at step ends only, the same Philox normals
    (to log/cos rounding: tolerances as test_noise_run.py); a stopped lane of a basin
    keeps its state."""
    ref, got = both(noisy(method, basin), dims={"N": 8}, seed=7, dtype=dtype)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    assert ref.event_counts.sum() > 0 and (ref.status == 1).any()
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5, atol=1e-5)


def test_events_with_noise_at_step_ends_flux_and_save_every_glsl(glsl):
    src = """field f {
        noise xi
        output hits[N]
        state x = 0, n = 0
        dx/dt = 1 + 0 * xi
        dn/dt = 0
        when x > 0.25 { x = 0; n = n + 1; flux hits[i] += 1 }
        solve euler(dt = 0.1, steps = 10)
    }"""
    ref, got = both(src, dims={"N": 2}, save_every=3)
    assert got.event_counts[:, 0].tolist() == [3, 3]      # at step ends: no location
    np.testing.assert_allclose(got.states, ref.states, atol=1e-6)
    np.testing.assert_array_equal(got.outputs["hits"], ref.outputs["hits"])
    np.testing.assert_allclose(got.history, ref.history, atol=1e-6)
    ref, got = both(noisy(steps=15000), dims={"N": 100}, seed=3, save_every=1000)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["rk4(dt = 2e-4, steps = 5000)", "dopri5(t1 = 1, rtol = 1e-7)"])
def test_float64_flux_inside_when_glsl(glsl, method):
    """float64 `flux` inside `when` (no float64 atomics): an event log summed on the host in
    the reference's order (bit for bit where the event times are)."""
    current = np.linspace(1.1, 4.0, 37)
    src = lif(method).replace("flux spikes[i] += 1", "flux spikes[i] += t * 0.37")
    ref, got = both(src, params={"I": current}, dims={"N": 37}, dtype="float64")
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])
    if method.startswith("rk4"):
        np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
    else:       # (located times agree to ~1e-13)
        np.testing.assert_allclose(got.outputs["spikes"], ref.outputs["spikes"], rtol=1e-11)


def test_float64_flux_inside_when_log_overflow_and_basin_glsl(glsl, monkeypatch):
    """Several events and statements into one element, in a basin, with an event log too
    small at first: the chunk runs again with a larger one; the sums are numpy's."""
    from vgpu_compiler.backends.glsl import adaptive_run
    from vgpu_compiler.runtime import adaptive as driver
    src = """field f {
        basin l < 4
        param I = 1.5
        output spikes[N], bins[50]
        state v = 0
        dv/dt = (I + 0.3 * float(l) + 0.05 * float(i) - v) / 0.02
        when v > 1 { v = 0; flux spikes[i] += 0.1 * t; flux bins[clamp(int(t * 50), 0, 49)] += 0.3 + v }
        when v > 0.5 { flux bins[0] += 0.7 * t }
        solve rk4(dt = 2e-4, steps = 5000)
    }"""
    monkeypatch.setattr(driver, "LOG_FIRST", 4)
    seen = []
    trip = adaptive_run._Target.trip

    def spy(self, uniforms, sizes, writes, reads):
        out = trip(self, uniforms, sizes, writes, reads)     # [error, b_run, b_evn]
        seen.append(np.frombuffer(out[2], np.uint32)[0] > uniforms["u_logcap"])
        return out
    monkeypatch.setattr(adaptive_run._Target, "trip", spy)
    ref, got = both(src, dims={"N": 9}, dtype="float64")
    assert any(seen)                # (the log overflowed at least once)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
    np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])


def test_float64_flux_inside_when_small_storage_blocks_glsl(glsl):
    """A driver whose storage blocks hold only 100 records: fewer attempts per dispatch,
    the same sums."""
    from vgpu_compiler.backends.glsl.plan import limits
    current = np.linspace(1.1, 4.0, 37)
    src = lif("rk4(dt = 2e-4, steps = 5000)").replace("flux spikes[i] += 1",
                                                      "flux spikes[i] += t * 0.37")
    ref = reference(src, params={"I": current}, dims={"N": 37}, dtype="float64")
    with limits(max_block=64 * 100):
        got = vgpu.solve(src, params={"I": current}, dims={"N": 37}, dtype="float64",
                         backend="glsl")
    np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
    np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])


def test_a_derivative_reading_step_with_events_glsl(glsl):
    """F at step n's start reads step n (F at the last step's end had n - 1): each step
    adds 0.1 * n to y, also across the events' partial steps."""
    src = """field f {
        state x = 0, y = 0
        dx/dt = 1
        dy/dt = float(step)
        when x > 0.55 { x = 0 }
        solve rk4(dt = 0.1, steps = 20)
    }"""
    ref, got = both(src, dims={"N": 2}, dtype="float64")
    np.testing.assert_allclose(ref.states[:, 1], 19.0, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-6, atol=1e-6)
