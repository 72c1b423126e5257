"""Observers (``observe NAME = peak|trough|integral|average|first(...)``): statistics of
each trajectory without storing it (ir/observers.py, call/observers.py,
backends/numpy/observers.py), against the same statistic computed from a dense history
(save_every=1, save_at), closed forms and scipy; adding observers changes no state and
no step; misuse is a located error; a backend that does not compute a kind refuses it."""
from __future__ import annotations

import math

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import BackendError, CallError, NameError_, \
    TypeError_

BACKENDS = ("numpy", "cpu", "glsl", "wgpu")


def _needs(request, backend):
    if backend != "numpy":
        request.getfixturevalue(backend)


def _dtype(backend):
    return "float32" if backend in ("glsl", "wgpu") else "float64"


def _without(src: str) -> str:
    """The program with its observe statements commented out."""
    return "\n".join("#" + ln if ln.strip().startswith("observe") else ln
                     for ln in src.split("\n"))


def _same_run(a, b):
    """Everything but the observers is the same, bit for bit."""
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.steps_rejected, b.steps_rejected)
    np.testing.assert_array_equal(a.event_counts, b.event_counts)
    if a.history is not None:
        np.testing.assert_array_equal(a.history, b.history)
    for k in a.outputs:
        np.testing.assert_array_equal(a.outputs[k], b.outputs[k])


DECAY = """
field decay {
    param k = 1
    state y = 1
    dy/dt = -k * y
    observe area = integral(y)
    observe sq = average(y * y)
    solve %s
}
"""
FIXED = "rk4(dt = 0.01, steps = 100)"
ADAPTIVE = "dopri5(t1 = 1, rtol = 1e-6, atol = 1e-8)"


# --- integral and average: every backend -------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", [FIXED, ADAPTIVE])
def test_integral_and_average_closed_form_every_backend(request, backend, method):
    """int_0^1 e^{-kt} dt = (1 - e^{-k}) / k; the average of y^2 is (1 - e^{-2k}) / 2k;
    the states, steps and everything else are those of the run without observers."""
    _needs(request, backend)
    k = np.array([0.5, 1.0, 2.0])
    dtype = _dtype(backend)
    src = DECAY % method
    sol = vgpu.solve(src, backend=backend, dtype=dtype, params={"k": k})
    plain = vgpu.solve(_without(src), backend=backend, dtype=dtype, params={"k": k})
    # (the integral is not in the error norm: rtol = 1e-6 bounds the states' error only)
    tol = 1e-5 if method == ADAPTIVE else 2e-6 if dtype == "float32" else 1e-8
    np.testing.assert_allclose(sol.observed["area"], (1 - np.exp(-k)) / k, rtol=tol)
    np.testing.assert_allclose(sol.observed["sq"], (1 - np.exp(-2 * k)) / (2 * k), rtol=tol)
    assert sol.observed["area"].dtype == np.dtype(dtype)
    assert sol.observed["area"].shape == (3,)
    _same_run(sol, plain)
    assert sol.states.shape == (3,) and sol.state_names == ("y",)


@pytest.mark.parametrize("backend", BACKENDS)
def test_average_of_a_stopped_trajectory_divides_by_its_own_time(request, backend):
    """y' = 1 stopped when y > c (at t = c): average(y) = c / 2 over its own [0, c], the
    integral frozen at c^2 / 2, the others run to t1 = 1."""
    _needs(request, backend)
    src = """
field ramp {
    param c = 0.5
    state y = 0
    dy/dt = 1
    observe area = integral(y)
    observe avg = average(y)
    stop when y > c
    solve tsit5(t1 = 1, rtol = 1e-6, atol = 1e-8)
}
"""
    c = np.array([0.25, 0.5, 2.0])
    dtype = _dtype(backend)
    sol = vgpu.solve(src, backend=backend, dtype=dtype, params={"c": c})
    end = np.minimum(c, 1.0)
    tol = 1e-5 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(sol.t, end, rtol=tol)
    np.testing.assert_allclose(sol.observed["area"], end ** 2 / 2, rtol=tol, atol=tol)
    np.testing.assert_allclose(sol.observed["avg"], sol.observed["area"] / sol.t, rtol=1e-6)
    np.testing.assert_allclose(sol.observed["avg"], end / 2, rtol=tol)
    _same_run(sol, vgpu.solve(_without(src), backend=backend, dtype=dtype, params={"c": c}))


def test_integral_against_scipy():
    """integral(x * y) of the Lotka-Volterra system against scipy's solve_ivp with the
    integral as an extra equation."""
    solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp
    src = """
field lv {
    state x = 1, y = 0.5
    dx/dt = x - x * y
    dy/dt = x * y - y
    observe xy = integral(x * y)
    observe xbar = average(x)
    solve dopri5(t1 = 5, rtol = 1e-10, atol = 1e-12)
}
"""
    sol = vgpu.solve(src, backend="numpy", dtype="float64", dims={"N": 1})
    ref = solve_ivp(lambda t, u: [u[0] - u[0] * u[1], u[0] * u[1] - u[1], u[0] * u[1], u[0]],
                    (0, 5), [1, 0.5, 0, 0], rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(sol.observed["xy"], ref.y[2, -1], rtol=1e-7)
    np.testing.assert_allclose(sol.observed["xbar"], ref.y[3, -1] / 5, rtol=1e-7)


# --- peak, trough, first: the numpy reference ---------------------------------------------
OSC = """
field osc {
    param w = 1
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -w * w * y
    observe vmax = peak(v)
    observe vmin = trough(v)
    observe ymin = trough(y)
    observe cross = first(y < 0)
    observe back = first(y > 0)
    observe never = first(y > 2)
    solve %s
}
"""


def test_peak_trough_equal_the_dense_history_fixed_step():
    """peak/trough see t0 and every step's end: the max/min over a save_every=1
    history, exactly; the states and steps are the run's without observers."""
    w = np.array([0.7, 1.0, 2.0, 3.0])
    src = OSC % "rk4(dt = 0.01, steps = 400)"
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w}, save_every=1)
    hist = sol.history
    assert hist.shape == (401, 4, 2)
    np.testing.assert_array_equal(sol.observed["vmax"], hist[..., 1].max(axis=0))
    np.testing.assert_array_equal(sol.observed["vmin"], hist[..., 1].min(axis=0))
    np.testing.assert_array_equal(sol.observed["ymin"], hist[..., 0].min(axis=0))
    plain = vgpu.solve(_without(src), backend="numpy", dtype="float64", params={"w": w},
                       save_every=1)
    _same_run(sol, plain)


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 400)",
                                    "dopri5(t1 = 4, rtol = 1e-9, atol = 1e-12)",
                                    "vern7(t1 = 4, rtol = 1e-9, atol = 1e-12)"])
def test_first_crossing_closed_form(method):
    """y = cos(w t): first(y < 0) at pi / (2w), to the events' precision; first(y > 0),
    true at t0, only once y has been <= 0: at 3 pi / (2w) (NaN where that is past the
    end); a condition that never becomes true is NaN."""
    w = np.array([0.7, 1.0, 2.0, 3.0])
    sol = vgpu.solve(OSC % method, backend="numpy", dtype="float64", params={"w": w})
    np.testing.assert_allclose(sol.observed["cross"], np.pi / (2 * w), rtol=1e-8)
    back = 3 * np.pi / (2 * w)
    want = np.where(back < 4, back, np.nan)
    np.testing.assert_allclose(sol.observed["back"], want, rtol=1e-8)
    assert np.isnan(sol.observed["never"]).all()


