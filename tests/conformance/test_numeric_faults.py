"""Numerical faults of a hostile probe, each against independent code (hand-written float64
loops, closed forms, scipy) on every backend: derived derivatives that made NaN out of
0 * inf (Milstein on CIR, rodas4's Jacobian), the reference freezing `dt` in adaptive
stages, and the edges of save_at, t1 and rodas4's singular matrix."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.ir import controller as C
from vgpu_compiler.ir.embedded import ADAPTIVE
from vgpu_compiler.noise.normal import key_of, normals

BACKENDS = ["numpy", "cpu", "glsl", "wgpu"]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Every backend; a compiled one's own fixture decides skip or fail."""
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def solve(src, h0, backend, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vgpu.StatusWarning)
        return vgpu.solve(src, h0, backend=backend, **kw)


def dtype_on(backend) -> str:
    """float64 where the backend has what the test's field needs in it, else float32."""
    return "float32" if backend in ("wgpu", "glsl") else "float64"


# --- Milstein: G * dG/dx where G = 0 and dG/dx is infinite ---------------------------

CIR = """
field cir {
    param kappa = 0.5
    param theta = 0.04
    param sigma = 1.0
    noise w
    state v
    dv/dt = kappa * (theta - v) + sigma * sqrt(POSITIVE) * w
    solve milstein(dt = 0.01, steps = 100)
}
"""


def cir_by_hand(v0, seed, positive, n_steps=100, dt=0.01, kappa=0.5, theta=0.04, sigma=1.0):
    """Milstein for CIR in float64 as docs/language.md writes it, ``x = (x + G * dW) +
    ((0.5 * G) * G_x) * (dW * dW - dt)`` after the drift step, with G_x derived by hand:
    sigma * 0.5 / sqrt(|v|) * (sign(v) or [v >= 0]), and 0 where G is 0 (the limit
    of G * G_x there), on the reference's normals."""
    v = np.array(v0, np.float64)
    index = np.arange(v.size, dtype=np.uint32)
    key = key_of(seed)
    with np.errstate(all="ignore"):
        for n in range(n_steps):
            dw = np.sqrt(np.float64(dt)) * normals(index, n, 0, key).astype(np.float64)
            if positive == "abs(v)":
                u, du = np.abs(v), np.sign(v)
            else:
                u, du = np.maximum(v, 0.0), (v >= 0).astype(np.float64)
            g = sigma * np.sqrt(u)
            g_x = np.where(g == 0, 0.0, sigma * ((0.5 / np.sqrt(u)) * du))
            x = v + dt * (kappa * (theta - v))
            v = (x + g * dw) + ((0.5 * g) * g_x) * (dw * dw - dt)
    return v


@pytest.mark.parametrize("positive", ["max(v, 0.0)", "abs(v)"])
@pytest.mark.parametrize("v0", [0.04, 0.0])
def test_milstein_cir_has_no_nan_and_is_the_hand_loop(backend, positive, v0):
    """dG/dv = 0.5 / sqrt(0) * 0 was inf * 0 = NaN, times G = 0: 92 % of the paths from
    0.04, every path from 0, were NaN on every backend."""
    src = CIR.replace("POSITIVE", positive)
    n = 2000
    dtype = "float32" if backend == "wgpu" else "float64"
    sol = solve(src, np.full(n, v0), backend, seed=11, dtype=dtype)
    assert not np.isnan(sol.states).any()
    ref = cir_by_hand(np.full(n, v0), 11, positive)
    if backend == "numpy":
        np.testing.assert_allclose(sol.states, ref, rtol=1e-12, atol=1e-15)
        return
    # Z differs by float32 ulps between backends (the driver's log and cos), and a path
    # that passes v = 0 jumps by sigma^2/4 (dW^2 - dt) on one side only: compare the
    # ensemble, not every path
    close = np.abs(sol.states - ref) < 1e-3
    assert close.mean() > 0.8
    assert abs(sol.states.mean() - ref.mean()) < 5e-3


# --- rodas4: a Jacobian entry 0 * inf where the field is smooth --------------------

