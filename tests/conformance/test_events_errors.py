"""Source errors of events (line, column, caret), and every backend runs them (a stiff
method with events: tests/conformance/test_events_stiff.py)."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends
from vgpu_compiler.errors import DeclarationError, NameError_, SyntaxError_

from conftest import COMPILED_BACKENDS

BASE = """field f {
    param p = 1
    input A[3]
    output H[2]
    basin l < 4
    state x, y
    let q = 2 * x
    coupled s = x
    dx/dt = y
    dy/dt = -x
    %s
    solve rk4(dt = 0.1, steps = 10)
}"""


@pytest.mark.parametrize("stmt, error, column, words", [
    ("when x > 0 { p = 1 }", NameError_, 18, "`p` is a param; a `when` block may assign only"),
    ("when x > 0 { A = 1 }", NameError_, 18, "`A` is an input"),
    ("when x > 0 { q = 1 }", NameError_, 18, "`q` is a let"),
    ("when x > 0 { s = 1 }", NameError_, 18, "`s` is a coupled name"),
    ("when x > 0 { z = 1 }", NameError_, 18, "`z` is not declared"),
    ("when x > 0 { }", DeclarationError, 5, "an empty `when` block"),
    ("when x > 0 { let w = 1 }", DeclarationError, 18, "let does not belong in a `when`"),
    ("when s > 0 { x = 1 }", NameError_, 10, "may not use `s` (a coupled name)"),
    ("when x > 0 { x = mean(s) }", NameError_, 22, "coupled"),
    ("when x > 0 { flux H[0] += s }", NameError_, 31, "coupled"),
    ("stop when s > 1", NameError_, 15, "coupled"),
    ("when x > 0 { x = 1; x = 2 }", DeclarationError, 25, "assigned twice"),
    ("when x { x = 1 }", Exception, 10, "condition"),
])
def test_event_source_errors(stmt, error, column, words):
    with pytest.raises(error) as info:
        vgpu.compile(BASE % stmt)
    err = info.value
    assert words in str(err)
    assert err.line == 11 and err.column == column
    text = str(err)
    assert "^" in text and (BASE % stmt).splitlines()[10].strip() in text


def test_stop_is_a_keyword():
    with pytest.raises(SyntaxError_):
        vgpu.solve("field f {\n state stop\n dstop/dt = 1\n solve euler(dt = 1, steps = 1)\n}",
                   np.zeros(2), backend="numpy")


def test_when_block_may_span_lines():
    src = """field f {
        state x = 0, n = 0
        dx/dt = 1
        dn/dt = 0
        when x > 0.5
        {
            x = 0
            n = n + 1
        }
        solve rk4(dt = 0.1, steps = 10)
    }"""
    sol = vgpu.solve(src, dims={"N": 1}, backend="numpy", dtype="float64")
    assert sol.event_counts[0, 0] == 1


@pytest.mark.parametrize("backend", ("numpy",) + COMPILED_BACKENDS)
def test_every_backend_runs_events(backend, request):
    """Every backend of the registry lists events among its features and runs them."""
    if backend != "numpy":
        request.getfixturevalue(backend)        # a compiled backend's fixture: skip or fail
    assert "events" in backends.get(backend).features
    src = """field f {
        state x = 0
        dx/dt = 1
        stop when x > 0.5
        solve euler(dt = 0.1, steps = 10)
    }"""
    sol = vgpu.solve(src, dims={"N": 4}, backend=backend)
    ref = vgpu.solve(src, dims={"N": 4}, backend="numpy")
    assert sol.backend == backend
    assert (sol.status == 1).all()
    np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    np.testing.assert_allclose(sol.t, ref.t, rtol=1e-6)
    np.testing.assert_allclose(sol.t, 0.5, rtol=1e-5)     # x = t crosses 0.5 there
