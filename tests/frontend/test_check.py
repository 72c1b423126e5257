"""Stage 3: AST -> IR (frontend/check.py, scope.py, exprs.py): accepted programs and their IR."""
from __future__ import annotations

import pytest

from field_examples import COLLAPSE, HEAT, HISTOGRAM, KURAMOTO, LORENZ, MATMUL
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import UnknownNameError
from vgpu_compiler.ir.nodes import (Apply, Axis, Const, CoupledAt, Field, Load, Reduce, Sym)
from vgpu_compiler.ir.ops import Edge, Op, ReduceOp, SymKind, Type
from vgpu_compiler.ir.tableau import TABLEAUX

F = Type.FLOAT
I = Type.INT


def checked(src: str) -> Field:
    """The IR as the checker built it (before folding)."""
    (field,) = compile_program(src).checked.fields
    return field


def let_ir(decls: str, text: str) -> object:
    """The IR of `text` used as a derivative, in a field with `decls`."""
    field = checked("field f {\n" + decls + "\nstate x\ndx/dt = float(" + text + ")\n"
                    "solve euler(dt = 1, steps = 1)\n}")
    return field.derivs[0]      # float(e) is e for a float, TO_FLOAT(e) for an int


def sym(kind, name, t=F):
    return Sym(kind, name, t)


def fl(e):
    return Apply(Op.TO_FLOAT, (e,), F)


X = sym(SymKind.STATE, "x")
IDX = sym(SymKind.GRID, "i", I)


def test_lorenz():
    f = checked(LORENZ)
    assert f.name == "lorenz" and f.state_names == ("x", "y", "z")
    assert [p.name for p in f.params] == ["sigma", "rho", "beta"]
    assert f.params[2].default == Apply(Op.DIV, (Const(8.0, F), Const(3.0, F)), F)
    assert f.grid == (Axis("i", "N"),) and f.dims == ("N",) and f.basin is None
    sigma, y = sym(SymKind.PARAM, "sigma"), sym(SymKind.STATE, "y")
    assert f.derivs[0] == Apply(Op.MUL, (sigma, Apply(Op.SUB, (y, X), F)), F)
    assert f.solver.method == "rk4" and f.solver.tableau is TABLEAUX["rk4"]
    assert f.solver.dt == Const(0.01, F) and f.solver.steps == Const(1000, I)
    assert f.solver.t0 == Const(0.0, F)
    assert all(s.init is None for s in f.states) and len(f.free_states) == 3


def test_matmul():
    f = checked(MATMUL)
    assert f.dims == ("M", "K", "N")        # in order of first appearance
    assert f.grid == (Axis("i", "M"), Axis("j", "N"))
    assert [(a.name, a.dims) for a in f.inputs] == [("A", ("M", "K")), ("B", ("K", "N"))]
    assert f.states[0].init == fl(Const(0, I))
    step, j = sym(SymKind.STEP, "step", I), sym(SymKind.GRID, "j", I)
    assert f.derivs[0] == Apply(Op.MUL, (Load("A", (IDX, step)), Load("B", (step, j))), F)
    assert f.solver.steps == sym(SymKind.DIM, "K", I)
    assert f.solver.dt == fl(Const(1, I))
    assert f.free_states == ()


def test_kuramoto():
    f = checked(KURAMOTO)
    assert f.basin == (Axis("l", 256),)
    theta = sym(SymKind.STATE, "theta")
    assert [(c.name, c.edge) for c in f.coupled] == [("s", Edge.CLAMP), ("c", Edge.CLAMP)]
    assert f.coupled[0].expr == Apply(Op.SIN, (theta,), F)
    reductions = _collect(f.derivs[0], Reduce)
    assert set(reductions) == {Reduce(ReduceOp.MEAN, "s"), Reduce(ReduceOp.MEAN, "c")}
    assert Load("omega", (IDX,)) in _collect(f.derivs[0], Load)


def test_histogram():
    f = checked(HISTOGRAM)
    (flux,) = f.flux
    assert flux.output == "counts" and flux.value == fl(Const(1, I))
    (index,) = flux.index
    to_int = Apply(Op.TO_INT, (Apply(Op.MUL, (X, fl(Const(16, I))), F),), I)
    assert index == Apply(Op.CLAMP, (to_int, Const(0, I), Const(31, I)), I)
    assert f.outputs[0].dims == (32,)


def test_heat_stencil_with_edges():
    f = checked(HEAT)
    assert f.coupled[0].edge is Edge.ZERO
    at = _collect(f.derivs[0], CoupledAt)
    l_ = sym(SymKind.BASIN, "l", I)
    assert CoupledAt("v", (Apply(Op.SUB, (l_, Const(1, I)), I),)) in at
    assert sym(SymKind.COUPLED, "v") in _collect(f.derivs[0], Sym)