DRAG = """
field drag {
    param c = 0.5
    state vx
    state vy
    dvx/dt = -c * sqrt(vx ^ 2 + vy ^ 2) * vx
    dvy/dt = -1.0 - c * sqrt(vx ^ 2 + vy ^ 2) * vy
    solve rodas4(t1 = 2.0, rtol = 1e-6, atol = 1e-9)
}
"""
POWER = """
field power {
    state x
    state y
    dx/dt = 1.0 - x ^ y
    dy/dt = 0.0 * y
    solve rodas4(t1 = 2.0, rtol = 1e-6, atol = 1e-9)
}
"""


def rodas_tol(dtype):
    return dict(rtol=1e-5, atol=1e-7) if dtype == "float64" else dict(rtol=2e-3, atol=2e-4)


def test_rodas4_quadratic_drag_from_rest_is_the_closed_form(backend):
    """d/dvx of sqrt(vx^2 + vy^2) at rest was 0.5 / 0 * 0 = NaN: status 3 at t0, 0 steps.
    From rest, vx stays 0 and vy' = -1 + c vy^2: vy = -tanh(sqrt(c) t) / sqrt(c)."""
    dtype = dtype_on(backend)
    h0 = np.zeros((3, 2))
    h0[1] = (0.0, -0.5)        # vx = 0, vy != 0: sqrt(vy^2) is smooth, J finite
    h0[2] = (0.0, 0.0)
    sol = solve(DRAG, h0, backend, dtype=dtype)
    assert (sol.status == 0).all() and (sol.steps_taken > 0).all()
    c = 0.5
    tanh = -np.tanh(np.sqrt(c) * 2.0) / np.sqrt(c)
    np.testing.assert_allclose(sol.states[0], [0.0, tanh], **rodas_tol(dtype))
    # from vy = -0.5: vy = -tanh(sqrt(c) t + atanh(0.5 sqrt(c))) / sqrt(c)
    start = np.arctanh(0.5 * np.sqrt(c))
    np.testing.assert_allclose(sol.states[1], [0.0, -np.tanh(np.sqrt(c) * 2.0 + start)
                                               / np.sqrt(c)], **rodas_tol(dtype))
    tsit = solve(DRAG.replace("rodas4", "tsit5"), h0, "numpy", dtype="float64")
    np.testing.assert_allclose(sol.states, tsit.states, **rodas_tol(dtype))


def test_rodas4_power_from_zero_is_the_closed_form(backend):
    """d/dy of x^y at x = 0 was 0^y * log(0) = 0 * -inf = NaN (and d/dx was 0^y * y / 0):
    status 3. With y = 2, x' = 1 - x^2 from 0 is x = tanh(t)."""
    dtype = dtype_on(backend)
    sol = solve(POWER, np.array([[0.0, 2.0], [0.25, 2.0]]), backend, dtype=dtype)
    assert (sol.status == 0).all()
    np.testing.assert_allclose(sol.states[:, 0], np.tanh(2.0 + np.arctanh([0.0, 0.25])),
                               **rodas_tol(dtype))


# --- dt in an adaptive method's stages ----------------------------------------------

DT_FIELD = """
field grows {
    state x
    dx/dt = 1.0 + dt
    solve METHOD(t1 = 1.0, dt0 = 0.1, dtmax = 0.1, rtol = 1.0, atol = 1.0)
}
"""


def explicit_by_hand(method):
    """The explicit pair on dx/dt = 1 + dt in float64: every step dtmax = 0.1 (no
    error estimate gets near the tolerance 1), cut at t1 as ir/controller.py says; stage
    s > 0 sees the step's own dt, stage 0 the FSAL stage of the step before (at t0,
    dt = 0: docs/language.md). x(1) = sum over steps of dt * sum_s b_s k_s."""
    tab = ADAPTIVE[method]
    b = [float(w) for w in tab.b]
    gap = C.end_gap(1.0, np.float64)
    t, x, before, steps = 0.0, 0.0, 0.0, 0
    while t < 1.0:
        cut = t + 0.1 >= 1.0 - gap
        use = 1.0 - t if cut else 0.1
        ks = [1.0 + before] + [1.0 + use] * (len(b) - 1)
        x += use * sum(w * k for w, k in zip(b, ks))
        t, before, steps = (1.0 if cut else t + use), use, steps + 1
    return x, steps


