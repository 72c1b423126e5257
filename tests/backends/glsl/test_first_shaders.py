"""The observer ``first(COND)`` on the GPU backends (glsl, wgpu; here llvmpipe and
lavapipe): the events kernel locates it with the location built once
(codegen/build/locate.py), against the numpy reference, the closed form of exponential
decay, a dense history; adding it changes no state and no step."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import StatusWarning

from test_observers import EVENTS, FIRSTS, METHODS, _same_run, _without

GPU = ["glsl", "wgpu"]
DTYPES = {"glsl": ["float32", "float64"], "wgpu": ["float32"]}
CASES = [(b, d) for b in GPU for d in DTYPES[b]]


def _same(backend, sol, plain):
    """The run is the one without observers, bit for bit, on wgpu too: the field with a
    `first` runs the events kernel, the one without it the plain kernel (or the plain
    steps before the event code), and WGSL has no `precise`; lavapipe contracts both the
    same way in these fields (measured: identical states; both can be an ulp off numpy's,
    as the plain kernel is)."""
    return _same_run(sol, plain)


def _solve(src, backend, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatusWarning)
        return vgpu.solve(src, backend=backend, **kw)


@pytest.mark.parametrize("events", EVENTS, ids=["plain", "when", "stop"])
@pytest.mark.parametrize("method", METHODS, ids=["rk4", "dopri5", "tsit5"])
@pytest.mark.parametrize("backend,dtype", CASES)
def test_first_equals_the_reference(request, backend, dtype, events, method):
    """first(COND) beside a peak (conditions reading t and step; one made true by an
    event's reset), fixed and adaptive methods, with and without events: with fixed steps
    the reference's bit for bit where the states are (glsl; wgpu's plain steps before the
    event code round as lavapipe contracts them, WGSL having no `precise`: to the
    rounding of the states there); adaptive, to the rounding of the states (the shader's
    controller rounds its steps its own way); which trajectories cross is the same; the
    run is the one without observers."""
    request.getfixturevalue(backend)
    w = np.array([0.7, 1.0, 2.0, 3.0, 5.0])
    src = FIRSTS % (events, method)
    kw = {"params": {"w": w}, "dtype": dtype}
    ref = _solve(src, "numpy", **kw)
    sol = _solve(src, backend, **kw)
    assert sol.backend == backend
    fixed = method.startswith("rk4") and backend != "wgpu"
    if fixed:
        np.testing.assert_array_equal(sol.states, ref.states)
    for k, v in ref.observed.items():
        np.testing.assert_array_equal(np.isnan(sol.observed[k]), np.isnan(v), err_msg=k)
        if fixed:
            np.testing.assert_array_equal(sol.observed[k], v, err_msg=k)
        tol = 1e-11 if dtype == "float64" else 1e-5 if k != "vmax" else 1e-2
        np.testing.assert_allclose(sol.observed[k], v, rtol=tol, atol=tol, err_msg=k)
    assert not np.isnan(ref.observed["cross"]).any()
    if events.startswith("when"):       # the reset made n > 0.5 at the event's time
        np.testing.assert_allclose(sol.observed["made"], sol.observed["cross"], rtol=1e-6)
    _same(backend, sol, _solve(_without(src), backend, **kw))


DECAY = """
field decay {
    param k = 1
    param c = 0.5
    state y = 1
    dy/dt = -k * y
    observe below = first(y < c)
    solve %s
}
"""


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 300)",
                                    "dopri5(t1 = 3, rtol = {rtol}, atol = 1e-10)"])
@pytest.mark.parametrize("backend,dtype", CASES)
def test_first_exponential_decay_closed_form_and_history(request, backend, dtype, method):
    """y = e^{-kt}: first(y < c) at ln(1/c) / k (to the method's error, the events'
    bracket and the dtype), NaN where that is past t1; with fixed steps the reference's
    bit for bit and inside the step of a save_every=1 history where y first goes below c."""
    request.getfixturevalue(backend)
    k = np.array([0.5, 1.0, 2.0, 4.0, 0.1])
    c = np.array([0.5, 0.3, 0.9, 0.01, 0.2])
    src = DECAY % method.format(rtol="1e-10" if dtype == "float64" else "1e-6")
    kw = {"params": {"k": k, "c": c}, "dtype": dtype}
    sol = _solve(src, backend, **kw)
    ref = _solve(src, "numpy", **kw)
    exact = np.log(1 / c) / k
    want = np.where(exact < 3, exact, np.nan)
    assert np.isnan(want).sum() == 1
    close = 1e-6 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(sol.observed["below"], want, rtol=close)
    if method.startswith("rk4"):
        np.testing.assert_array_equal(sol.observed["below"], ref.observed["below"])
        hist = _solve(src, backend, save_every=1, **kw)
        np.testing.assert_array_equal(hist.observed["below"], sol.observed["below"])
        for j in range(len(k)):
            under = np.nonzero(hist.history[:, j] < c[j])[0]
            if not len(under):
                assert np.isnan(sol.observed["below"][j])
                continue
            n = under[0]
            assert hist.times[n - 1] < sol.observed["below"][j] <= hist.times[n]
    else:
        tol = 1e-12 if dtype == "float64" else 1e-5
        np.testing.assert_allclose(sol.observed["below"], ref.observed["below"], rtol=tol)
    _same(backend, sol, _solve(_without(src), backend, **kw))


@pytest.mark.parametrize("backend,dtype", CASES)
def test_first_with_noise_and_in_a_basin(request, backend, dtype):
    """With noise the crossing is the first step end where COND holds (the save_every=1
    history shows it); in a basin whose step ends at its earliest event, each lane's
    first is the reference's."""
    request.getfixturevalue(backend)
    walk = """
field walk {
    noise xi
    state x = 0
    dx/dt = xi
    observe out = first(x > 0.5)
    solve euler(dt = 0.01, steps = 200)
}
"""
    kw = {"dims": {"N": 64}, "seed": 3, "dtype": dtype}
    sol = _solve(walk, backend, save_every=1, **kw)
    ref = _solve(walk, "numpy", **kw)
    np.testing.assert_allclose(sol.states, ref.states, atol=1e-5)
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
    tol = 1e-9 if dtype == "float64" else 1e-4
    for method in ("rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)"):
        kw = {"dtype": dtype, "dims": {"N": 8}}
        ref = _solve(ring % method, "numpy", **kw)
        sol = _solve(ring % method, backend, **kw)
        assert ref.event_counts.sum() > 0
        assert not np.isnan(ref.observed["bumped"]).all()
        for k, v in ref.observed.items():
            np.testing.assert_array_equal(np.isnan(sol.observed[k]), np.isnan(v), err_msg=k)
            np.testing.assert_allclose(sol.observed[k], v, rtol=tol, atol=tol, err_msg=k)
        _same(backend, sol, _solve(_without(ring % method), backend, **kw))