def test_peak_adaptive_against_dense_save_at_and_closed_form():
    """An adaptive run's peak/trough (step ends) lie within the true range [-w, w] and
    agree with the extremes of a dense save_at history to the method's accuracy; the
    states and steps are those of the run without observers."""
    w = np.array([0.7, 1.0, 2.0, 3.0])
    src = OSC % "dopri5(t1 = 4, rtol = 1e-9, atol = 1e-12)"
    times = np.linspace(0, 4, 4001)
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w}, save_at=times)
    dense_max = sol.history[..., 1].max(axis=0)
    vmax = sol.observed["vmax"]
    assert (vmax <= w * (1 + 1e-8)).all()
    true_max = np.array([max(-w_ * math.sin(w_ * t) for t in times) for w_ in w])
    # a step end is at most a step's curvature below the true maximum
    np.testing.assert_allclose(vmax, true_max, rtol=1e-3, atol=1e-12)
    np.testing.assert_allclose(vmax, dense_max, rtol=1e-3, atol=1e-12)
    assert (sol.observed["vmin"] >= -w * (1 + 1e-8)).all()
    plain = vgpu.solve(_without(src), backend="numpy", dtype="float64", params={"w": w},
                       save_at=times)
    _same_run(sol, plain)


def test_peak_of_a_monotone_quantity_is_exact_adaptive():
    """An increasing y: peak(y) is the final state and trough(y) the start, bit for bit."""
    src = """
field grow {
    state y = 0.25
    dy/dt = 1 + y * y
    observe hi = peak(y)
    observe lo = trough(y)
    solve tsit5(t1 = 1, rtol = 1e-8, atol = 1e-10)
}
"""
    sol = vgpu.solve(src, backend="numpy", dtype="float64", dims={"N": 2})
    np.testing.assert_array_equal(sol.observed["hi"], sol.states)
    np.testing.assert_array_equal(sol.observed["lo"], np.full(2, 0.25))


BALL = """
field ball {
    param g = 9.81
    param e = 0.8
    param H = 1
    state y = H, v = 0
    dy/dt = v
    dv/dt = -g
    when y < 0 and v < 0 { v = -e * v }
    observe vmax = peak(v)
    observe vmin = trough(v)
    observe up = first(v > 0)
    observe land = first(y < 0)
    observe ymin = trough(y)
    solve %s
}
"""


@pytest.mark.parametrize("method", ["rk4(dt = 0.001, steps = 1000)",
                                    "dopri5(t1 = 1, rtol = 1e-9, atol = 1e-12)"])
def test_observers_see_events(method):
    """A ball dropped from H bounces at tau = sqrt(2H/g) with v- = -g tau: trough(v) is
    v- (the state just before the event), peak(v) e g tau (just after it); first(v > 0)
    happens at the event time (the reset made it true); first(y < 0) is NaN (the event
    keeps y >= 0 up to its located time... and y is 0 there, not below); the run is the
    one without observers."""
    H = np.array([0.5, 1.0, 2.0])
    sol = vgpu.solve(BALL % method, backend="numpy", dtype="float64", params={"H": H})
    tau = np.sqrt(2 * H / 9.81)
    np.testing.assert_allclose(sol.observed["vmin"], -9.81 * tau, rtol=1e-6)
    np.testing.assert_allclose(sol.observed["vmax"], 0.8 * 9.81 * tau, rtol=1e-6)
    np.testing.assert_allclose(sol.observed["up"], tau, rtol=1e-6)
    assert (np.abs(sol.observed["ymin"]) < 1e-6).all()
    plain = vgpu.solve(_without(BALL % method), backend="numpy", dtype="float64",
                       params={"H": H})
    _same_run(sol, plain)


def test_observers_with_events_equal_a_dense_history():
    """With events, peak/trough over a save_every=1 history (step ends, after events)
    never exceed the observers, which also see the states just before the events."""
    H = np.array([0.5, 1.0, 2.0])
    src = BALL % "rk4(dt = 0.001, steps = 1000)"
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"H": H}, save_every=1)
    v = sol.history[..., 1]
    assert (sol.observed["vmax"] >= v.max(axis=0)).all()
    assert (sol.observed["vmin"] <= v.min(axis=0)).all()
    # (just after a bounce v is e g tau; at the next step's end gravity took some off)
    np.testing.assert_allclose(sol.observed["vmax"], v.max(axis=0), rtol=1e-2)


def test_first_with_noise_at_the_step_end():
    """With noise events are at step ends: first(COND) is the end of the first step after
    which COND holds, as a save_every=1 history shows."""
    src = """
field walk {
    noise xi
    state x = 0
    dx/dt = xi
    observe out = first(x > 0.5)
    observe top = peak(x)
    solve euler(dt = 0.01, steps = 200)
}
"""
    sol = vgpu.solve(src, backend="numpy", dtype="float64", dims={"N": 64}, save_every=1,
                     seed=3)
    x = sol.history
    times = sol.times
    above = x > 0.5
    for j in range(64):
        hit = np.nonzero(above[:, j])[0]
        want = times[hit[0]] if len(hit) else np.nan
        np.testing.assert_allclose(sol.observed["out"][j], want, rtol=1e-12)
    np.testing.assert_array_equal(sol.observed["top"], x.max(axis=0))
    _same_run(sol, vgpu.solve(_without(src), backend="numpy", dtype="float64",
                              dims={"N": 64}, save_every=1, seed=3))


def test_observers_in_a_basin():
    """A field with a basin and a coupled value (peak and integral of a coupled-driven
    state) against its save_every=1 history; the run is the one without observers."""
    src = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x
    observe top = peak(x)
    observe low = trough(x)
    observe area = integral(x)
    solve rk4(dt = 0.01, steps = 200)
}
"""
    sol = vgpu.solve(src, backend="numpy", dtype="float64", dims={"N": 8}, save_every=1)
    np.testing.assert_array_equal(sol.observed["top"], sol.history.max(axis=0))
    np.testing.assert_array_equal(sol.observed["low"], sol.history.min(axis=0))
    _same_run(sol, vgpu.solve(_without(src), backend="numpy", dtype="float64",
                              dims={"N": 8}, save_every=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_integral_in_a_basin_every_backend(request, backend):
    """The integral observer of a coupled field on every backend against numpy."""
    _needs(request, backend)
    src = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1])
    observe area = integral(x)
    solve rk4(dt = 0.01, steps = 100)
}
"""
    dtype = _dtype(backend)
    ref = vgpu.solve(src, backend="numpy", dtype=dtype, dims={"N": 8})
    sol = vgpu.solve(src, backend=backend, dtype=dtype, dims={"N": 8})
    np.testing.assert_allclose(sol.observed["area"], ref.observed["area"], rtol=1e-5)