@pytest.mark.parametrize("method", ["dopri5", "bs3", "tsit5"])
def test_dt_in_adaptive_stages_is_the_step(backend, method):
    """numpy cached anything that reads only dt at its first value (dt = 0 at t0): x(1)
    was 1.0 on numpy, 1.1 (as here) on the compiled backends."""
    dtype = "float32" if backend == "wgpu" else "float64"
    sol = solve(DT_FIELD.replace("METHOD", method), np.zeros(1), backend, dtype=dtype)
    x, steps = explicit_by_hand(method)
    assert sol.steps_rejected[0] == 0 and sol.steps_taken[0] == steps
    np.testing.assert_allclose(sol.states[0], x, rtol=1e-13 if dtype == "float64" else 1e-6)
    assert x > 1.09


def rodas_by_hand():
    """rodas4 on dx/dt = 1 + dt (J = 0, so W = I / gamma) in float64, the K form of
    ir/rosenbrock.py: K_s = gamma * (F_s + sum_j c_sj K_j), x += dt * sum_s b_s K_s,
    F_0 = F at the step's start (evaluated after the step before, with its dt)."""
    tab = ADAPTIVE.get("rodas4")
    if tab is None:
        from vgpu_compiler.ir.rosenbrock import STIFF
        tab = STIFF["rodas4"]
    gamma = float(tab.gamma)
    b = [float(w) for w in tab.b]
    gap = C.end_gap(1.0, np.float64)
    t, x, before, steps = 0.0, 0.0, 0.0, 0
    while t < 1.0:
        cut = t + 0.1 >= 1.0 - gap
        use = 1.0 - t if cut else 0.1
        ks = []
        for s in range(len(b)):
            f = 1.0 + (before if s == 0 else use)
            ks.append(gamma * (f + sum(float(cij) * kj for cij, kj in zip(tab.cmat[s], ks))))
        x += use * sum(w * k for w, k in zip(b, ks))
        t, before, steps = (1.0 if cut else t + use), use, steps + 1
    return x, steps


def test_dt_in_rodas4_stages_is_the_step(backend):
    dtype = "float32" if backend == "wgpu" else "float64"
    sol = solve(DT_FIELD.replace("METHOD", "rodas4"), np.zeros(1), backend, dtype=dtype)
    x, steps = rodas_by_hand()
    assert sol.steps_rejected[0] == 0 and sol.steps_taken[0] == steps
    np.testing.assert_allclose(sol.states[0], x, rtol=1e-12 if dtype == "float64" else 1e-6)
    assert x > 1.09


# --- save_at: the working dtype, backward runs ----------------------------------------

DECAY_FIXED = """
field decay {
    state x
    dx/dt = -x
    solve rk4(dt = 0.01, steps = 10)
}
"""
DECAY_ADAPTIVE = """
field decay {
    state x
    dx/dt = -x
    solve tsit5(t1 = 0.1)
}
"""


@pytest.mark.parametrize("src", [DECAY_FIXED, DECAY_ADAPTIVE], ids=["rk4", "tsit5"])
def test_float32_run_takes_its_own_times_as_save_at(backend, src):
    """float32(0.1) = 0.10000000149 was "outside [0, 0.1]": compared in float64."""
    first = solve(src, np.ones(3), backend, save_at=np.linspace(0, 0.1, 5))
    assert first.times.dtype == np.float32 and float(first.times[-1]) > 0.1
    again = solve(src, np.ones(3), backend, save_at=first.times)
    np.testing.assert_array_equal(again.times, first.times)
    np.testing.assert_array_equal(again.history, first.history)
    with pytest.raises(vgpu.CallError, match="outside the integration interval"):
        solve(src, np.ones(3), backend, save_at=[0.0, 0.1001])


