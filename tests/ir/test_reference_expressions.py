"""The reference backend's expressions: guards, run-time errors, int and function semantics."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu


def run(src, h0=None, **kw):
    kw.setdefault("backend", "numpy")
    kw.setdefault("dtype", "float64")
    return vgpu.run_field(src, h0, **kw)


GUARDED = """
field guarded {
    input v[N]
    state x = 0
    dx/dt = where(i > 0, v[i - 1], 100.0) + where(i < N - 1 and v[i + 1] > 0, 1.0, 0.0)
    solve euler(dt = 1, steps = 1)
}
"""


def test_where_and_and_guard_boundary_reads():
    v = np.array([1.0, -2.0, 3.0, 4.0])
    got = run(GUARDED, inputs={"v": v})
    np.testing.assert_allclose(got, [100 + 0, 1 + 1, -2 + 1, 3 + 0])


def test_index_out_of_range_raises_with_line():
    src = "field bad {\n    input v[N]\n    state x = 0\n    dx/dt = v[i + 1]\n" \
          "    solve euler(dt = 1, steps = 1)\n}\n"
    with pytest.raises(vgpu.VgpuIndexError) as info:
        run(src, inputs={"v": np.ones(4)})
    err = info.value
    assert err.line == 4
    assert "v[4]" in str(err) and "(4,)" in str(err) and "line 4" in str(err)
    assert "dx/dt = v[i + 1]" in str(err)


def test_int_division_by_zero_raises_with_line():
    src = "field bad {\n    grid i < N\n    state x = 0\n    let q = 12 // (i - 2)\n" \
          "    dx/dt = float(q)\n    solve euler(dt = 1, steps = 1)\n}\n"
    with pytest.raises(vgpu.VgpuZeroDivisionError) as info:
        run(src, dims={"N": 5})
    assert info.value.line == 4
    ok = run(src, dims={"N": 2})                   # i - 2 is never 0
    np.testing.assert_allclose(ok, [12 // -2, 12 // -1])


def test_int_semantics_floor_and_wraparound():
    src = """field ints {
        grid i < N
        state a = 0, b = 0, c = 0
        da/dt = float((i - 7) // 2)
        db/dt = float((i - 7) % 3)
        dc/dt = float(2147483647 + i)
        solve euler(dt = 1, steps = 1)
    }"""
    h = run(src, dims={"N": 3})
    i = np.arange(3)
    np.testing.assert_array_equal(h[:, 0], (i - 7) // 2)
    np.testing.assert_array_equal(h[:, 1], (i - 7) % 3)
    np.testing.assert_array_equal(h[:, 2], (np.int32(2147483647) + i.astype(np.int32)))


def test_numpy_meaning_of_functions():
    src = """field fns {
        state a = 0, b = 0, c = 0, d = 0, e = 0
        da/dt = x0 ^ 2.0
        db/dt = x0 ^ 0.5
        dc/dt = min(x0, y0)
        dd/dt = float(int(x0 * 1.5))
        de/dt = sign(x0) + abs(x0) + clamp(x0, -1.0, 1.0)
        solve euler(dt = 1, steps = 1)
    }""".replace("x0", "p").replace("y0", "q")
    src = src.replace("state a", "param p\n        param q\n        state a")
    p = np.array([-2.0, 2.0, np.nan])
    q = np.array([0.0, np.nan, 1.0])
    with pytest.warns(vgpu.NonFiniteWarning, match="3 of 3"):
        h = run(src, params={"p": p, "q": q})
    np.testing.assert_array_equal(h[:, 0], [4.0, 4.0, np.nan])
    assert np.isnan(h[0, 1]) and h[1, 1] == np.sqrt(2.0)
    np.testing.assert_array_equal(h[:, 2], np.minimum(p, q))
    np.testing.assert_array_equal(h[:2, 3], [-3, 3])
    np.testing.assert_array_equal(h[:2, 4], [-1 + 2 - 1, 1 + 2 + 1])


def test_a_guarded_read_used_unguarded_elsewhere_still_raises():
    src = GUARDED.replace("dx/dt = where(i > 0, v[i - 1], 100.0) + where(i < N - 1 and "
                          "v[i + 1] > 0, 1.0, 0.0)",
                          "dx/dt = where(i > 0, v[i - 1], 100.0) + v[i - 1]")
    with pytest.raises(vgpu.VgpuIndexError, match=r"v\[-1\]"):
        run(src, inputs={"v": np.ones(3)})


def test_deep_expressions_built_by_hand():
    from vgpu_compiler.backends.numpy import runner as numpy_ref
    from vgpu_compiler.ir.nodes import Apply, Axis, Const, Field, Solver, State, Sym
    from vgpu_compiler.ir.ops import Op, SymKind, Type
    from vgpu_compiler.ir.tableau import TABLEAUX
    from vgpu_compiler.call.bind import bind

    F = Type.FLOAT
    x = Sym(SymKind.STATE, "x", F)
    e = x
    for _ in range(3000):                       # far deeper than Python's recursion limit
        e = Apply(Op.ADD, (e, Apply(Op.MUL, (x, Const(1e-4, F)), F)), F)
    solver = Solver("euler", TABLEAUX["euler"], Const(0.01, F), Const(1, Type.INT),
                    Const(0.0, F))
    field = Field(name="deep", states=(State("x", None),), derivs=(e,), params=(), inputs=(),
                  outputs=(), dims=("N",), grid=(Axis("i", "N"),), basin=None, coupled=(),
                  collapse=None, flux=(), solver=solver)
    sol = numpy_ref.run(bind(field, np.ones(3), dtype="float64"))
    np.testing.assert_allclose(sol.states, 1 + 0.01 * 1.3, rtol=1e-12)


def test_int_of_huge_and_nan_values_is_int_min():
    src = """field toint {
        param p
        state a = 0
        da/dt = float(int(p))
        solve euler(dt = 1, steps = 1)
    }"""
    p = np.array([3e9, -3e9, np.nan, 2147483520.0, -2.5])
    got = run(src, params={"p": p}, dtype="float32")
    np.testing.assert_array_equal(got, np.float32([-2**31, -2**31, -2**31, 2147483520, -3]))
