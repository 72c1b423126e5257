"""Events on the cpu backend, against the numpy reference (and closed forms).

Everything runs inside the C kernel (templates/events.c.j2 on adaptive.c.j2): the
conditions, the bisection, the events, the partial steps, flux at each firing (into
the call's event log, summed on the host). numpy and cpu must agree on event counts,
located times, statuses and states; the kernel does the reference's arithmetic in
the reference's order, so most comparisons here are exact.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import StatusWarning, VgpuError

from event_fields import ball, bounce_times, lif, lif_count, reference, solve_quietly

HEIGHTS = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1, 3.0])
K = np.array([3, 5, 2, 10, 4, 1, 7], float)
DTYPES = ["float32", "float64"]


def both(src, h0=None, **kw):
    return [reference(src, h0, **kw), solve_quietly(src, h0, "cpu", **kw)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 1000)", "heun(dt = 0.005, steps = 2000)",
                                    "dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_ball_cpu_matches_numpy(cpu, method, basin, dtype):
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, dtype=dtype)
    assert got.backend == "cpu"
    assert (got.status == ref.status).all() and (got.status == 1).all()
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts[:, 0], K.astype(int))
    if dtype == "float32" and "t1" in method:
        # float32 adaptive: the step sizes follow an error estimate that cancels most of
        # its digits (the cpu kernel's and numpy's agree to within a step, events or not)
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-4)
        assert np.abs(got.steps_taken - ref.steps_taken).max() <= 1
        np.testing.assert_allclose(got.states, ref.states, atol=1e-3)
    else:
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-6 if dtype == "float32" else 1e-13)
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
        np.testing.assert_allclose(got.states, ref.states,
                                   atol=1e-5 if dtype == "float32" else 1e-12)
    assert got.t.dtype == np.dtype(dtype) and got.event_counts.dtype == np.int32
    if method.startswith("rk4"):
        want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(HEIGHTS, K)]
        np.testing.assert_allclose(got.t, want, atol=2e-5 if dtype == "float32" else 1e-12)


def test_ball_cpu_float64_closed_form():
    """rk4 integrates free fall exactly: the located bounce times are the closed form's
    to about the float64 bracket (2^-40 of a step)."""
    ref, got = both(ball("rk4(dt = 0.01, steps = 1000)"), HEIGHTS, params={"K": K},
                    dtype="float64")
    want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(HEIGHTS, K)]
    np.testing.assert_allclose(got.t, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.t, ref.t, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(got.steps_taken, [math.ceil(w / 0.01) for w in want])


@pytest.mark.parametrize("dtype", DTYPES)
def test_lif_cpu_counts_and_flux_match_numpy_and_the_closed_form(cpu, dtype):
    """float64 flux inside `when` too (the cpu backend needs no float atomics)."""
    current = np.linspace(1.1, 4.0, 37)
    for method in ["rk4(dt = 2e-4, steps = 5000)", "dopri5(t1 = 1, rtol = 1e-7)"]:
        ref, got = both(lif(method), params={"I": current}, dims={"N": 37}, dtype=dtype)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.event_counts[:, 0], lif_count(current, 1.0))
        np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
        np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])
        np.testing.assert_array_equal(got.outputs["spikes"], lif_count(current, 1.0))
        assert got.outputs["bins"].dtype == np.dtype(dtype)


FLUX = """field f {
    param I = 1.5
    output total[1], at[4]
    %s
    state v = 0, w = 0
    dv/dt = (I - v) / 0.02
    dw/dt = 1
    when v > 1 { v = 0; flux total[0] += t * 0.37; flux at[i %% 4] += v * w + 0.1 }
    flux total[0] += v
    solve %s
}"""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_flux_of_fractional_values_at_events(cpu, dtype, basin):
    """Flux of non-integer values at each firing (and at the end): as the reference's
    sums, to its rounding (float64 too)."""
    current = np.linspace(1.2, 3.5, 11)
    for method in ["rk4(dt = 1e-3, steps = 500)", "tsit5(t1 = 0.5, rtol = 1e-8)"]:
        ref, got = both(FLUX % (basin, method), params={"I": current}, dims={"N": 11},
                        dtype=dtype)
        assert ref.event_counts.sum() > 50
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        tol = 1e-5 if dtype == "float32" else 1e-12
        for name in ("total", "at"):
            np.testing.assert_allclose(got.outputs[name], ref.outputs[name], rtol=tol)
        # the end flux alone (v at the end) is a small part of `total`: the events count
        assert got.outputs["total"][0] - got.states[:, 0].sum() > 5


def test_event_flux_is_deterministic(cpu):
    """The event log is summed on the host in a fixed order: runs agree bit for bit."""
    current = np.linspace(1.2, 3.5, 203)
    src = FLUX % ("", "rk4(dt = 1e-3, steps = 500)")
    runs = [vgpu.solve(src, params={"I": current}, dims={"N": 203}, backend="cpu",
                       dtype="float64") for _ in range(3)]
    for r in runs[1:]:
        for name in ("total", "at"):
            assert r.outputs[name].tobytes() == runs[0].outputs[name].tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeno_cpu_status_4(cpu, dtype):
    t_star = math.sqrt(2 / 9.81) * 3
    for method in ["rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3)"]:
        ref, got = both(ball(method), np.array([1.0, 2.0]), params={"e": 0.5}, dtype=dtype)
        assert (got.status == 4).all() and (ref.status == 4).all()
        np.testing.assert_allclose(got.t[0], t_star, atol=1e-4)
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        assert (got.event_counts >= 64).all()


def test_zeno_warns(cpu):
    with pytest.warns(StatusWarning):
        vgpu.solve(ball("rk4(dt = 0.01, steps = 300)"), np.array([1.0]), params={"e": 0.5},
                   backend="cpu")


def test_order_and_sweep_cpu(cpu):
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
    for dtype in DTYPES:
        ref, got = both(src, dims={"N": 3}, dtype=dtype)
        np.testing.assert_allclose(got.states, ref.states, atol=1e-12)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.event_counts, [[1, 1, 1, 1]] * 3)
        assert got.status.tolist() == ref.status.tolist() == [1, 1, 1]
        np.testing.assert_allclose(got.t, 0.9, atol=1e-6 if dtype == "float32" else 1e-11)
        np.testing.assert_allclose(got.states[:, 1], 0.3, atol=1e-6)      # a = t at 0.3
        np.testing.assert_allclose(got.states[:, 4], 10)                   # m sees n = 1
        assert got.steps_taken.tolist() == ref.steps_taken.tolist() == [1, 1, 1]


def test_a_condition_true_at_t0_waits(cpu):
    src = """field f {
        state x, n = 0
        dx/dt = -1
        dn/dt = 0
        when x > 0.5 { n = n + 1 }
        when x < 0 { n = n + 100 }
        solve rk4(dt = 0.1, steps = 20)
    }"""
    ref, got = both(src, np.array([1.0, 0.2, -0.5]), dtype="float64")
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts, [[0, 1], [0, 1], [0, 0]])
    np.testing.assert_allclose(got.states, ref.states, atol=1e-12)
    assert (got.status == 0).all() and (got.t == 2.0).all()


def test_coupled_basin_with_stops_cpu(cpu):
    src = """field f {
        basin l < 4
        state x, y = 0
        coupled s = x
        dx/dt = 1 + 0.1 * mean(s)
        dy/dt = x
        stop when x > 2
        solve %s
    }"""
    h0 = np.array([0.0, 0.5, 1.0, 1.5, 0.2, 0.3])
    for method in ["rk4(dt = 0.1, steps = 30)", "dopri5(t1 = 3, rtol = 1e-8)"]:
        ref, got = both(src % method, h0, dtype="float64")
        assert (got.status == 1).all()
        np.testing.assert_allclose(got.t, ref.t, atol=1e-12)
        np.testing.assert_allclose(got.states, ref.states, atol=1e-12)
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
        # a stopped lane stays where it stopped: x just past 2
        np.testing.assert_allclose(got.states[:, 0], 2.0, atol=1e-9)


def test_events_cpu_many_calls(cpu, monkeypatch):
    """Runs cut into many kernel calls (and the event log into many parts): the events'
    rows are carried between calls, the results are the same."""
    from vgpu_compiler.backends.cpu import adaptive_run, runner
    current = np.linspace(1.5, 3.0, 40)
    src = lif("euler(dt = 2e-5, steps = 15000)")
    ref = vgpu.solve(src, params={"I": current}, dims={"N": 40}, backend="numpy")
    whole = vgpu.solve(src, params={"I": current}, dims={"N": 40}, backend="cpu")
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1 << 14)
    monkeypatch.setattr(adaptive_run, "EVENT_LOG", 1 << 10)
    cut = vgpu.solve(src, params={"I": current}, dims={"N": 40}, backend="cpu")
    for sol in (whole, cut):
        np.testing.assert_array_equal(sol.event_counts, ref.event_counts)
        np.testing.assert_array_equal(sol.outputs["bins"], ref.outputs["bins"])
        np.testing.assert_array_equal(sol.outputs["spikes"], ref.outputs["spikes"])
        np.testing.assert_array_equal(sol.states, ref.states)
    ref, got = both(ball("dopri5(t1 = 10)", "basin l < 4"), HEIGHTS, params={"K": K})
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.t, ref.t)


def test_flux_index_out_of_range_in_when_is_an_error(cpu):
    src = """field f {
        output H[3]
        state x = 0
        dx/dt = 1
        when x > 0.5 { flux H[i + 2] += 1 }
        solve rk4(dt = 0.1, steps = 10)
    }"""
    errors = []
    for backend in ("numpy", "cpu"):
        with pytest.raises(VgpuError) as info:
            vgpu.solve(src, dims={"N": 3}, backend=backend)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1])
    assert "H" in str(errors[1])
    ok = vgpu.solve(src.replace("i + 2", "i"), dims={"N": 3}, backend="cpu")
    np.testing.assert_array_equal(ok.outputs["H"], [1, 1, 1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 1000)", "heun(dt = 0.005, steps = 2000)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_save_every_with_events_cpu(cpu, method, basin, dtype):
    """save_every with events: the state at each saved step's end (after its events); a
    stopped trajectory repeats its final state."""
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, dtype=dtype, save_every=7)
    assert got.backend == "cpu"
    assert got.history.shape == ref.history.shape and got.history.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.history, ref.history,
                               atol=1e-5 if dtype == "float32" else 1e-12)
    np.testing.assert_array_equal(got.history[-1], got.states)
    np.testing.assert_array_equal(got.history[0], ref.history[0])
    assert (got.status == 1).sum() >= 6
    late = got.times[:, None] >= got.t[None, :] + 0.01   # stopped: the final state repeated
    assert late.sum() > 100
    np.testing.assert_array_equal(got.history[late],
                                  np.broadcast_to(got.states, got.history.shape)[late])


@pytest.mark.parametrize("dtype", DTYPES)
def test_save_every_with_flux_collapse_and_many_calls(cpu, dtype, monkeypatch):
    """Flux in `when` and a collapse vote beside save_every, over many kernel calls (the
    next saved slot carried between them)."""
    from vgpu_compiler.backends.cpu import runner
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1 << 10)
    ref, got = both(lif("rk4(dt = 0.001, steps = 300)"), dims={"N": 5}, save_every=40,
                    params={"I": np.linspace(1.2, 2.5, 5)}, dtype=dtype)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.history, ref.history, atol=1e-5 if dtype == "float32" else 1e-12)
    for o in ref.outputs:
        np.testing.assert_allclose(got.outputs[o], ref.outputs[o], atol=1e-6)
    h0 = np.linspace(0.6, 2.0, 10)
    ref, got = both(COLLAPSE % "rk4(dt = 0.05, steps = 200)", h0, dtype=dtype, save_every=3)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    assert got.steps_taken.max() < 200
    np.testing.assert_allclose(got.history, ref.history, atol=1e-5 if dtype == "float32" else 1e-12)


SAVES = np.array([0.0, 0.0, 0.3, 0.45, 0.45, 1.0, 2.5, 3.3, 4.0, 6.1, 7.77, 9.9, 10.0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_save_at_with_events_cpu(cpu, method, basin, dtype):
    """save_at with events: a step's saves after its events, up to the event time, from
    the step's continuous extension (at the event time: the state after the events);
    after a stop, the final state."""
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, dtype=dtype, save_at=SAVES)
    assert got.backend == "cpu"
    np.testing.assert_array_equal(got.times, ref.times)
    assert got.history.shape == (len(SAVES),) + ref.states.shape
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    assert (got.status == 1).all() and (got.t < 10).all()
    if dtype == "float32":      # (as test_ball_cpu_matches_numpy: within a step)
        np.testing.assert_allclose(got.history, ref.history, atol=2e-3)
    else:
        np.testing.assert_allclose(got.history, ref.history, atol=1e-12)
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    late = SAVES[:, None] > got.t[None, :]
    np.testing.assert_array_equal(got.history[late], np.broadcast_to(got.states, got.history.shape)[late])


def test_save_at_at_an_event_time_takes_the_state_after():
    """A save_at time equal to a located event's time: the state after the event there."""
    src = """field f {
        state x = 0
        dx/dt = 1
        when x > 0.75 { x = 0 }
        solve dopri5(t1 = 2)
    }"""
    first = vgpu.solve(src, dims={"N": 1}, backend="numpy", dtype="float64")
    assert first.event_counts[0, 0] == 2
    t_ev = float(vgpu.solve(src.replace("when x > 0.75 { x = 0 }", "stop when x > 0.75"),
                            dims={"N": 1}, backend="numpy", dtype="float64").t[0])
    assert abs(t_ev - 0.75) < 1e-9
    saves = np.array([0.5, t_ev, 1.0])
    for backend in ("numpy", "cpu"):
        if backend == "cpu":
            pytest.importorskip("vgpu_compiler.backends.cpu.toolchain")
        sol = vgpu.solve(src, dims={"N": 1}, backend=backend, dtype="float64", save_at=saves)
        assert sol.history[1, 0] == 0.0
        np.testing.assert_allclose(sol.history[:, 0], [0.5, 0.0, 1.0 - t_ev], atol=1e-12)


