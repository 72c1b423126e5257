"""Observers with the stiff methods (rodas4, rodas5p, rosenbrock23): an integral is a
row of the Rosenbrock system solved after the states' (backends/numpy/rosenbrock.py
``block_solve``), so the states and steps are the run's without observers, bit for bit;
against closed forms of a stiff linear system, a dense save_at history, with events and
sensitivities (numpy), and the compiled backends against the reference."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu

from test_observers import _same_run, _without

STIFF = ("rodas4", "rodas5p", "rosenbrock23")

# y1 = e^{-a t}, y2 = a / (b - a) (e^{-a t} - e^{-b t}): stiff for b = 1000
LINEAR = """
field lin {
    param a = 1
    param b = 1000
    state y1 = 1, y2 = 0
    dy1/dt = -a * y1
    dy2/dt = a * y1 - b * y2
    observe area = integral(y2)
    observe bar = average(y1 * t)
    observe hi = peak(y2)
    observe lo = trough(y1)
    observe half = first(y1 < 0.5)
    solve %s(t1 = 1, rtol = %s, atol = 1e-10)
}
"""
A = np.array([0.5, 1.0, 2.0])
B = 1000.0


def _closed(a, b=B):
    area = a / (b - a) * ((1 - np.exp(-a)) / a - (1 - np.exp(-b)) / b)
    bar = (1 - np.exp(-a) * (1 + a)) / a ** 2          # int_0^1 t e^{-a t} dt / 1
    ts = np.log(b / a) / (b - a)
    hi = a / (b - a) * (np.exp(-a * ts) - np.exp(-b * ts))
    half = np.log(2) / a
    return area, bar, hi, np.where(half < 1, half, np.nan)


@pytest.mark.parametrize("method", STIFF)
def test_stiff_observers_closed_form_and_the_same_run(method):
    """Every kind against the closed form; trough of the decreasing y1 is its final
    state bit for bit; the states, steps and all else are the run's without observers."""
    src = LINEAR % (method, "1e-8")
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"a": A})
    area, bar, hi, half = _closed(A)
    # (rosenbrock23 is of order 2: its own states are 1e-6 off at rtol = 1e-8, and the
    # integral, not error-controlled, a few times that)
    tol = 5e-5 if method == "rosenbrock23" else 1e-7
    np.testing.assert_allclose(sol.observed["area"], area, rtol=tol)
    np.testing.assert_allclose(sol.observed["bar"], bar, rtol=tol)
    np.testing.assert_allclose(sol.observed["hi"], hi, rtol=1e-3)     # step ends
    assert (sol.observed["hi"] <= hi * (1 + 10 * tol)).all()      # (the states' error)
    np.testing.assert_allclose(sol.observed["half"], half, rtol=max(tol, 1e-6))
    np.testing.assert_array_equal(sol.observed["lo"], sol.states[:, 0])
    _same_run(sol, vgpu.solve(_without(src), backend="numpy", dtype="float64",
                              params={"a": A}))


@pytest.mark.parametrize("method", ["rodas4", "rodas5p"])
def test_stiff_observers_equal_the_dense_history(method):
    """The same statistics from a dense save_at history of the run without observers:
    the integral by Simpson's rule, the peak and the first crossing."""
    integrate = pytest.importorskip("scipy.integrate")
    src = LINEAR % (method, "1e-9")
    times = np.linspace(0, 1, 4001)
    plain = vgpu.solve(_without(src), backend="numpy", dtype="float64", params={"a": A},
                       save_at=times)
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"a": A})
    y1, y2 = plain.history[..., 0], plain.history[..., 1]
    np.testing.assert_allclose(sol.observed["area"], integrate.simpson(y2, x=times, axis=0),
                               rtol=1e-6)
    np.testing.assert_allclose(sol.observed["bar"],
                               integrate.simpson(y1 * times[:, None], x=times, axis=0),
                               rtol=1e-7)
    np.testing.assert_allclose(sol.observed["hi"], y2.max(axis=0), rtol=1e-3)
    for k in range(len(A)):
        below = np.nonzero(y1[:, k] < 0.5)[0]
        if len(below) == 0:
            assert np.isnan(sol.observed["half"][k])
            continue
        j = below[0]
        cross = np.interp(0.5, y1[[j, j - 1], k], times[[j, j - 1]])
        assert abs(sol.observed["half"][k] - cross) < 1e-6