def test_observers_with_sensitivities():
    """Observers beside sensitivities: the states, the sensitivities and the steps are
    those of the call without observers."""
    src = OSC % "dopri5(t1 = 2, rtol = 1e-8, atol = 1e-10)"
    w = np.array([1.0, 2.0])
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w},
                     sensitivities=["w"])
    plain = vgpu.solve(_without(src), backend="numpy", dtype="float64", params={"w": w},
                       sensitivities=["w"])
    _same_run(sol, plain)
    np.testing.assert_array_equal(sol.sensitivities, plain.sensitivities)
    np.testing.assert_allclose(sol.observed["cross"], np.pi / (2 * w), rtol=1e-7)


# --- peak and trough on the compiled backends --------------------------------------------
EXTREMES = """
field osc {
    param w = 1
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -w * w * y
    observe vmax = peak(v)
    observe vmin = trough(v)
    observe late = trough(y * t + 0.01 * float(step))
    observe gap = peak(where(y > 0.5, sqrt(y - 0.5), 0.0 / 0.0))
    observe area = integral(v)
    solve %s
}
"""


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_compiled_peak_trough_equal_the_reference_fixed_step(request, backend):
    """peak/trough (reading t, step, and a value that is NaN at some step ends: passed
    over) on the compiled backends: the reference's, bit for bit where the states are
    (else to float32's rounding); the
    states and steps are those of the run without observers."""
    _needs(request, backend)
    dtype = _dtype(backend)
    w = np.array([0.7, 1.0, 2.0, 3.0, 5.0])
    src = EXTREMES % "rk4(dt = 0.01, steps = 400)"
    ref = vgpu.solve(src, backend="numpy", dtype=dtype, params={"w": w})
    sol = vgpu.solve(src, backend=backend, dtype=dtype, params={"w": w})
    assert sol.backend == backend
    same = (sol.states == ref.states).all(axis=-1)     # trajectories bit-equal to numpy's
    assert same.sum() >= 3, same
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-5, atol=1e-6)
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(sol.observed[k][same], v[same], err_msg=k)
        np.testing.assert_allclose(sol.observed[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    assert not np.isnan(sol.observed["gap"]).any()
    _same_run(sol, vgpu.solve(_without(src), backend=backend, dtype=dtype, params={"w": w}))


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_compiled_peak_trough_in_a_basin(request, backend):
    """A basin (coupled neighbours, a collapse that ends the run early) with peak and
    trough on the compiled backends, against the reference."""
    _needs(request, backend)
    dtype = _dtype(backend)
    src = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x
    observe top = peak(x)
    observe low = trough(x - t)
    collapse when abs(x) < 1e-3
    solve rk4(dt = 0.01, steps = 300)
}
"""
    ref = vgpu.solve(src, backend="numpy", dtype=dtype, dims={"N": 8})
    sol = vgpu.solve(src, backend=backend, dtype=dtype, dims={"N": 8})
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-5, atol=1e-6)
    for k, v in ref.observed.items():
        np.testing.assert_allclose(sol.observed[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    _same_run(sol, vgpu.solve(_without(src), backend=backend, dtype=dtype, dims={"N": 8}))


BOUNCE = """
field bounce {
    param w = 1
    state y = 1, v = 0, n = 0
    dy/dt = v
    dv/dt = -w * w * y
    dn/dt = 0
    %s
    observe ylow = trough(y)
    observe vmax = peak(v)
    observe late = trough(y * t + 0.01 * float(step))
    observe gap = peak(where(y > 0.5, sqrt(y - 0.5), 0.0 / 0.0))
    observe top = peak(n - y)
    solve %s
}
"""
EVENTS = ("", "when y < 0 { n = n + 1\n y = y + 0.5 }", "stop when y < -0.5")
METHODS = ("rk4(dt = 0.01, steps = 400)", "dopri5(t1 = 4, rtol = 1e-6, atol = 1e-8)",
           "tsit5(t1 = 4, rtol = 1e-6, atol = 1e-8)")


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
@pytest.mark.parametrize("events", EVENTS, ids=["plain", "when", "stop"])
@pytest.mark.parametrize("method", METHODS, ids=["rk4", "dopri5", "tsit5"])
@pytest.mark.parametrize("save_at", [False, True], ids=["", "save_at"])
def test_compiled_peak_trough_adaptive_and_events(request, backend, events, method, save_at):
    """peak/trough with fixed and adaptive methods, with and without events (a reset
    whose state just before is the trough: seen only there), save_at kernels: the
    reference's (float64: to 1e-9 of the scale; float32 on wgpu: bit for bit with fixed
    steps where the states are, else to 1e-3, and to 1e-2 with an adaptive method, whose
    float32 step ends differ from numpy's by the controller's rounding: an observer
    samples other points); the run is the one without observers."""
    _needs(request, backend)
    dtype = "float32" if backend == "wgpu" else "float64"
    w = np.array([0.7, 1.0, 2.0, 3.0, 5.0])
    src = BOUNCE % (events, method)
    kw = {"params": {"w": w}, "dtype": dtype}
    if save_at:
        kw["save_at"] = np.linspace(0.0, 4.0, 9)
    ref = vgpu.solve(src, backend="numpy", **kw)
    sol = vgpu.solve(src, backend=backend, **kw)
    tol = 1e-9 if dtype == "float64" else (1e-3 if method.startswith("rk4") else 1e-2)
    same = (sol.states == ref.states).all(axis=-1)
    if dtype == "float64" or method.startswith("rk4"):
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    for k, v in ref.observed.items():
        np.testing.assert_allclose(sol.observed[k], v, rtol=tol, atol=tol, err_msg=k)
        if method.startswith("rk4"):
            np.testing.assert_array_equal(sol.observed[k][same], v[same], err_msg=k)
    if events.startswith("when"):       # just before each reset y is 0 (the crossing)
        np.testing.assert_allclose(sol.observed["ylow"], 0.0, atol=1e-6)
    _same_run(sol, vgpu.solve(_without(src), backend=backend, **kw))


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_peak_and_trough_of_the_same_field_are_two_kernels(request, backend):
    """Fields that differ only in an observer's kind lower to the same states and
    derivatives: the kernel caches must still tell them apart (wgpu's key is the
    field's IR dump, which now lists the observers)."""
    _needs(request, backend)
    src = """field f { state x = 0
    dx/dt = cos(3 * t)
    observe m = %s(x)
    solve rk4(dt = 0.01, steps = 200)
}"""
    for kind in ("peak", "trough"):
        sol = vgpu.solve(src % kind, backend=backend, dtype="float32", dims={"N": 2})
        ref = vgpu.solve(src % kind, backend="numpy", dtype="float32", dims={"N": 2})
        np.testing.assert_array_equal(sol.observed["m"], ref.observed["m"], err_msg=kind)


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_compiled_observers_with_noise(request, backend):
    """Euler-Maruyama with peak, trough and integral: the lowered field's noises have an
    entry (none) for each hidden state (wgpu's kernel key read past the end before)."""
    _needs(request, backend)
    src = """field g { noise xi
    state x = 0
    dx/dt = -x + 0.5 * xi
    observe top = peak(x)
    observe low = trough(x)
    observe area = integral(x)
    solve euler(dt = 0.01, steps = 200)
}"""
    sol = vgpu.solve(src, backend=backend, dims={"N": 16}, seed=3, dtype="float32")
    ref = vgpu.solve(src, backend="numpy", dims={"N": 16}, seed=3, dtype="float32")
    np.testing.assert_allclose(sol.states, ref.states, atol=1e-6)
    for k, v in ref.observed.items():
        np.testing.assert_allclose(sol.observed[k], v, atol=1e-6, err_msg=k)
    assert (ref.observed["top"] > ref.observed["low"]).all()
    _same_run(sol, vgpu.solve(_without(src), backend=backend, dims={"N": 16}, seed=3,
                              dtype="float32"))


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_compiled_peak_trough_in_a_basin_with_events(request, backend):
    """A basin whose step ends at its earliest event: every lane is seen there."""
    _needs(request, backend)
    dtype = "float32" if backend == "wgpu" else "float64"
    src = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1 + 0.05, n = 0
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x + 0.3 * exp(-t) * (1.5 - t)
    dn/dt = 0
    when x > 0.3 { x = x - 0.2
        n = n + 1 }
    observe top = peak(x)
    observe low = trough(x - t)
    solve %s
}
"""
    for method in ("rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)"):
        ref = vgpu.solve(src % method, backend="numpy", dtype=dtype, dims={"N": 8})
        sol = vgpu.solve(src % method, backend=backend, dtype=dtype, dims={"N": 8})
        assert ref.event_counts.sum() > 0
        tol = 1e-3 if dtype == "float32" else 1e-9
        for k, v in ref.observed.items():
            np.testing.assert_allclose(sol.observed[k], v, rtol=tol, atol=tol, err_msg=k)
        _same_run(sol, vgpu.solve(_without(src % method), backend=backend, dtype=dtype,
                                  dims={"N": 8}))


# --- first on cpu -------------------------------------------------------------------------
FIRSTS = """
field bounce {
    param w = 1
    state y = 1, v = 0, n = 0
    dy/dt = v
    dv/dt = -w * w * y
    dn/dt = 0
    %s
    observe cross = first(y < 0)
    observe back = first(y > 0.25)
    observe fast = first(v * v > 0.5 * w * w and t > 0.5)
    observe made = first(n > 0.5)
    observe stepped = first(float(step) + y > 100)
    observe never = first(y > 2)
    observe vmax = peak(v)
    solve %s
}
"""


@pytest.mark.parametrize("events", EVENTS, ids=["plain", "when", "stop"])
@pytest.mark.parametrize("method", METHODS, ids=["rk4", "dopri5", "tsit5"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cpu_first_equals_the_reference(cpu, events, method, dtype):
    """first(COND) on cpu (with a peak beside it; conditions reading t and step; one made
    true by an event's reset), fixed and adaptive methods, with and without events: the
    reference's bit for bit on every trajectory whose states are numpy's bit for bit
    (all of them with fixed steps), else to the rounding of the states (an adaptive
    method's float32 steps differ from numpy's by the controller's rounding: the
    crossing is located on another step); which trajectories cross is the same; the
    run is the one without observers."""
    w = np.array([0.7, 1.0, 2.0, 3.0, 5.0])
    src = FIRSTS % (events, method)
    kw = {"params": {"w": w}, "dtype": dtype}
    ref = vgpu.solve(src, backend="numpy", **kw)
    sol = vgpu.solve(src, backend="cpu", **kw)
    same = (sol.states == ref.states).all(axis=-1)
    if method.startswith("rk4"):
        assert same.all()
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(sol.observed[k][same], v[same], err_msg=k)
        np.testing.assert_array_equal(np.isnan(sol.observed[k]), np.isnan(v), err_msg=k)
        tol = 1e-9 if dtype == "float64" else 1e-5 if k != "vmax" else 1e-2
        np.testing.assert_allclose(sol.observed[k], v, rtol=tol, atol=tol, err_msg=k)
    assert not np.isnan(ref.observed["cross"]).any()
    if events.startswith("when"):       # the reset made n > 0.5: at the event's time (where
        # y < 0 first holds; cross is that crossing located again in the part before it)
        np.testing.assert_allclose(sol.observed["made"], sol.observed["cross"], rtol=1e-6)
    _same_run(sol, vgpu.solve(_without(src), backend="cpu", **kw))


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 300)",
                                    "dopri5(t1 = 3, rtol = 1e-10, atol = 1e-12)"])
def test_cpu_first_exponential_decay_closed_form_and_history(cpu, method):
    """y = e^{-kt}: first(y < c) at ln(1/c) / k (to the method's error and the events'
    bracket), inside the step of a save_every=1 history where y first goes below c (fixed
    steps); NaN where that is past t1; the reference's value bit for bit."""
    src = """
field decay {
    param k = 1
    param c = 0.5
    state y = 1
    dy/dt = -k * y
    observe below = first(y < c)
    solve %s
}
""" % method
    k = np.array([0.5, 1.0, 2.0, 4.0, 0.1])
    c = np.array([0.5, 0.3, 0.9, 0.01, 0.2])
    kw = {"params": {"k": k, "c": c}, "dtype": "float64"}
    sol = vgpu.solve(src, backend="cpu", **kw)
    ref = vgpu.solve(src, backend="numpy", **kw)
    if method.startswith("rk4"):
        np.testing.assert_array_equal(sol.observed["below"], ref.observed["below"])
    else:       # (cpu's adaptive states are numpy's to a few ulps, not bit for bit)
        np.testing.assert_allclose(sol.observed["below"], ref.observed["below"], rtol=1e-12)
    exact = np.log(1 / c) / k
    want = np.where(exact < 3, exact, np.nan)
    np.testing.assert_allclose(sol.observed["below"], want, rtol=1e-6)
    if method.startswith("rk4"):
        hist = vgpu.solve(src, backend="cpu", save_every=1, **kw)
        for j in range(len(k)):
            under = np.nonzero(hist.history[:, j] < c[j])[0]
            if not len(under):
                assert np.isnan(sol.observed["below"][j])
                continue
            n = under[0]
            assert hist.times[n - 1] < sol.observed["below"][j] <= hist.times[n]


def test_cpu_first_with_noise_and_in_a_basin(cpu):
    """With noise the crossing is the first step end where COND holds (as the run's
    save_every=1 history shows); in a basin whose step ends at its earliest event, each lane's first is
    the reference's."""
    src = """
field walk {
    noise xi
    state x = 0
    dx/dt = xi
    observe out = first(x > 0.5)
    solve euler(dt = 0.01, steps = 200)
}
"""
    kw = {"dims": {"N": 64}, "seed": 3, "dtype": "float64"}
    sol = vgpu.solve(src, backend="cpu", save_every=1, **kw)
    ref = vgpu.solve(src, backend="numpy", **kw)
    np.testing.assert_allclose(sol.states, ref.states, atol=1e-6)
    above = sol.history > 0.5
    for j in range(64):
        hit = np.nonzero(above[:, j])[0]
        want = sol.times[hit[0]] if len(hit) else np.nan
        np.testing.assert_array_equal(sol.observed["out"][j], want)
    assert (~np.isnan(sol.observed["out"])).sum() > 5
    ring = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1 + 0.05, n = 0
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x + 0.3 * exp(-t) * (1.5 - t)
    dn/dt = 0
    when x > 0.3 { x = x - 0.2
        n = n + 1 }
    observe hot = first(x > 0.25)
    observe bumped = first(n > 0.5)
    solve %s
}
"""
    for method in ("rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)"):
        ref = vgpu.solve(ring % method, backend="numpy", dtype="float64", dims={"N": 8})
        sol = vgpu.solve(ring % method, backend="cpu", dtype="float64", dims={"N": 8})
        assert ref.event_counts.sum() > 0
        for k, v in ref.observed.items():
            np.testing.assert_allclose(sol.observed[k], v, rtol=1e-9, atol=1e-9, err_msg=k)
        _same_run(sol, vgpu.solve(_without(ring % method), backend="cpu", dtype="float64",
                                  dims={"N": 8}))


# --- backends that do not compute a kind refuse it ---------------------------------------
def test_a_backend_that_does_not_compute_first_refuses_it():
    """Every built-in backend computes every kind; a backend without the features (one
    registered later, say) is refused before it runs (pipeline.refuse_observers, which
    a run and a Simulation call before the backend: auto then moves on)."""
    import dataclasses
    from vgpu_compiler.backends import get
    from vgpu_compiler.frontend.compile import compile_program
    from vgpu_compiler.ir.observers import lower
    from vgpu_compiler.pipeline import refuse_observers
    field = lower(compile_program(OSC % FIXED, "osc.field").select(None)).field
    cpu = get("cpu")
    bare = dataclasses.replace(cpu, name="bare", features=cpu.features
                               - {"observe_peak", "observe_first"})
    with pytest.raises(BackendError, match="bare backend does not compute the observers "
                                           "first, peak, trough yet [(]integral and "
                                           "average it does"):
        refuse_observers(bare, field)
    peaks = dataclasses.replace(bare, features=bare.features | {"observe_peak"})
    with pytest.raises(BackendError, match="observers first yet [(]peak, trough, "):
        refuse_observers(peaks, field)
    for name in ("cuda", "glsl", "wgpu", "cpu", "numpy"):
        refuse_observers(get(name), field)


def test_auto_runs_first_where_it_is_computed():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (auto's warning is once per reason)
        sol = vgpu.solve(OSC % FIXED, dtype="float32", dims={"N": 2})
    ref = vgpu.solve(OSC % FIXED, backend="numpy", dtype="float32", dims={"N": 2})
    assert set(sol.observed) == {"vmax", "vmin", "ymin", "cross", "back", "never"}
    for k, v in ref.observed.items():
        np.testing.assert_allclose(sol.observed[k], v, rtol=1e-5, atol=1e-6, err_msg=k)


def test_no_observers_an_empty_dict():
    sol = vgpu.solve(_without(DECAY % FIXED), backend="numpy", dims={"N": 2})
    assert sol.observed == {}


# --- Simulation and Dask -----------------------------------------------------------------
def test_simulation_carries_observers_across_advances_and_checkpoints(tmp_path):
    src = OSC % "rk4(dt = 0.01, steps = 300)"
    w = np.array([1.0, 2.0, 3.0])
    ref = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w})
    sim = vgpu.Simulation(src, backend="numpy", dtype="float64", params={"w": w})
    sim.advance(120)
    sim.save(tmp_path / "c.npz")
    sim.advance(100)
    sim.advance(80)
    back = vgpu.Simulation.load(tmp_path / "c.npz")
    back.advance(180)
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(sim.observed[k], v)
        np.testing.assert_array_equal(back.observed[k], v)
        np.testing.assert_array_equal(sim.solution().observed[k], v)
    np.testing.assert_array_equal(sim.states, ref.states)
    assert sim.states.shape == (3, 2)


@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_simulation_peak_trough_compiled(request, backend):
    """A fixed-step Simulation carries peak and trough across advances on the compiled
    backends: the one-call run's values."""
    _needs(request, backend)
    dtype = _dtype(backend)
    src = EXTREMES % "rk4(dt = 0.01, steps = 300)"
    ref = vgpu.solve(src, backend=backend, dtype=dtype, dims={"N": 3})
    sim = vgpu.Simulation(src, backend=backend, dtype=dtype, dims={"N": 3})
    sim.advance(110)
    sim.advance(190)
    for k in ("vmax", "vmin", "late", "gap"):
        np.testing.assert_array_equal(sim.observed[k], ref.observed[k], err_msg=k)
    np.testing.assert_array_equal(sim.states, ref.states)


