"""A stiff method (rosenbrock23, rodas4, rodas5p) with events (`when`, `stop when`) on the
compiled backends, against the numpy reference (backends/numpy/rosenbrock.py on
adaptive_events.py) and a closed form.

x decays at rate a and is reset to 1 when it falls below 1/4: the k-th event is at
t_k = k ln 4 / a; y follows x with rate 1000 (stiff: it relaxes from 1/4 to 1 right
after each reset, where the step after the event starts with F and J at the state the
event made). K = 3 on one trajectory stops it at its third event. In the basin case the
lanes share the steps, and the stopped lane rests while its basin runs on (its K_s
zeroed, as the reference's frozen lanes): the save_at history shows it.
"""
from __future__ import annotations

import numpy as np
import pytest

from event_fields import reference, solve_quietly

DECAY = """field decay {
    param a = 1
    param K = 1000
    %(basin)s
    state x = 1, y = 1, n = 0, te = 0
    dx/dt = -a * x
    dy/dt = -1000 * (y - x)
    dn/dt = 0
    dte/dt = 0
    when x < 0.25 { x = 1; n = n + 1; te = t }
    stop when n >= K
    solve %(method)s(t1 = 2, rtol = %(rtol)s, atol = 1e-12)
}"""
A = np.array([1.0, 2.0, 5.0, 3.0])
K = np.array([1000, 1000, 3, 1000], float)
SAVES = np.linspace(0, 2, 21)
LN4 = np.log(4.0)
# (method, basin): the basin with one of them (the same template code for all three)
METHODS = [("rosenbrock23", ""), ("rodas4", "basin l < 2"), ("rodas5p", "")]
# each C kernel costs a compile (2-3 s): on cpu each method once, rodas5p in float32
CASES = ([("cpu", "float64", *m) for m in METHODS[:2]] + [("cpu", "float32", *METHODS[2])]
         + [("glsl", "float32", *m) for m in METHODS] + [("glsl", "float64", *METHODS[1])]
         + [("wgpu", "float32", *m) for m in METHODS])


def _source(method: str, basin: str, dtype: str) -> str:
    rtol = "1e-5" if dtype == "float32" else ("1e-6" if method == "rosenbrock23" else "1e-8")
    return DECAY % dict(method=method, basin=basin, rtol=rtol)


def _closed_tol(method: str, dtype: str) -> float:
    """The event times' error against the closed form at _source's rtol (the reference's
    too): rosenbrock23 is of order 2 (float64 3e-5 off, float32 1.7e-4), the rodas a few
    times rtol."""
    if method == "rosenbrock23":
        return 1e-4 if dtype == "float64" else 3e-4
    return 1e-8 if dtype == "float64" else 2e-5


@pytest.mark.parametrize("backend, dtype, method, basin", CASES)
def test_stiff_events_match_the_reference_and_the_closed_form(request, backend, dtype,
                                                              method, basin):
    request.getfixturevalue(backend)
    src = _source(method, basin, dtype)
    kw = dict(params={"a": A, "K": K}, dtype=dtype, save_at=SAVES)
    ref = reference(src, **kw)
    got = solve_quietly(src, None, backend, **kw)
    assert got.backend == backend
    # the closed form: events at k ln 4 / a (t1 = 2), the third stops a = 5
    count = np.minimum(np.floor(2 * A / LN4), K).astype(int)
    np.testing.assert_array_equal(count, [1, 2, 3, 4])
    np.testing.assert_array_equal(got.event_counts[:, 0], count)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_array_equal(got.status, [0, 0, 1, 0])
    np.testing.assert_array_equal(got.status, ref.status)
    x, y, n, te = got.states.T
    np.testing.assert_array_equal(n, count)
    closed = _closed_tol(method, dtype)
    np.testing.assert_allclose(te, count * LN4 / A, rtol=closed)
    np.testing.assert_allclose(got.t[2], 3 * LN4 / 5, rtol=closed)
    live = [0, 1, 3]
    np.testing.assert_allclose(x[live], np.exp(-(2 * A - count * LN4))[live], rtol=closed * 10)
    # the reference: float64 to its rounding (the same steps), float32 to its own
    if dtype == "float64":
        tol = dict(rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    else:
        tol = dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(got.states, ref.states, **tol)
    np.testing.assert_allclose(got.t, ref.t, **tol)
    np.testing.assert_allclose(got.history, ref.history, **tol)
    # the stopped trajectory rests at the state after its last event (x = 1, n = K)
    late = SAVES > got.t[2]
    np.testing.assert_array_equal(got.history[late, 2], np.broadcast_to(got.states[2],
                                                                        (late.sum(), 4)))
    assert got.states[2, 0] == 1 and got.states[2, 2] == 3
