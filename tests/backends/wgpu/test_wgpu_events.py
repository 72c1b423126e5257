"""Events on the wgpu backend (codegen/build/events.py), against the numpy reference
in float32 (WGSL has no float64) and the closed forms.

Everything runs inside the WGSL shader, as on GLSL (test_events_glsl.py): the
conditions, the bisection on the step's continuous extension, the events and their
flux (compare-and-swap adds), the partial steps of a fixed-step method, a basin's
one decision through workgroupUniformLoad. numpy and wgpu must agree on event
counts, located times, steps and states, to float32's rounding.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.wgpu import adaptive_run, emit_wgsl
from vgpu_compiler.backends.wgpu import runner as wgpu_runner
from vgpu_compiler.errors import BackendError, StatusWarning
from vgpu_compiler.frontend.compile import compile_program

from event_fields import ball, bounce_times, lif, lif_count

HEIGHTS = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1, 3.0])
K = np.array([3, 5, 2, 10, 4, 1, 7], float)


def both(src, h0=None, **kw):
    out = []
    for backend in ("numpy", "wgpu"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StatusWarning)
            out.append(vgpu.solve(src, h0, backend=backend, dtype="float32", **kw))
    assert out[1].backend == "wgpu"
    return out


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 1000)", "heun(dt = 0.005, steps = 2000)",
                                    "dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_ball_wgpu_matches_numpy(wgpu, method, basin):
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K})
    assert got.t.dtype == np.float32 and got.event_counts.dtype == np.int32
    assert (got.status == ref.status).all() and (got.status == 1).all()
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts[:, 0], K)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-5)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.states, ref.states, atol=1e-4)
    want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(HEIGHTS, K)]
    # rk4 and heun integrate free fall exactly: the bisection's 2^-21 of a step and
    # float32's t ~ 10 (ulp 1e-6) are the error; an adaptive step's error adds
    tol = 2e-5 if method.startswith(("rk4", "heun")) else 2e-3
    np.testing.assert_allclose(got.t, want, atol=tol)


def test_lif_wgpu_counts_and_flux_match_numpy_and_the_closed_form(wgpu):
    current = np.linspace(1.1, 4.0, 37)
    for method in ["rk4(dt = 2e-4, steps = 5000)", "dopri5(t1 = 1, rtol = 1e-6)"]:
        ref, got = both(lif(method), params={"I": current}, dims={"N": 37})
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.event_counts[:, 0], lif_count(current, 1.0))
        np.testing.assert_array_equal(got.outputs["spikes"], ref.outputs["spikes"])
        np.testing.assert_array_equal(got.outputs["bins"], ref.outputs["bins"])
        # one deposit per spike, each counted once (the compare-and-swap add)
        assert got.outputs["spikes"].sum() == got.event_counts.sum() > 0
        assert got.outputs["bins"].sum() == got.event_counts.sum()


def test_zeno_wgpu_status_4(wgpu):
    """A ball with e = 0.5 bounces infinitely often before t* = 3 sqrt(2 h / g): more
    than 64 events in one step end it with status 4, at t*."""
    for method in ["rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3)"]:
        ref, got = both(ball(method), np.array([1.0, 2.0]), params={"e": 0.5})
        assert (got.status == 4).all() and (ref.status == 4).all()
        for h, t in zip([1.0, 2.0], got.t):
            assert abs(t - math.sqrt(2 * h / 9.81) * 3) < 1e-3
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
        assert (got.event_counts[:, 0] >= 64).all()


def test_order_and_sweep_wgpu(wgpu):
    """Several events in one step fire in time order; an assignment sees the state
    after the events before it; a condition true after them fires in the same step."""
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
    ref, got = both(src, dims={"N": 3})
    np.testing.assert_allclose(got.states, ref.states, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts, [[1, 1, 1, 1]] * 3)
    np.testing.assert_allclose(got.states[0], [0.9, 0.3, 10.3, 1, 10], atol=1e-6)
    assert got.status.tolist() == ref.status.tolist() == [1, 1, 1]
    np.testing.assert_allclose(got.t, 0.9, atol=1e-6)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)


def test_coupled_basin_with_stops_wgpu(wgpu):
    """Each lane stops on its own time; the basin runs on (the stopped lanes frozen,
    their coupled values their own) until every lane stopped."""
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
    ref, got = both(src, h0)
    assert (got.status == 1).all()
    assert len(set(got.t.tolist())) == len(h0)      # every lane its own stop time
    np.testing.assert_allclose(got.t, ref.t, atol=1e-5)
    np.testing.assert_allclose(got.states, ref.states, atol=1e-5)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)


@pytest.mark.parametrize("reduction", ["serial", "tree"])
def test_stop_when_adaptive_basin_and_flux_at_each_firing(wgpu, reduction, monkeypatch):
    """stop when in an adaptive basin; flux deposited at each firing (event time t);
    both ways a basin reduces (VGPU_REDUCTION: part of the kernel's key)."""
    from vgpu_compiler.backends.shader.lower import REDUCTION_ENV
    monkeypatch.setenv(REDUCTION_ENV, reduction)
    src = """field f {
        basin l < 3
        param w = 1.0
        output hits[20], ends[3]
        state x = 0, y = 1
        coupled c = y
        dx/dt = w + 0 * sum(c)
        dy/dt = -y
        when x > 1 { x = 0; flux hits[clamp(int(t * 2), 0, 19)] += 1 }
        stop when y < 0.1 * w
        solve dopri5(t1 = 10, rtol = 1e-6)
        flux ends[l] += t
    }"""
    w = np.array([0.6, 1.0, 1.7, 2.5, 3.1])
    ref, got = both(src, params={"w": w}, dims={"N": 5})
    np.testing.assert_array_equal(got.status, ref.status)
    assert (got.status == 1).all()
    np.testing.assert_allclose(got.t, np.log(1 / (0.1 * w)), rtol=1e-4)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-5)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.outputs["hits"], ref.outputs["hits"])
    np.testing.assert_allclose(got.outputs["ends"], ref.outputs["ends"], rtol=1e-5)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)