@pytest.mark.parametrize("backend", GPU)
def test_first_over_many_dispatches(request, backend):
    """A long fixed-step run (the software renderer's loop limiter caps the attempts of
    one dispatch, the location's loops counted): the reference's bit for bit."""
    request.getfixturevalue(backend)
    src = DECAY % "heun(dt = 0.0005, steps = 6000)"
    k = np.linspace(0.2, 3.0, 9)
    kw = {"params": {"k": k, "c": np.full(9, 0.4)}, "dtype": "float32"}
    sol = _solve(src, backend, **kw)
    ref = _solve(src, "numpy", **kw)
    np.testing.assert_array_equal(sol.observed["below"], ref.observed["below"])
    exact = np.log(1 / 0.4) / k
    assert (exact > 3).sum() == 1
    np.testing.assert_allclose(sol.observed["below"], np.where(exact < 3, exact, np.nan),
                               rtol=2e-5)


# --- a fixed-step Simulation (shader/located.py; test_observers.py has the tests shared
# with cpu: test_simulation_first_equals_one_run, ..._after_changes_equals_numpy) ---


@pytest.mark.parametrize("backend", GPU)
def test_simulation_first_interrupted_goes_back_and_a_long_run(request, backend,
                                                               monkeypatch):
    """A Ctrl-C between the dispatches of an advance (its trajectories part way, at
    steps of their own) undoes the advance; then a long run in pieces of several
    dispatches each (the attempts capped) gives one run's first bit for bit, the closed
    form ln(1/c)/k to float32."""
    import signal
    request.getfixturevalue(backend)
    src = DECAY % "heun(dt = 0.0005, steps = 6000)"
    k = np.linspace(0.2, 3.0, 9)
    kw = {"params": {"k": k, "c": np.full(9, 0.4)}, "dtype": "float32"}
    sim = vgpu.Simulation(src, backend=backend, **kw)
    sim.advance(500)
    before, seen = sim.states, sim.observed
    target = sim._session.target
    target.cap = 97                     # (several dispatches an advance)
    calls, trip = [0], target.trip

    def interrupted(*args, **kwargs):
        out = trip(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 3:
            signal.raise_signal(signal.SIGINT)
        return out
    monkeypatch.setattr(target, "trip", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(1000)
    assert calls[0] == 3 and sim.step == 500
    np.testing.assert_array_equal(sim.states, before)
    np.testing.assert_array_equal(sim.observed["below"], seen["below"])
    for _ in range(11):
        sim.advance(500)
    assert calls[0] > 3 + 11 * 5
    one = _solve(src, backend, **kw)
    np.testing.assert_array_equal(sim.observed["below"], one.observed["below"])
    np.testing.assert_array_equal(sim.states, one.states)
    exact = np.log(1 / 0.4) / k
    np.testing.assert_allclose(sim.observed["below"], np.where(exact < 3, exact, np.nan),
                               rtol=2e-5)


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 300)",
                                    "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-9)"])
@pytest.mark.parametrize("backend", GPU)
def test_first_with_save_at(request, backend, method):
    """save_at beside a first: the history is the one without it (t0 included), the
    observer the reference's (bit for bit with fixed steps)."""
    request.getfixturevalue(backend)
    kw = {"params": {"k": np.array([0.5, 1.0, 2.0]), "c": np.array([0.5, 0.3, 0.9])},
          "save_at": np.linspace(0, 2.5, 6), "dtype": "float32"}
    src = DECAY % method
    sol = _solve(src, backend, **kw)
    ref = _solve(src, "numpy", **kw)
    plain = _solve(_without(src), backend, **kw)
    if method.startswith("rk4"):
        np.testing.assert_array_equal(sol.observed["below"], ref.observed["below"])
        np.testing.assert_array_equal(sol.history, ref.history)
    np.testing.assert_allclose(sol.observed["below"], ref.observed["below"], rtol=1e-6)
    np.testing.assert_allclose(sol.history, plain.history, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(sol.history[0], np.ones((3,), np.float32))