@pytest.mark.parametrize("backend", BACKENDS)
def test_simulation_integral_every_backend(request, backend):
    _needs(request, backend)
    dtype = _dtype(backend)
    src = DECAY % FIXED
    ref = vgpu.solve(src, backend=backend, dtype=dtype, dims={"N": 3})
    sim = vgpu.Simulation(src, backend=backend, dtype=dtype, dims={"N": 3})
    sim.advance(40)
    sim.advance(60)
    np.testing.assert_array_equal(sim.observed["area"], ref.observed["area"])
    np.testing.assert_allclose(sim.observed["sq"], ref.observed["sq"], rtol=1e-6)
    np.testing.assert_array_equal(sim.states, ref.states)


FORCED = """
field osc {
    param w = 1
    state y = 1, v = 0
    output tot[2]
    dy/dt = v
    dv/dt = -w * w * y + 0.1 * sin(3.0 * t)
    flux tot[0] += y
    observe vmax = peak(v)
    observe ymin = trough(y)
    observe cross = first(y < 0)
    observe back = first(y > 0.3 and t > 1)
    observe never = first(y > 2)
    observe area = integral(y * y)
    solve rk4(dt = 0.01, steps = 300)
}
"""


# FORCED with a forcing GLSL has in float64 too (exp: VGPU's; no sin): the shaders' field
FORCED_GPU = FORCED.replace("0.1 * sin(3.0 * t)", "0.4 * exp(-3.0 * t)")
SIM_CASES = [("cpu", "float64"), ("cpu", "float32"), ("glsl", "float32"),
             ("glsl", "float64"), ("wgpu", "float32")]