def test_events_wgpu_many_dispatches_and_chunks(wgpu, monkeypatch):
    """Events carried between dispatches (one attempt each) and across chunks change
    nothing."""
    current = np.linspace(1.5, 3.0, 300)
    src = lif("euler(dt = 2e-4, steps = 1500)")
    ref, whole = both(src, params={"I": current}, dims={"N": 300})
    np.testing.assert_array_equal(whole.event_counts, ref.event_counts)
    limits = dict(wgpu_runner.dev.get().limits)
    monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
    monkeypatch.setattr(wgpu_runner.dev.get(), "limits",
                        dict(limits, max_storage_buffer_binding_size=4096))
    before = vgpu.cache_stats()["dispatches"]
    with wgpu_runner.limits(max_steps=50):
        split = vgpu.solve(src, params={"I": current}, dims={"N": 300}, backend="wgpu")
    assert vgpu.cache_stats()["dispatches"] - before >= 2 * 1500 // 50
    np.testing.assert_array_equal(split.event_counts, whole.event_counts)
    np.testing.assert_array_equal(split.states, whole.states)
    np.testing.assert_array_equal(split.outputs["spikes"], whole.outputs["spikes"])
    np.testing.assert_array_equal(split.outputs["bins"], whole.outputs["bins"])


def test_the_event_examples_run_on_wgpu(wgpu):
    from pathlib import Path
    root = Path(__file__).resolve().parents[3] / "examples"
    for name, n in (("bouncing_ball", 16), ("lif", 24)):
        src = (root / f"{name}.field").read_text()
        ref, got = both(src, dims={"N": n})
        np.testing.assert_array_equal(got.event_counts, ref.event_counts)
        np.testing.assert_array_equal(got.status, ref.status)
        np.testing.assert_allclose(got.t, ref.t, rtol=1e-5)
        for out in ref.outputs:
            np.testing.assert_array_equal(got.outputs[out], ref.outputs[out])
        assert got.event_counts.sum() > 0


def test_wgpu_refuses_what_it_lacks(wgpu):
    many = "field f {\n state x = 0\n dx/dt = 1\n%s\n solve euler(dt = 0.1, steps = 10)\n}" % (
        "\n".join(f" when x > {k / 100} {{ x = x }}" for k in range(31)))
    with pytest.raises(BackendError, match="wgpu backend has no more than 30 events"):
        emit_wgsl(compile_program(many, "many.field").select(None))
    with pytest.raises(BackendError, match="float64"):
        vgpu.solve(ball("rk4(dt = 0.01, steps = 10)"), np.ones(2), backend="wgpu",
                   dtype="float64")


def test_events_read_init_inputs_per_trajectory_params_and_step(wgpu):
    """A condition and an assignment may read init(x), inputs, per-trajectory params and
    `step` (init(x) only in an event: the kernel keeps the start values for it)."""
    src = """field f {
        input a[N]
        param p = 1
        state x
        dx/dt = a[i] * p
        when x > 2 * init(x) { x = init(x) }
        stop when step > 150
        solve heun(dt = 0.01, steps = 500)
    }"""
    kw = dict(inputs={"a": np.linspace(1, 3, 5)}, params={"p": np.linspace(1, 2, 5)})
    ref, got = both(src, np.linspace(0.5, 1.5, 5), **kw)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.event_counts[:, 0], [3, 3, 4, 5, 6])
    assert (got.status == 1).all()
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5)