def test_backward_fixed_step_run_takes_save_at_in_its_direction(backend):
    """dt < 0 (documented) with save_at: ascending times were "outside [1.0, 0.0]",
    descending ones "not non-decreasing". Now: the times in the run's direction
    (non-increasing), each the Hermite value of the step that holds it, as forwards;
    x' = -x from x(1) = 1 backwards is exp(1 - t)."""
    dtype = "float32" if backend == "wgpu" else "float64"
    times = np.array([1.0, 0.95, 0.73, 0.5, 0.5, 0.31, 0.0])
    kw = dict(t0=1.0, dt=-0.1, steps=10, dtype=dtype)
    sol = solve(DECAY_FIXED, np.ones(2), backend, save_at=times, **kw)
    np.testing.assert_array_equal(sol.times, times.astype(dtype))
    exact = np.exp(1.0 - times)
    np.testing.assert_allclose(sol.history[:, 0], exact, rtol=1e-5)
    np.testing.assert_allclose(sol.states[0], np.e, rtol=1e-5)
    # the step ends: the states of save_every (to an ulp of theta, as forwards)
    every = solve(DECAY_FIXED, np.ones(2), backend, save_every=1, **kw)
    ends = solve(DECAY_FIXED, np.ones(2), backend, save_at=every.times, **kw)
    np.testing.assert_allclose(ends.history, every.history, rtol=1e-6 if dtype ==
                               "float32" else 1e-14)
    if backend != "numpy":
        ref = solve(DECAY_FIXED, np.ones(2), "numpy", save_at=times, **kw)
        np.testing.assert_allclose(sol.history, ref.history, rtol=1e-6 if dtype ==
                                   "float32" else 1e-13)
    with pytest.raises(vgpu.CallError, match="non-increasing for a backward run"):
        solve(DECAY_FIXED, np.ones(2), backend, save_at=times[::-1], **kw)
    with pytest.raises(vgpu.CallError, match="outside the integration interval"):
        solve(DECAY_FIXED, np.ones(2), backend, save_at=[1.0, -0.1], **kw)


# --- t1 beyond the working dtype -------------------------------------------------------

def test_times_beyond_float32_are_refused_up_front(backend):
    """t1 = 1e39 became inf in float32 and ran to status 3."""
    with pytest.raises(vgpu.CallError, match=r"t1.*1e\+39.*float32.*3\.403e\+38"):
        solve(DECAY_ADAPTIVE, np.ones(2), backend, t1=1e39)
    with pytest.raises(vgpu.CallError, match=r"t0 \+ steps \* dt.*float32"):
        solve(DECAY_FIXED, np.ones(2), backend, dt=1e38)
    with pytest.raises(vgpu.CallError, match=r"t0.*-4e\+38.*float32"):
        solve(DECAY_ADAPTIVE, np.ones(2), backend, t0=-4e38, t1=0.0)
    if backend != "wgpu":       # float64 holds it: the run goes on (to max_steps)
        sol = solve(DECAY_ADAPTIVE, np.ones(2), backend, t1=1e39, dtype="float64",
                    max_steps=5)
        assert (sol.status == 2).all()


BALL = """
field ball {
    state x
    state v
    dx/dt = v
    dv/dt = -1.0
    when x < 0.0 { v = -0.8 * v }
    solve rk4(dt = 0.01, steps = 10)
}
"""


def test_backward_fixed_step_events_save_every_is_the_reference(backend):
    """The compiled kernels' save loop at t0 compares in the run's direction now; the
    save_every-with-events slots after t0 (never reached by time) must stay unreached
    backwards too (-inf there, not inf)."""
    kw = dict(t0=2.0, dt=-0.05, steps=40, save_every=4)
    ref = solve(BALL, np.array([[1.0, 0.0]]), "numpy", **kw)
    sol = solve(BALL, np.array([[1.0, 0.0]]), backend, **kw)
    np.testing.assert_array_equal(sol.times, ref.times)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-5, atol=1e-6)
    assert len(set(np.round(ref.history[:, 0, 0], 6))) == len(ref.times)   # all differ