def _forced(backend):
    return FORCED if backend == "cpu" else FORCED_GPU


@pytest.mark.parametrize("backend,dtype", SIM_CASES)
def test_simulation_first_equals_one_run(request, tmp_path, backend, dtype):
    """first(COND) in a compiled Simulation (the events' kernel, its trajectories resumed
    at each advance, F at the state carried in its buffers and checkpoints): advances in
    pieces (one of no step), a checkpoint resumed on the same backend and on numpy give
    one run's observers, states, flux and steps bit for bit; those are the numpy
    Simulation's (bit for bit on cpu and on glsl in float32, where the run is the
    reference's; to the states' rounding with glsl's float64 exp and wgpu's plain steps
    as lavapipe contracts them); each crossing lies in the step of a dense history where
    COND first holds; on cpu the run is the one without observers."""
    _needs(request, backend)
    src = _forced(backend)
    w = np.array([1.0, 2.0, 3.0, 0.5, 7.0])
    kw = {"params": {"w": w}, "dtype": dtype}
    one = vgpu.solve(src, backend=backend, **kw)
    ref = vgpu.Simulation(src, backend="numpy", **kw).advance(120).advance(180)
    sim = vgpu.Simulation(src, backend=backend, **kw)
    sim.advance(120)
    sim.save(tmp_path / "c.npz")
    sim.advance(100).advance(0).advance(80)
    back = vgpu.Simulation.load(tmp_path / "c.npz").advance(180)
    there = vgpu.Simulation.load(tmp_path / "c.npz", backend="numpy").advance(180)
    assert (sim.backend, back.backend, there.backend) == (backend, backend, "numpy")
    for got in (sim, back, there):
        for k, v in one.observed.items():
            np.testing.assert_array_equal(got.observed[k], v, err_msg=k)
        np.testing.assert_array_equal(got.states, one.states)
        np.testing.assert_array_equal(got.outputs["tot"], one.outputs["tot"])
        np.testing.assert_array_equal(got.steps_taken, one.steps_taken)
    np.testing.assert_array_equal(sim.solution().observed["cross"], one.observed["cross"])
    tol = 1e-12 if dtype == "float64" else 1e-5
    exact = backend == "cpu" or (backend, dtype) == ("glsl", "float32")
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(np.isnan(sim.observed[k]), np.isnan(v), err_msg=k)
        if exact and (backend == "cpu" or k != "area"):   # (glsl: an integral to the
            # states' rounding)
            np.testing.assert_array_equal(sim.observed[k], v, err_msg=k)
        np.testing.assert_allclose(sim.observed[k], v, rtol=tol, atol=tol, err_msg=k)
    if backend == "cpu":
        np.testing.assert_array_equal(sim.states, ref.states)
        np.testing.assert_array_equal(sim.outputs["tot"], ref.outputs["tot"])
        assert np.isnan(sim.observed["cross"]).sum() == 1    # (w = 0.5 crosses after t1)
        _same_run(one, vgpu.solve(_without(src), backend="cpu", **kw))
    else:
        assert (~np.isnan(sim.observed["cross"])).sum() >= 3
    np.testing.assert_allclose(sim.states, ref.states, rtol=tol, atol=tol)
    assert np.isnan(sim.observed["never"]).all()
    hist = vgpu.solve(src, backend=backend, save_every=1, **kw)
    for j in range(len(w)):
        under = np.nonzero(hist.history[:, j, 0] < 0)[0]
        if not len(under):
            assert np.isnan(sim.observed["cross"][j])
            continue
        assert hist.times[under[0] - 1] < sim.observed["cross"][j] <= hist.times[under[0]]