NOISY = """field f {
    param sigma = 0.4
    noise xi
    grid i < N
    %(basin)s
    output hits[N], bins[10]
    state x = 0.2, n = 0
    %(coupled)s
    dx/dt = %(drift)s + sigma * x * xi
    dn/dt = 0
    when x > 1 { x = x - 0.6; n = n + 1; flux hits[i] += 1; flux bins[clamp(int(t * 5), 0, 9)] += x }
    when x < 0.05 { x = 0.3 }
    stop when n >= 6
    solve %(method)s(dt = 0.01, steps = 200)
}"""


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ["euler", "milstein"])
@pytest.mark.parametrize("basin", [False, True])
def test_events_with_noise_cpu(cpu, method, basin, dtype, monkeypatch):
    """Events in a stochastic field: conditions at step ends only (no location, no partial
    step), the kernel's Philox normals; numpy's and the kernel's normals agree to their
    log/cos rounding (test_noise_run.py). Over several kernel calls, with save_every."""
    from vgpu_compiler.backends.cpu import runner
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1 << 12)
    src = NOISY % dict(method=method, basin="basin l < 8" if basin else "",
                       coupled="coupled c = x" if basin else "",
                       drift="3 - x + 0.1 * mean(c)" if basin else "3 - x")
    ref, got = both(src, dims={"N": 37}, dtype=dtype, seed=5, save_every=9)
    assert got.backend == "cpu"
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.status, ref.status)
    assert (got.status == 1).sum() > 30
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(got.t, ref.t)         # t0 + n dt of the step it stopped in
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_array_equal(got.outputs["hits"], ref.outputs["hits"])
    np.testing.assert_allclose(got.outputs["bins"], ref.outputs["bins"], rtol=1e-5, atol=1e-5)
    plain = vgpu.solve(src.replace(" + sigma * x * xi", "").replace("noise xi", ""),
                       dims={"N": 37}, backend="cpu", dtype=dtype)
    assert not np.array_equal(plain.t, got.t)     # the noise mattered