def test_backward_fixed_step_save_at_with_events(backend):
    """Both of this release's additions at once: a fixed-step method's save_at with
    events, backwards (dt < 0), the times in the run's direction. At the step ends the
    saved states are the save_every history's (the same steps and events); between them
    every backend gives numpy's values."""
    kw = dict(t0=2.0, dt=-0.05, steps=40)
    h0 = np.array([[1.0, 0.0], [0.3, 0.5]])
    every = solve(BALL, h0, "numpy", save_every=4, **kw)
    times = np.concatenate([every.times, [1.93, 1.31, 0.77, 0.12]])
    times = np.sort(times)[::-1]
    ref = solve(BALL, h0, "numpy", save_at=times, **kw)
    at_ends = np.isin(times, every.times)
    np.testing.assert_allclose(ref.history[at_ends], every.history, rtol=1e-12, atol=1e-12)
    sol = solve(BALL, h0, backend, save_at=times, **kw)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-5, atol=1e-6)
    assert (sol.event_counts == ref.event_counts).all() and ref.event_counts.sum() > 0


# --- a stopped lane's steps_taken in a basin --------------------------------------------

STOPS = """
field stops {
    basin l < 4
    state x
    state k
    dx/dt = 1.0
    dk/dt = 0.0
    when x > 0.3 + 0.2 * float(l) { k = float(step) }
    stop when x > 0.3 + 0.2 * float(l)
    solve METHOD
}
"""
METHODS = {"rk4": "rk4(dt = 0.01, steps = 100)",
           "tsit5": "tsit5(t1 = 1.0, dt0 = 0.01, dtmax = 0.01)",
           "dopri5": "dopri5(t1 = 1.0)"}


@pytest.mark.parametrize("method", list(METHODS))
def test_stopped_lane_in_a_basin_counts_its_own_steps(backend, method):
    """An adaptive basin's stopped lane reported the basin's steps_taken; fixed steps its
    own. Now both: the steps up to and including the one it stopped in, i.e. `step`
    (the step in progress, read by the `when` that fires with the stop) + 1."""
    src = STOPS.replace("METHOD", METHODS[method])
    h0 = np.zeros((8, 2))
    h0[-1, 0] = -5.0                # never stops: the basin's own count
    sol = solve(src, h0, backend)
    stopped = sol.status == 1
    assert stopped.sum() == 7
    np.testing.assert_array_equal(sol.steps_taken[stopped],
                                  sol.states[stopped, 1].astype(np.int32) + 1)
    assert len(set(sol.steps_taken[:4].tolist())) == 4       # each lane its own
    assert sol.steps_taken[-1] >= sol.steps_taken[:-1].max()
    if backend != "numpy":
        ref = solve(src, h0, "numpy")
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)


# --- rodas4: a singular W halves the step ----------------------------------------------

GROWTH = """
field growth {
    state x
    dx/dt = x
    solve rodas4(t1 = 4.0, dt0 = 4.0)
}
"""


def test_rodas4_singular_matrix_halves_the_step(backend):
    """x' = x with dt0 = 4: W = I / gamma - dt * J = 4 - 4 = 0. The run ended at once
    ("step size underflow", 0 steps); rodas.f halves the step and tries again."""
    dtype = "float32" if backend == "wgpu" else "float64"
    sol = solve(GROWTH, np.ones(2), backend, dtype=dtype)
    assert (sol.status == 0).all() and (sol.steps_taken > 1).all()
    assert (sol.steps_rejected >= 1).all()
    np.testing.assert_allclose(sol.states, np.exp(4.0), rtol=2e-3)
    ref = solve(GROWTH, np.ones(2), "numpy", dtype=dtype)
    np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(sol.steps_rejected, ref.steps_rejected)
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-5 if dtype == "float32"
                               else 1e-12)
    # the halved attempt is the run from dt0 = 2 after one rejection: the same first step
    once = solve(GROWTH, np.ones(2), backend, dtype=dtype, max_steps=1)
    half = solve(GROWTH, np.ones(2), backend, dtype=dtype, dt0=2.0, max_steps=1)
    assert (once.steps_rejected == half.steps_rejected + 1).all()
    tol = 1e-6 if dtype == "float32" else 1e-13      # the halving: 0.9 / root(1.8^4)
    np.testing.assert_allclose(once.t, half.t, rtol=tol)
    np.testing.assert_allclose(once.states, half.states, rtol=tol)