def test_stiff_observers_with_events():
    """rodas4 with a `when` (numpy): y1 reset to 1 at t = ln 2 / a; the integral of y1
    is piecewise closed form, the peak 1 (t0, just after the event), the trough 0.5 just
    before it; the run is the one without observers."""
    src = """
field reset {
    param a = 1
    param b = 1000
    state y1 = 1, y2 = 0
    dy1/dt = -a * y1
    dy2/dt = a * y1 - b * y2
    when y1 < 0.5 { y1 = 1 }
    observe s = integral(y1)
    observe hi = peak(y1)
    observe lo = trough(y1)
    observe half = first(y1 < 0.5)
    solve rodas4(t1 = 1, rtol = 1e-9, atol = 1e-11)
}
"""
    a = np.array([1.0, 2.0])
    sol = vgpu.solve(src, backend="numpy", dtype="float64", params={"a": a})
    tau = np.log(2) / a
    # a = 2: resets at tau and 2 tau (= ln 2 < 1), then decays from 1 to t1 = 1
    n = np.floor(1 / tau)
    want = n * 0.5 / a + (1 - np.exp(-a * (1 - n * tau))) / a
    np.testing.assert_allclose(sol.observed["s"], want, rtol=1e-7)
    np.testing.assert_array_equal(sol.observed["hi"], [1.0, 1.0])
    np.testing.assert_allclose(sol.observed["lo"], 0.5, rtol=1e-7)
    np.testing.assert_allclose(sol.observed["half"], tau, rtol=1e-7)
    np.testing.assert_array_equal(sol.event_counts[:, 0], n)
    _same_run(sol, vgpu.solve(_without(src), backend="numpy", dtype="float64",
                              params={"a": a}))


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_stiff_observers_with_sensitivities(request, backend):
    """Observers after the sensitivities' blocks: the states, sensitivities and steps
    are the call's without observers; the integral is the closed form (cpu: numpy's)."""
    if backend != "numpy":
        request.getfixturevalue(backend)
    src = LINEAR % ("rodas4", "1e-8")
    if backend != "numpy":      # (first with a stiff method on cpu: the compiled test's)
        src = src.replace("    observe half = first(y1 < 0.5)\n", "")
    args = dict(dtype="float64", params={"a": A}, sensitivities=["a", "b"])
    sol = vgpu.solve(src, backend=backend, **args)
    plain = vgpu.solve(_without(src), backend=backend, **args)
    _same_run(sol, plain)
    np.testing.assert_array_equal(sol.sensitivities, plain.sensitivities)
    np.testing.assert_allclose(sol.observed["area"], _closed(A)[0], rtol=1e-7)
    if backend != "numpy":
        ref = vgpu.solve(src, backend="numpy", **args)
        np.testing.assert_allclose(sol.observed["area"], ref.observed["area"], rtol=1e-12)
        np.testing.assert_allclose(sol.sensitivities, ref.sensitivities, rtol=1e-9,
                                   atol=1e-15)


# --- the compiled backends ----------------------------------------------------------------
@pytest.mark.parametrize("method", STIFF)
@pytest.mark.parametrize("backend", ["cpu", "glsl", "wgpu"])
def test_compiled_stiff_observers_equal_the_reference(request, backend, method):
    """All five kinds: the reference's within the dtype's rounding (float64 cpu: its
    steps; float32: steps of its own), `first` located on the Rosenbrock step's dense
    output in the events' kernel (no `when`) as numpy does, ln 2 / a within the
    tolerance; and the backend's run without observers bit for bit (wgpu: see below)."""
    request.getfixturevalue(backend)
    dtype = "float64" if backend == "cpu" else "float32"
    src = LINEAR % (method, "1e-7" if dtype == "float64" else "1e-5")
    ref = vgpu.solve(src, backend="numpy", dtype=dtype, params={"a": A})
    sol = vgpu.solve(src, backend=backend, dtype=dtype, params={"a": A})
    if dtype == "float64":
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    tol = 1e-12 if dtype == "float64" else 2e-4
    for name in ("area", "bar", "lo"):
        np.testing.assert_allclose(sol.observed[name], ref.observed[name], rtol=tol)
    np.testing.assert_allclose(sol.observed["hi"], ref.observed["hi"],
                               rtol=1e-12 if dtype == "float64" else 2e-3)
    np.testing.assert_allclose(sol.observed["area"], _closed(A)[0],
                               rtol=1e-5 if dtype == "float64" else 1e-3)
    # first(y1 < 0.5): NaN where it never happens (a = 0.5: ln 2 / a > t1)
    assert np.isnan(sol.observed["half"][0]) and np.isnan(ref.observed["half"][0])
    np.testing.assert_allclose(sol.observed["half"][1:], ref.observed["half"][1:],
                               rtol=1e-13 if dtype == "float64" else 1e-5)
    # (rosenbrock23, of order 2, at float32's rtol = 1e-5: 1.2e-4 off, numpy's too)
    loose = 3e-4 if dtype == "float32" else 2e-5
    np.testing.assert_allclose(sol.observed["half"][1:], _closed(A)[3][1:],
                               rtol=loose if method == "rosenbrock23" else 1e-5)
    plain = vgpu.solve(_without(src), backend=backend, dtype=dtype, params={"a": A})
    if backend != "wgpu":
        _same_run(sol, plain)
        return
    # wgpu: with `first` the events' kernel, without it the plain one, whose float32 the
    # driver may contract differently (WGSL has no `precise`): the states a few ulps
    # apart (rosenbrock23: 2.4e-6 after 96 steps), the steps and times the same
    np.testing.assert_allclose(sol.states, plain.states, rtol=1e-5)
    for name in ("steps_taken", "steps_rejected", "status", "t"):
        np.testing.assert_array_equal(getattr(sol, name), getattr(plain, name), err_msg=name)