@pytest.mark.parametrize("method", ["rk4(dt = 0.05, steps = 100)", "dopri5(t1 = 5)"])
def test_events_with_collapse_in_a_basin(wgpu, method):
    src = """field f {
        basin l < 3
        state x = 0, y = 1
        dx/dt = 1
        dy/dt = -y * (1 + float(l))
        when x > 0.5 { x = 0 }
        collapse when y < 0.2
        solve %s
    }""" % method
    ref, got = both(src, dims={"N": 6})
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    assert got.event_counts.min() >= 2
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, atol=1e-5)


@pytest.mark.parametrize("method,basin,every", [
    ("rk4(dt = 0.01, steps = 1000)", "", 10), ("rk4(dt = 0.01, steps = 1000)", "basin l < 4", 7),
    ("heun(dt = 0.005, steps = 2000)", "", 300)])
def test_save_every_with_events_wgpu(wgpu, method, basin, every):
    """save_every with events (a fixed-step method): the states at saved step ends, written
    in the shader; a stopped trajectory repeats its final state (as numpy)."""
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, save_every=every)
    assert got.history.shape == ref.history.shape
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_save_every_with_events_split_dispatches_wgpu(wgpu):
    current = np.linspace(1.5, 3.0, 40)
    src = lif("euler(dt = 2e-5, steps = 3000)")
    ref = vgpu.solve(src, params={"I": current}, dims={"N": 40}, save_every=250)
    with wgpu_runner.limits(max_steps=37):
        got = vgpu.solve(src, params={"I": current}, dims={"N": 40}, save_every=250,
                         backend="wgpu")
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


@pytest.mark.parametrize("method", ["dopri5(t1 = 10)", "tsit5(t1 = 10, rtol = 1e-6)",
                                    "bs3(t1 = 10, rtol = 1e-6)"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_save_at_with_events_wgpu(wgpu, method, basin):
    """save_at with events (an adaptive method): the times up to an event from the step's
    extension, the event's own time the state after it (as numpy)."""
    times = np.linspace(0, 10, 201)
    ref, got = both(ball(method, basin), HEIGHTS, params={"K": K}, save_at=times)
    np.testing.assert_array_equal(got.times, ref.times)
    # (float32: the states' rounding over many steps, as the states' own tests)
    np.testing.assert_allclose(got.history, ref.history, rtol=0, atol=2e-3)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)


def test_save_at_with_events_lif_split_dispatches_wgpu(wgpu):
    current = np.linspace(1.1, 4.0, 37)
    times = np.linspace(0, 1, 77)
    src = lif("dopri5(t1 = 1, rtol = 1e-7)")
    ref = vgpu.solve(src, params={"I": current}, dims={"N": 37}, save_at=times)
    with wgpu_runner.limits(max_steps=23):
        got = vgpu.solve(src, params={"I": current}, dims={"N": 37}, save_at=times,
                         backend="wgpu")
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
    solve %(method)s(dt = 1e-3, steps = 2000)
}"""


@pytest.mark.parametrize("method", ["euler", "milstein"])
@pytest.mark.parametrize("basin", ["", "basin l < 4"])
def test_events_with_noise_wgpu(wgpu, method, basin):
    """Events in a stochastic field: conditions at step ends only, the same Philox normals
    (to log/cos rounding: tolerances as test_noise_run.py); a stopped lane of a basin
    keeps its state."""
    src = NOISY % {"method": method, "basin": basin}
    ref, got = both(src, dims={"N": 8}, seed=7)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    assert ref.event_counts.sum() > 0 and (ref.status == 1).any()
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5, atol=1e-5)


def test_events_with_noise_split_dispatches_and_save_every_wgpu(wgpu):
    src = NOISY % {"method": "milstein", "basin": ""}
    ref = vgpu.solve(src, dims={"N": 20}, seed=3, save_every=100)
    with wgpu_runner.limits(max_steps=41):
        got = vgpu.solve(src, dims={"N": 20}, seed=3, save_every=100, backend="wgpu")
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-5, atol=1e-5)


def test_a_derivative_reading_step_with_events_wgpu(wgpu):
    """F at step n's start reads step n (F at the last step's end had n - 1): each step
    adds 0.1 * n to y, also across the events' partial steps."""
    src = """field f {
        state x = 0, y = 0
        dx/dt = 1
        dy/dt = float(step)
        when x > 0.55 { x = 0 }
        solve rk4(dt = 0.1, steps = 20)
    }"""
    ref, got = both(src, dims={"N": 2})
    np.testing.assert_allclose(ref.states[:, 1], 19.0, rtol=1e-6)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-6, atol=1e-6)