@pytest.mark.parametrize("backend,dtype", [("cpu", "float64"), ("glsl", "float32"),
                                           ("wgpu", "float32")])
def test_simulation_first_after_changes_equals_numpy(request, tmp_path, backend, dtype):
    """set_state, set_params, set_input and a numpy checkpoint resumed on the backend (no
    F carried: cpu's next steps compute their stage 0 at the start, the shaders' next
    advance computes F at the state, u_step0 = 3): the numpy Simulation's observers and
    states after the same calls, to the dtype's rounding; which trajectories crossed is
    the same."""
    _needs(request, backend)
    forcing = "0.1 * sin(3.0 * t)" if backend == "cpu" else "0.4 * exp(-3.0 * t)"
    src = _forced(backend).replace("param w = 1", "param w = 1\n    input g[2]").replace(
        forcing, forcing.replace("0.1", "g[0]").replace("0.4", "g[0]"))
    assert "g[0] *" in src
    w = np.array([1.0, 2.0, 3.0, 0.5, 7.0])
    kw = {"params": {"w": w}, "dtype": dtype, "inputs": {"g": np.array([0.1, 0.0])}}
    sims = {b: vgpu.Simulation(src, backend=b, **kw) for b in ("numpy", backend)}
    for sim in sims.values():
        sim.advance(50)
        s = sim.states.copy()
        s[:, 0] += 0.5
        sim.set_state(s)
        sim.advance(40)
        sim.set_params(w=w * 1.1)
        sim.advance(30)
        sim.set_input("g", np.array([0.3, 0.0]))
        sim.advance(20)
    sims["numpy"].save(tmp_path / "n.npz")
    resumed = vgpu.Simulation.load(tmp_path / "n.npz", backend=backend)
    for sim in (*sims.values(), resumed):
        sim.advance(60)
    ref = sims["numpy"]
    tol = 1e-12 if dtype == "float64" else 1e-5
    for got in (sims[backend], resumed):
        assert got.backend == backend
        np.testing.assert_allclose(got.states, ref.states, rtol=tol, atol=tol)
        np.testing.assert_allclose(got.outputs["tot"], ref.outputs["tot"], rtol=tol)
        for k, v in ref.observed.items():
            np.testing.assert_array_equal(np.isnan(got.observed[k]), np.isnan(v), err_msg=k)
            np.testing.assert_allclose(got.observed[k], v, rtol=tol, atol=tol, err_msg=k)