def test_cpu_lists_events():
    from vgpu_compiler import backends
    assert "events" in backends.get("cpu").features


def test_init_in_an_event(cpu):
    """init(x) in a condition and an assignment: the kernel keeps the start values
    (shader/lower.py counts the events' uses of init)."""
    src = """field f {
        state x
        dx/dt = 1
        when x > init(x) + 0.5 { x = init(x) }
        solve %s
    }"""
    for method in ["rk4(dt = 0.1, steps = 20)", "bs3(t1 = 2)"]:
        ref, got = both(src % method, np.array([0.0, 0.3]), dtype="float64")
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.event_counts[:, 0], [3, 3])
        np.testing.assert_allclose(got.states, ref.states, atol=1e-12)


COLLAPSE = """field f {
    basin l < 4
    state x, n = 0
    dx/dt = -x
    dn/dt = 0
    when x < 0.5 { x = x + 1; n = n + 1 }
    collapse when n >= 2
    solve %s
}"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_collapse_with_events_in_a_partial_basin(cpu, dtype):
    """The last basin has idle lanes (10 = 4 + 4 + 2): they neither fire nor vote."""
    h0 = np.linspace(0.6, 2.0, 10)
    for method in ["rk4(dt = 0.05, steps = 200)", "dopri5(t1 = 10)"]:
        ref, got = both(COLLAPSE % method, h0, dtype=dtype)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        assert (got.event_counts == 2).all()
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-6 if dtype == "float32" else 1e-13)
        assert got.t.max() < 3


def test_progress_with_events(cpu, monkeypatch):
    from vgpu_compiler.backends.cpu import runner
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1 << 12)
    seen = []
    sol = vgpu.solve(ball("rk4(dt = 0.01, steps = 1000)"), HEIGHTS, params={"K": K},
                     backend="cpu", progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 2 and seen[-1] == (7, 7)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))
    assert (sol.status == 1).all()


STEPPY = """field f {
    %(basin)s
    state x = 0
    %(coupled)s
    dx/dt = 1 + 0.01 * step%(mean)s
    when x > 0.5 { x = x - 0.5 }
    solve %(method)s
}"""


@pytest.mark.parametrize("method", ["rk4(dt = 0.1, steps = 30)", "heun(dt = 0.1, steps = 30)",
                                    "dopri5(t1 = 3)", "bs3(t1 = 3)"])
@pytest.mark.parametrize("basin", [False, True])
def test_derivatives_reading_step_with_events(cpu, method, basin):
    """`step` in a derivative: n in every stage of step n (a partial step's too), the end
    slope of a step with an event in step n, F after an event in the step that follows
    (adaptive: the accepted steps' count), as the reference."""
    src = STEPPY % dict(method=method, basin="basin l < 3" if basin else "",
                        coupled="coupled c = x" if basin else "",
                        mean=" + 0.001 * mean(c)" if basin else "")
    ref, got = both(src, dims={"N": 4}, dtype="float64")
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.states, ref.states)
    np.testing.assert_array_equal(got.t, ref.t)


def test_a_fixed_step_event_run_takes_its_method_s_attempts_per_call(cpu, monkeypatch):
    """A call runs about runner.WORK_PER_CALL lane-stage evaluations: a fixed-step
    attempt costs its stages and F at the step's end (Euler: 2), not an adaptive step's 7
    (it was 7 for every method: a fixed-step event run made 3.5x the calls it needs)."""
    from vgpu_compiler.backends.cpu import runner
    monkeypatch.setattr(runner, "WORK_PER_CALL", 64 * 2 * 100)   # 100 Euler attempts a call
    src = lif("euler(dt = 1e-4, steps = 1000)")
    current = np.linspace(0.5, 0.9, 64)                          # below 1: no spike
    vgpu.solve(src, params={"I": current}, dims={"N": 64}, backend="cpu", steps=10)
    before = vgpu.cache_stats()["dispatches"]
    got = vgpu.solve(src, params={"I": current}, dims={"N": 64}, backend="cpu")
    calls = vgpu.cache_stats()["dispatches"] - before
    ref = vgpu.solve(src, params={"I": current}, dims={"N": 64}, backend="numpy")
    assert 10 <= calls <= 12            # 1000 steps, 100 a call (7 stages: 28 a call, 36)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-6)


@pytest.mark.parametrize("lanes", [64, 256])
def test_every_call_moves_a_lane_whatever_its_attempts(cpu, lanes, monkeypatch):
    """A call of a fixed-step event kernel with plain steps (fixed_lean) moves some lane on
    whatever its budget and lanes per block. It hung with one attempt a call (64 lanes
    and WORK_PER_CALL 320 for the ball, or 256 lanes and 2048): an attempt in which every
    lane that went met an event in its step used the call's last attempt, fixed_events
    never ran, and the next call (vg_pend is a call's own) found the same events again.
    Each call here is counted and a run stops with an error past a bound (no hang)."""
    from vgpu_compiler.backends.cpu import kernel, runner
    monkeypatch.setattr(kernel, "LEAN_LANES", {"float32": lanes, "float64": lanes})
    vgpu.clear_cache()
    src = ball("rk4(dt = 0.01, steps = 1000)")
    h0, kw = HEIGHTS, {"params": {"K": K + 3}}
    ref, whole = both(src, h0, **kw)
    bound = int(ref.steps_taken.sum() + 4 * ref.event_counts.sum()) + 10
    calls = [0]
    call = runner._Call._run

    def counted(self, ints, attempts):
        calls[0] += 1
        assert self.k.lanes == lanes
        if calls[0] > bound:
            raise RuntimeError(f"no progress: {calls[0]} calls of {attempts} attempts")
        return call(self, ints, attempts)

    monkeypatch.setattr(runner._Call, "_run", counted)
    for attempts in (1, 2, 3, 7):   # (rk4: 5 lane-stage evaluations an attempt)
        monkeypatch.setattr(runner, "WORK_PER_CALL", attempts * lanes * 5)
        calls[0] = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StatusWarning)
            got = vgpu.solve(src, h0, backend="cpu", **kw)
        assert calls[0] > ref.steps_taken.max() / attempts     # (the budget held)
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
        np.testing.assert_array_equal(got.states, whole.states)
        np.testing.assert_array_equal(got.t, whole.t)
        np.testing.assert_array_equal(got.status, whole.status)
    vgpu.clear_cache()