def test_collapse_two_dimensional_basin_and_starts():
    f = checked(COLLAPSE)
    assert f.basin == (Axis("a", 8), Axis("b", 8)) and f.grid == (Axis("i", "M"), Axis("j", "P"))
    assert f.collapse.type is Type.BOOL and f.collapse.op is Op.AND
    assert f.coupled[0].edge is Edge.WRAP and f.coupled[1].edge is Edge.CLAMP
    x_init = Apply(Op.DIV, (fl(IDX), fl(sym(SymKind.DIM, "M", I))), F)
    assert f.states[0].init == x_init
    assert f.states[1].init == Apply(Op.ADD, (X, fl(sym(SymKind.GRID, "j", I))), F)
    assert sym(SymKind.INIT, "x") in _collect(f.derivs[1], Sym)
    assert Reduce(ReduceOp.MAX, "f") in _collect(f.derivs[0], Reduce)
    assert f.solver.method == "heun" and f.solver.t0 == fl(Const(0, I))


@pytest.mark.parametrize("text, expected", [
    ("i + 1", Apply(Op.ADD, (IDX, Const(1, I)), I)),
    ("i // 2 % 3", Apply(Op.MOD, (Apply(Op.FLOORDIV, (IDX, Const(2, I)), I), Const(3, I)), I)),
    ("i / 2", Apply(Op.DIV, (fl(IDX), fl(Const(2, I))), F)),
    ("i ^ 2", Apply(Op.POW, (fl(IDX), fl(Const(2, I))), F)),
    ("pow(i, 2)", Apply(Op.POW, (fl(IDX), fl(Const(2, I))), F)),
    ("x + i", Apply(Op.ADD, (X, fl(IDX)), F)),
    ("-i", Apply(Op.NEG, (IDX,), I)),
    ("abs(i)", Apply(Op.ABS, (IDX,), I)),
    ("sign(x)", Apply(Op.SIGN, (X,), F)),
    ("min(i, 2)", Apply(Op.MIN, (IDX, Const(2, I)), I)),
    ("max(i, 2.0)", Apply(Op.MAX, (fl(IDX), Const(2.0, F)), F)),
    ("clamp(i, 0, x)", Apply(Op.CLAMP, (fl(IDX), fl(Const(0, I)), X), F)),
    ("sin(i)", Apply(Op.SIN, (fl(IDX),), F)),
    ("int(x)", Apply(Op.TO_INT, (X,), I)),
    ("int(i)", IDX),
    ("float(x)", X),
    ("where(x > i, i, 1)", Apply(Op.WHERE, (Apply(Op.GT, (X, fl(IDX)), Type.BOOL), IDX,
                                            Const(1, I)), I)),
    ("where(i > 0, i, 1.5)", Apply(Op.WHERE, (Apply(Op.GT, (IDX, Const(0, I)), Type.BOOL),
                                              fl(IDX), Const(1.5, F)), F)),
    ("-2147483648", Const(-2147483648, I)),
    ("t + dt", Apply(Op.ADD, (sym(SymKind.TIME, "t"), sym(SymKind.DT, "dt")), F)),
    ("step", sym(SymKind.STEP, "step", I)),
    ("N", sym(SymKind.DIM, "N", I)),
])
def test_types_and_promotions(text, expected):
    expr = let_ir("param p", text)
    if expected.type is I:
        expected = fl(expected)
    assert expr == expected


def test_logic_and_comparisons_give_bool():
    f = checked("field f { grid i < N; basin l < 4; state x; dx/dt = 1\n"
                "collapse when not (x > 1 or i == 2) and x != 0\n"
                "solve euler(dt = 1, steps = 1) }")
    c = f.collapse
    assert c.op is Op.AND and c.args[0].op is Op.NOT and c.args[0].args[0].op is Op.OR
    eq = c.args[0].args[0].args[1]
    assert eq == Apply(Op.EQ, (IDX, Const(2, I)), Type.BOOL)


def test_lets_are_inlined_and_shared_structurally():
    f = checked("field f { state x\nlet a = sin(x)\nlet b = a * a\n"
                "dx/dt = b + a\nsolve euler(dt = 1, steps = 1) }")
    a = Apply(Op.SIN, (X,), F)
    assert f.derivs[0] == Apply(Op.ADD, (Apply(Op.MUL, (a, a), F), a), F)


def test_params_defaults_may_use_params():
    f = checked("field f { param p = 2; param q = p * 3; param r\nstate x; dx/dt = r\n"
                "solve euler(dt = q, steps = 1) }")
    p = sym(SymKind.PARAM, "p")
    assert f.params[0].default == fl(Const(2, I))
    assert f.params[1].default == Apply(Op.MUL, (p, fl(Const(3, I))), F)
    assert f.params[2].default is None
    assert f.solver.dt == sym(SymKind.PARAM, "q")