def test_cpu_simulation_first_interrupted_goes_back(cpu, monkeypatch):
    """A Ctrl-C inside an advance of the events' kernel (its trajectories part way, at
    steps of their own) undoes the advance; the next ones give one run's values."""
    import signal
    kw = {"params": {"w": np.array([1.0, 2.0, 3.0])}, "dtype": "float64"}
    sim = vgpu.Simulation(FORCED, backend="cpu", **kw)
    sim.advance(50)
    before, seen = sim.states, sim.observed
    session = sim._session
    session.attempts = 7                # (several kernel calls an advance)
    calls, call = [0], session.run._call

    def interrupted(*args, **kwargs):
        out = call(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 3:
            signal.raise_signal(signal.SIGINT)
        return out
    monkeypatch.setattr(session.run, "_call", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(100)
    assert calls[0] == 3 and sim.step == 50
    np.testing.assert_array_equal(sim.states, before)
    for k, v in seen.items():
        np.testing.assert_array_equal(sim.observed[k], v, err_msg=k)
    sim.advance(250)
    one = vgpu.solve(FORCED, backend="cpu", **kw)
    np.testing.assert_array_equal(sim.states, one.states)
    np.testing.assert_array_equal(sim.outputs["tot"], one.outputs["tot"])
    for k, v in one.observed.items():
        np.testing.assert_array_equal(sim.observed[k], v, err_msg=k)


def test_cpu_simulation_first_with_noise_and_a_basin(cpu):
    """With noise (the crossing at a step's end) and in a basin: advances in pieces give
    one cpu run's observers and states, bit for bit."""
    walk = """
field walk {
    noise xi
    state x = 0
    dx/dt = xi
    observe out = first(x > 0.5)
    observe top = peak(x)
    solve euler(dt = 0.01, steps = 200)
}
"""
    ring = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1 + 0.05
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x + 0.3 * exp(-t) * (1.5 - t)
    observe hot = first(x > 0.25)
    solve rk4(dt = 0.01, steps = 300)
}
"""
    for src, kw, n in ((walk, {"dims": {"N": 64}, "seed": 3}, 200),
                       (ring, {"dims": {"N": 8}}, 300)):
        one = vgpu.solve(src, backend="cpu", dtype="float64", **kw)
        sim = vgpu.Simulation(src, backend="cpu", dtype="float64", **kw)
        sim.advance(70).advance(n - 70)
        assert (~np.isnan(next(iter(one.observed.values())))).sum() > 2
        for k, v in one.observed.items():
            np.testing.assert_array_equal(sim.observed[k], v, err_msg=k)
        np.testing.assert_array_equal(sim.states, one.states)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adaptive_simulation_peak_trough(request, tmp_path, backend):
    """An adaptive Simulation's peak and trough (reading t and step) see each step end it
    keeps: advanced in pieces, and from a checkpoint, they are one run's on the same
    backend bit for bit (the reference's to float32's rounding); at a time before t1
    they are those of the steps kept so far: never past the closed form's extremes on
    [t0, until], and moving only outwards."""
    _needs(request, backend)
    dtype = _dtype(backend)
    src = EXTREMES.replace("    observe gap = peak(where(y > 0.5, sqrt(y - 0.5), 0.0 / 0.0))\n",
                           "") % "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)"
    w = np.array([0.7, 1.0, 2.0, 3.0])
    kw = {"params": {"w": w}, "dtype": dtype}
    one = vgpu.solve(src, backend=backend, **kw)
    ref = vgpu.solve(src, backend="numpy", **kw)
    sim = vgpu.Simulation(src, backend=backend, **kw)
    seen = []
    for u in (0.4, 0.9, 1.6):
        sim.advance(until=u)
        seen.append(sim.observed)
        grid = np.linspace(0, u, 2001)[:, None]
        v = -w * np.sin(w * grid)
        assert (sim.observed["vmax"] <= v.max(axis=0) + 1e-6).all()
        assert (sim.observed["vmin"] >= v.min(axis=0) - 1e-6).all()
    sim.save(tmp_path / "a.npz")
    sim.advance(until=2.2).advance(until=3)
    back = vgpu.Simulation.load(tmp_path / "a.npz").advance(until=3)
    for a, b in zip(seen, seen[1:] + [sim.observed]):
        assert (b["vmax"] >= a["vmax"]).all() and (b["vmin"] <= a["vmin"]).all()
    tol = 1e-4 if dtype == "float32" else 1e-9
    for got in (sim, back):
        assert got.backend == backend
        for k, v in one.observed.items():
            np.testing.assert_array_equal(got.observed[k], v, err_msg=k)
            np.testing.assert_allclose(got.observed[k], ref.observed[k], rtol=tol, atol=tol,
                                       err_msg=k)
        np.testing.assert_array_equal(got.states, one.states)
        np.testing.assert_array_equal(got.steps_taken, one.steps_taken)
    np.testing.assert_allclose(one.observed["vmin"], -w, rtol=1e-2)    # (at step ends)
    plain = vgpu.Simulation(_without(src), backend=backend, **kw)
    plain.advance(until=1.6).advance(until=3)
    np.testing.assert_array_equal(plain.states, sim.states)
    np.testing.assert_array_equal(plain.steps_taken, sim.steps_taken)
    np.testing.assert_array_equal(plain.steps_rejected, sim.steps_rejected)


COLLAPSING = """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    output tot[2]
    state x = float(i) * 0.1 + 0.05
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1]) - x * x * x + 0.3 * exp(-t) * (1.5 - t)
    observe hot = first(x > 0.3 + 0.05 * float(i))
    observe top = peak(x)
    flux tot[0] += x + t
    collapse when x < 0.45 - 0.005 * float(i) and t > 1.0
    solve rk4(dt = 0.01, steps = 300)
}
"""
@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_simulation_first_in_collapsing_basins(request, tmp_path, backend):
    """first(COND) with `collapse when` in a Simulation: the basins collapse at steps of
    their own (one at the end of the first advance exactly: the kernel marks it, its
    step size 0, and the next advances keep it ended, its flux at its own steps);
    advances in pieces (one of no step) and a checkpoint resumed on the backend and on
    numpy give one run's observers, states, flux and steps_taken bit for bit (the flux
    on the shaders to the order of its atomic sum), and those are the numpy reference's
    (to float32's rounding on the shaders)."""
    _needs(request, backend)
    kw = {"dims": {"N": 12}, "dtype": _dtype(backend)}
    ref = vgpu.solve(COLLAPSING, backend="numpy", **kw)
    one = vgpu.solve(COLLAPSING, backend=backend, **kw)
    taken = ref.steps_taken
    assert len(set(taken.tolist())) == 3 and taken.max() < 300
    k = int(taken[4])                   # basin 1 collapses at the end of the first piece
    assert (~np.isnan(ref.observed["hot"])).sum() >= 3
    sim = vgpu.Simulation(COLLAPSING, backend=backend, **kw).advance(k)
    sim.save(tmp_path / "c.npz")
    np.testing.assert_array_equal(sim.steps_taken, np.minimum(taken, k))
    sim.advance(0).advance(30).advance(300 - k - 30)
    back = vgpu.Simulation.load(tmp_path / "c.npz").advance(300 - k)
    there = vgpu.Simulation.load(tmp_path / "c.npz", backend="numpy").advance(300 - k)
    assert (sim.backend, back.backend, there.backend) == (backend, backend, "numpy")
    tol = 1e-5 if backend != "cpu" else 1e-12
    for got in (sim, back, there):
        for x, v in one.observed.items():
            np.testing.assert_array_equal(got.observed[x], v, err_msg=x)
            np.testing.assert_allclose(got.observed[x], ref.observed[x], rtol=tol,
                                       atol=tol, err_msg=x)
        np.testing.assert_array_equal(got.states, one.states)
        if backend == "cpu":
            np.testing.assert_array_equal(got.outputs["tot"], one.outputs["tot"])
        else:       # (the basins' deposits summed by atomic adds, in no fixed order)
            np.testing.assert_allclose(got.outputs["tot"], one.outputs["tot"], rtol=1e-6)
        np.testing.assert_array_equal(got.steps_taken, taken)
    np.testing.assert_allclose(one.states, ref.states, rtol=tol, atol=tol)
    np.testing.assert_allclose(one.outputs["tot"], ref.outputs["tot"], rtol=tol)



@pytest.mark.parametrize("backend", BACKENDS)
def test_adaptive_simulation_first(request, tmp_path, backend):
    """first(COND) in an adaptive Simulation (located in each kept step, as one run does;
    the step that covers `until` counts once the next advance keeps it: the kernels put
    it off, with observers `first` too): advanced in pieces and from a checkpoint, one
    run's observers, states and steps on the same backend bit for bit, and numpy's
    Simulation's at each `until` (float32: to its rounding); at each `until` a crossing
    is either NaN or at most the closed form's crossing time, and never changes once
    set; the closed form cos(w t) = 0 at t1; without the observers, the same steps."""
    _needs(request, backend)
    dtype = _dtype(backend)
    f64 = dtype == "float64"
    src = OSC % ("dopri5(t1 = 3, rtol = 1e-9, atol = 1e-11)" if f64
                 else "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)")
    w = np.array([0.7, 1.0, 2.0, 3.0])
    kw = {"params": {"w": w}, "dtype": dtype}
    tol = 1e-9 if f64 else 1e-4
    one = vgpu.solve(src, backend=backend, **kw)
    sim = vgpu.Simulation(src, backend=backend, **kw)
    ref = vgpu.Simulation(src, backend="numpy", **kw)
    seen = []
    # 0.78 and 1.55: just before a crossing (w = 2 at 0.785, w = 1 at 1.571), inside the
    # step that covers them
    for u in (0.4, 0.78, 0.9, 1.55, 1.6):
        sim.advance(until=u)
        ref.advance(until=u)
        seen.append(sim.observed["cross"].copy())
        exact = np.pi / 2 / w
        got = seen[-1]
        assert (np.isnan(got) | (got <= u + 1e-12)).all()
        np.testing.assert_allclose(got[~np.isnan(got)], exact[~np.isnan(got)],
                                   rtol=1e-7 if f64 else 1e-5)
        np.testing.assert_allclose(sim.states, ref.states, rtol=tol, atol=tol)
        np.testing.assert_array_equal(sim.t, ref.t)
        # (float32: the step sizes round another way, and peak and trough are at step ends)
        for k in ref.observed if f64 else ("cross", "back", "never"):
            np.testing.assert_allclose(sim.observed[k], ref.observed[k], rtol=tol, atol=tol,
                                       err_msg=k)
        if f64:
            np.testing.assert_array_equal(sim.steps_taken, ref.steps_taken)
    sim.save(tmp_path / "a.npz")
    ref.save(tmp_path / "ref.npz")
    sim.advance(until=2.2).advance(until=3)
    back = vgpu.Simulation.load(tmp_path / "a.npz").advance(until=3)
    for a, b in zip(seen, seen[1:] + [sim.observed["cross"]]):
        np.testing.assert_array_equal(a[~np.isnan(a)], b[~np.isnan(a)])
    for got in (sim, back):
        assert got.backend == backend
        for k, v in one.observed.items():
            np.testing.assert_array_equal(got.observed[k], v, err_msg=k)
        np.testing.assert_array_equal(got.states, one.states)
        np.testing.assert_array_equal(got.steps_taken, one.steps_taken)
        np.testing.assert_array_equal(got.steps_rejected, one.steps_rejected)
    if f64:             # the reference's checkpoint resumes here, its observers with it
        there = vgpu.Simulation.load(tmp_path / "ref.npz", backend=backend).advance(until=3)
        ref.advance(until=3)
        assert there.backend == backend
        for k, v in ref.observed.items():
            np.testing.assert_allclose(there.observed[k], v, rtol=tol, atol=tol, err_msg=k)
        np.testing.assert_array_equal(there.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(one.observed["cross"], np.pi / 2 / w, rtol=1e-7 if f64 else 1e-5)
    np.testing.assert_allclose(one.observed["back"], np.where(3 * np.pi / 2 / w < 3,
                                                              3 * np.pi / 2 / w, np.nan),
                               rtol=1e-7 if f64 else 1e-5)
    assert np.isnan(one.observed["never"]).all()
    plain = vgpu.Simulation(_without(src), backend=backend, **kw)
    plain.advance(until=0.78).advance(until=1.55).advance(until=3)
    np.testing.assert_array_equal(plain.steps_taken, sim.steps_taken)
    np.testing.assert_array_equal(plain.steps_rejected, sim.steps_rejected)
    np.testing.assert_array_equal(plain.states, sim.states)


def test_dask_observed_per_trajectory():
    pytest.importorskip("dask.array")
    src = OSC % "rk4(dt = 0.01, steps = 300)"
    w = np.linspace(0.5, 3, 10)
    ref = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w})
    lazy = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w}, chunks=3)
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(lazy.observed[k].compute(scheduler="synchronous"), v)


# --- misuse: located errors ----------------------------------------------------------------
def _error(body: str, method: str = "euler(dt = 0.1, steps = 10)"):
    src = ("field f {\n    noise xi\n    grid i < N\n    basin l < 4\n    coupled u = x\n"
           f"    state x = 1\n    dx/dt = -x + u[l]\n{body}\n    solve {method}\n}}\n")
    with pytest.raises(vgpu.VgpuError) as info:
        vgpu.compile(src)
    return info.value


@pytest.mark.parametrize("body, kind, words, where", [
    ("    observe a = maximum(x)", NameError_, "unknown observer `maximum`; use one of peak",
     ":8:17:"),
    ("    observe a = peak(x, x)", TypeError_, "`peak` takes one argument", ":8:5:"),
    ("    observe a = peak()", TypeError_, "takes one argument", ":8:5:"),
    ("    observe a = integral(xi)", NameError_, "noise `xi` used in an observer", ":8:26:"),
    ("    observe a = peak(u)", NameError_, "coupled", ":8:22:"),
    ("    observe x = peak(x)", NameError_, "already declared as a state", ":8:13:"),
    ("    observe a = peak(x)\n    observe a = trough(x)", NameError_,
     "already declared as an observer", ":9:13:"),
    ("    observe a = first(x)", TypeError_, "expected a condition", ":8:23:"),
    ("    observe a = peak(x > 0)", TypeError_, "", ":8:"),
])
def test_bad_observers_are_located_errors(body, kind, words, where):
    err = _error(body)
    assert isinstance(err, kind), (type(err), str(err))
    assert words in str(err)
    assert where in str(err) and "^" in str(err)


# --- results out: to_xarray and vgpuc run's .npz ------------------------------------------
def test_observers_in_to_xarray_and_the_npz():
    pytest.importorskip("xarray")
    from vgpu_compiler.cli.run import solution_arrays
    src = OSC.replace("observe never", "observe status") % FIXED
    w = np.array([1.0, 2.0])
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w})
    ds = sol.to_xarray()
    np.testing.assert_array_equal(ds["vmax"].values, sol.observed["vmax"])
    assert ds["vmax"].dims == ("i",)
    np.testing.assert_array_equal(ds["observed_status"].values, sol.observed["status"])
    arrays = solution_arrays(sol)
    np.testing.assert_array_equal(arrays["cross"], sol.observed["cross"])
    np.testing.assert_array_equal(arrays["observed_status"], sol.observed["status"])
    np.testing.assert_array_equal(arrays["status"], sol.status)


def test_a_batch_of_any_shape_and_run_field_and_an_empty_grid():
    """A batch of shape (2, 3) gives observers of that shape (as the states); run_field
    returns the field's states alone; an empty grid gives empty observers."""
    src = OSC % FIXED
    w = np.linspace(0.5, 3.0, 6).reshape(2, 3)
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w})
    flat = vgpu.solve(src, backend="numpy", dtype="float64", params={"w": w.reshape(-1)})
    for k, v in sol.observed.items():
        assert v.shape == (2, 3)
        np.testing.assert_array_equal(v.reshape(-1), flat.observed[k])
    states = vgpu.run_field(src, params={"w": w.reshape(-1)}, backend="numpy",
                            dtype="float64")
    np.testing.assert_array_equal(states, flat.states)
    empty = vgpu.solve(DECAY % FIXED, backend="numpy", dims={"N": 0})
    assert empty.observed["area"].shape == (0,) and empty.states.shape == (0,)


def test_the_benchmark_at_a_tiny_size():
    """benchmarks/observers.py on the reference: the observers leave the run unchanged,
    the first-spike recipe (an integral) equals first(v > 1), the memory counted."""
    from benchmarks.observers import measure, table
    row = measure(vgpu, "numpy", 64, 100, 25, native=True)
    assert row["first_recipe_vs_native_max_abs"] < 1e-6
    assert row["observer_bytes"] == 4 * 64 * 4
    assert row["dense_history_bytes"] == 101 * 64 * 2 * 4
    assert row["never_spiked"] > 0 and row["spikes_total"] > 0
    assert "numpy" in table([row])