def test_state_start_may_use_inputs_t_and_earlier_states():
    f = checked("field f { input A[N]; state a = A[i] + t, b, c = a * b; da/dt = 0\n"
                "db/dt = 0; dc/dt = 0; solve euler(dt = 1, steps = 1) }")
    assert f.states[1].init is None and [s.name for s in f.free_states] == ["b"]
    assert f.states[2].init == Apply(Op.MUL, (sym(SymKind.STATE, "a"),
                                             sym(SymKind.STATE, "b")), F)


def test_declarations_in_any_order():
    f = checked("field f { solve midpoint(dt = 1, steps = n)\ndx/dt = k * A[i]\n"
                "state x\ninput A[n]\nparam k }")
    assert f.dims == ("n", "N") and f.grid == (Axis("i", "N"),)


@pytest.mark.parametrize("decls, grid, dims", [
    ("", (Axis("i", "N"),), ("N",)),
    ("input w[N]", (Axis("i", "N"),), ("N",)),
    ("param i", (Axis("i_", "N"),), ("N",)),
    ("param N", (Axis("i", "N_"),), ("N_",)),
    ("param N; input A[N_]", (Axis("i", "N__"),), ("N_", "N__")),
])
def test_implicit_grid(decls, grid, dims):
    f = checked("field f { " + decls + "\nstate x; dx/dt = 1; solve euler(dt = 1, steps = 1) }")
    assert f.grid == grid and f.dims == dims


def test_coupled_two_dimensional_index():
    f = checked("field f { grid i < M, j < M; basin a < 4, b < 4; state x\n"
                "coupled s = x edge wrap\ndx/dt = s[a + 1, b] - s\n"
                "solve euler(dt = 1, steps = 1) }")
    (at,) = _collect(f.derivs[0], CoupledAt)
    assert len(at.index) == 2 and at.span.line == 3


def test_reduction_or_function_by_argument_count():
    f = checked("field f { basin l < 8; state x; coupled s = x\n"
                "dx/dt = min(s) + min(s, x) + max(x, 1) + sum(s)\n"
                "solve euler(dt = 1, steps = 1) }")
    reds = _collect(f.derivs[0], Reduce)
    assert set(reds) == {Reduce(ReduceOp.MIN, "s"), Reduce(ReduceOp.SUM, "s")}
    ops = {a.op for a in _collect(f.derivs[0], Apply)}
    assert {Op.MIN, Op.MAX} <= ops


def test_spans_on_ir_nodes():
    f = checked("field f { input A[N]\nstate x\ndx/dt = 1 + A[\n  i]\n"
                "solve euler(dt = 1, steps = 1) }")
    (load,) = _collect(f.derivs[0], Load)
    assert (load.span.line, load.span.column, load.span.end_line) == (3, 13, 4)


def test_several_fields_and_select():
    c = compile_program(LORENZ + MATMUL)
    assert c.field_names == ("lorenz", "matmul")
    assert c.select("matmul").name == "matmul"
    with pytest.raises(UnknownNameError) as info:
        c.select()
    assert "`lorenz`" in str(info.value) and "`matmul`" in str(info.value)
    with pytest.raises(UnknownNameError) as info:
        c.select("nope")
    assert "`nope`" in str(info.value) and "`lorenz`" in str(info.value)
    assert compile_program(LORENZ).select().name == "lorenz"


def test_compiled_keeps_every_stage():
    c = compile_program(LORENZ, "lorenz.field")
    assert c.source == LORENZ and c.filename == "lorenz.field"
    assert c.tree.data == "start" and c.ast.fields[0].name.name == "lorenz"
    assert c.program.source == LORENZ and c.program.filename == "lorenz.field"
    assert c.program.fields[0].params[2].default == Const(8.0 / 3.0, F)


def _collect(expr, cls) -> list:
    found = [expr] if isinstance(expr, cls) else []
    for child in getattr(expr, "args", ()) + getattr(expr, "index", ()):
        found += _collect(child, cls)
    return found


def test_every_field_in_the_language_reference_compiles():
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "language.md").read_text()
    blocks = [b for b in re.findall(r"```\n(.*?)```", doc, re.S) if "field " in b and "solve " in b]
    assert len(blocks) >= 4
    for block in blocks:
        assert compile_program(block).program.fields


@pytest.mark.parametrize("text, same", [
    ("x ** 2", "x ^ 2"), ("2 ** -1", "2 ^ -1"), ("-x ** 2 ** 0.5", "-(x ^ (2 ^ 0.5))"),
    ("i ** 2", "float(i) ^ float(2)"),
])
def test_double_star_is_power(text, same):
    """`**` is `^`: the same op, precedence, associativity and float result."""
    assert let_ir("", text) == let_ir("", same)
    assert let_ir("", text).op is Op.POW or let_ir("", text).op is Op.NEG
