"""IR passes (ir/passes.py: constant folding) and the IR text (ir/dump.py)."""
from __future__ import annotations

import math

import pytest

from field_examples import COLLAPSE, HEAT, HISTOGRAM, KURAMOTO, LORENZ, MATMUL
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.dump import dump, dump_program
from vgpu_compiler.ir.nodes import Apply, Const, Load
from vgpu_compiler.ir.ops import Op, Type
from vgpu_compiler.ir.passes import fold, optimize

FIELD = ("field f {{\n  input A[4]\n  output H[4]\n  param p\n  state x\n  dx/dt = {value}\n"
         "  flux H[{index}] += 1\n  solve euler(dt = 1, steps = 1)\n}}")


def folded_float(text: str):
    (f,) = compile_program(FIELD.format(value=text, index=0)).checked.fields
    return fold(f.derivs[0])


def folded_int(text: str):
    (f,) = compile_program(FIELD.format(value=0, index=text)).checked.fields
    return fold(f.flux[0].index[0])


@pytest.mark.parametrize("text, value", [
    ("2 + 3 * 4", 14), ("2147483647 + 1", -2147483648), ("-2147483648 - 1", 2147483647),
    ("65536 * 65536", 0), ("-7 // 2", -4), ("-7 % 2", 1), ("7 % -2", -1),
    ("-2147483648 // -1", -2147483648), ("abs(-2147483648)", -2147483648),
    ("clamp(5, 0, 3)", 3), ("clamp(-5, 0, 3)", 0), ("sign(-2)", -1), ("min(3, -1)", -1),
    ("int(-2.5)", -3), ("int(2.9)", 2), ("where(1 < 2, 1, 2)", 1), ("-(-3)", 3),
])
def test_fold_int(text, value):
    assert folded_int(text) == Const(value, Type.INT)


@pytest.mark.parametrize("text, value", [
    ("8.0 / 3.0", 8.0 / 3.0), ("1 / 2", 0.5), ("2^-1", 0.5), ("(-2.0)^2", 4.0),
    ("2^3^2", 512.0), ("sqrt(4)", 2.0), ("-7.5 // 2", -4.0), ("-7.5 % 2", 0.5),
    ("float(3) + 0.5", 3.5), ("1 + 2.5", 3.5), ("max(1, 2.5)", 2.5), ("1.0 / 0.0", math.inf),
    ("exp(0.0)", 1.0), ("atan2(0.0, -1.0)", math.pi), ("floor(-0.5)", -1.0),
])
def test_fold_float(text, value):
    assert folded_float(text) == Const(value, Type.FLOAT)


@pytest.mark.parametrize("text", ["(-2.0)^0.5", "0.0 / 0.0", "min(0.0 / 0.0, 1.0)",
                                  "max(1.0, 0.0 / 0.0)", "sqrt(-1.0)", "log(-1.0)"])
def test_fold_keeps_numpy_nan(text):
    node = folded_float(text)
    assert isinstance(node, Const) and math.isnan(node.value)


@pytest.mark.parametrize("text, op", [("7 // 0", Op.FLOORDIV), ("7 % 0", Op.MOD),
                                      ("int(1e10)", Op.TO_INT), ("int(0.0 / 0.0)", Op.TO_INT)])
def test_fold_leaves_run_time_errors_and_undefined_conversions(text, op):
    node = folded_int(text)
    assert isinstance(node, Apply) and node.op is op
    assert all(isinstance(a, Const) for a in node.args)


def test_fold_uses_no_algebraic_identities():
    node = folded_float("x * 0 + (x - x)")
    assert node.op is Op.ADD and not isinstance(node.args[0], Const)
    assert folded_float("x + (1 + 2)").args[1] == Const(3.0, Type.FLOAT)


def test_fold_drops_branches_that_are_never_taken():
    assert folded_float("where(1 < 2, x, A[99])").__class__.__name__ == "Sym"
    assert isinstance(folded_float("where(1 > 2, x, A[99])"), Load)
    assert folded_int("where(1 > 2 and A[9] > 0, 1, 2)") == Const(2, Type.INT)
    assert folded_int("where(1 < 2 or A[9] > 0, 1, 2)") == Const(1, Type.INT)
    node = folded_int("where(1 < 2 and x > 0, 1, 2)")
    assert node.args[0] == Apply(Op.GT, (node.args[0].args[0], Const(0.0, Type.FLOAT)),
                                 Type.BOOL)


def test_optimize_folds_every_part_of_a_field():
    (f,) = compile_program(COLLAPSE).checked.fields
    g = optimize(f)
    assert g.solver.t0 == Const(0.0, Type.FLOAT)
    (m,) = compile_program(MATMUL).program.fields
    assert m.states[0].init == Const(0.0, Type.FLOAT) and m.solver.dt == Const(1.0, Type.FLOAT)
    (h,) = compile_program(HISTOGRAM).program.fields
    assert h.flux[0].value == Const(1.0, Type.FLOAT)
    assert optimize(g) == g


# --- dump -------------------------------------------------------------------------------
LORENZ_DUMP = """\
field lorenz
  grid: i < N
  basin: none (the backend picks)
  dims: N
  params:
    sigma = 10.0
    rho = 28.0
    beta = 2.6666666666666665
  inputs:
  outputs:
  states:
    x from h0[..., 0]
    y from h0[..., 1]
    z from h0[..., 2]
  coupled:
  derivatives:
    dx/dt = (sigma * (y - x))
    dy/dt = ((x * (rho - z)) - y)
    dz/dt = ((x * y) - (beta * z))
  collapse: none
  flux:
  solve:
    method rk4
    dt = 0.01
    steps = 1000
    t0 = 0.0
    tableau rk4: c = [0, 1/2, 1/2, 1], b = [1/6, 1/3, 1/3, 1/6], \
a = [[], [1/2], [0, 1/2], [0, 0, 1]]
"""


def test_dump_lorenz_exactly():
    assert dump(compile_program(LORENZ).select()) == LORENZ_DUMP


def test_dump_is_deterministic_and_ignores_layout():
    for src in (LORENZ, MATMUL, KURAMOTO, HISTOGRAM, HEAT, COLLAPSE):
        a = dump(compile_program(src).select())
        b = dump(compile_program(src).select())
        assert a == b
    spaced = LORENZ.replace("\n", "  # note\n\n").replace("*", " * ")
    assert dump(compile_program(spaced).select()) == LORENZ_DUMP
    changed = LORENZ.replace("28.0", "28.5")
    assert dump(compile_program(changed).select()) != LORENZ_DUMP


def test_dump_shows_shared_subexpressions_once():
    text = dump(compile_program(KURAMOTO).select())
    assert text.count("sin(theta)") == 1 and text.count("cos(theta)") == 1
    assert "    %0 = sin(theta)\n    s (edge clamp) = %0\n" in text
    assert "(mean(s) * %1)" in text and "(mean(c) * %0)" in text


def test_dump_is_complete():
    text = dump(compile_program(COLLAPSE).select())
    for part in ["grid: i < M, j < P", "basin: a < 8, b < 8", "dims: M, P",
                 "x = (float(i) / float(M))", "e (edge wrap) = abs((x - y))",
                 "f (edge clamp) = x", "e[(a + 1), b]", "max(f)", "init(x)",
                 "collapse when ((abs(x) < 0.001) and ((t > 1.0) or (step >= 10)))",
                 "method heun", "tableau heun: c = [0, 1], b = [1/2, 1/2], a = [[], [1]]"]:
        assert part in text, part
    text = dump(compile_program(HISTOGRAM).select())
    assert "counts[32]" in text and "counts[clamp(int((x * 16.0)), 0, 31)] += 1.0" in text
    text = dump(compile_program(
        "field f { param p; input A[M, 3]; state x; dx/dt = A[0, 1] * p\n"
        "solve midpoint(dt = 1, steps = 2 * M, t0 = p) }").select())
    assert "p (no default)" in text and "A[M, 3]" in text and "steps = (2 * M)" in text
    assert "t0 = p" in text and "dims: M, N" in text


def test_dump_distinguishes_ints_floats_and_bools():
    a = dump(compile_program(FIELD.format(value="x", index="where(p > 0, 1, 2)")).select())
    b = dump(compile_program(FIELD.format(value="x", index="where(p > 0.5, 1, 2)")).select())
    assert "(p > 0.0)" in a and "(p > 0.5)" in b


def test_dump_program_joins_fields():
    text = dump_program(compile_program(LORENZ + MATMUL).program)
    assert text.index("field lorenz") < text.index("field matmul")


def test_negative_zero_is_not_folded_into_a_constant_equal_to_zero():
    node = folded_float("1.0 / -0.0")
    assert isinstance(node, Apply) and node.op is Op.DIV
    assert node.args[1] == Apply(Op.NEG, (Const(0.0, Type.FLOAT),), Type.FLOAT)


def test_deeply_shared_lets_stay_linear():
    """a_{k+1} = a_k * a_k + 1: the inlined tree doubles per let, the DAG does not."""
    import time

    lets = "\n".join(f"let a{k + 1} = a{k} * a{k} + 1" for k in range(40))
    src = f"field f {{ state x\nlet a0 = x\n{lets}\ndx/dt = a40\nsolve euler(dt=1, steps=1) }}"
    start = time.perf_counter()
    text = dump(compile_program(src).select())
    assert time.perf_counter() - start < 5.0
    assert "    %0 = ((x * x) + 1.0)\n    %1 = ((%0 * %0) + 1.0)\n" in text
    assert "dx/dt = ((%38 * %38) + 1.0)" in text


def test_doubling_let_chain_runs_in_linear_time_on_both_backends():
    """Each let uses the previous one twice: inlined, the tree has 2^40 paths but 40 nodes.
    Hashing or evaluating it as a tree would never finish; as a DAG it is instant."""
    import numpy as np
    import vgpu

    lets = ["let a0 = x"] + [f"let a{k} = 0.5 * a{k - 1} + 0.5 * a{k - 1}" for k in range(1, 41)]
    src = "field deep {\n state x\n " + "\n ".join(lets) + "\n dx/dt = -a40\n solve euler(dt = 0.5, steps = 2)\n}"
    for backend in ("numpy", "glsl"):
        out = vgpu.run_field(src, np.ones(4), backend=backend)
        np.testing.assert_allclose(out, 0.25, rtol=1e-6)


# --- interned nodes (ir/nodes.py) ------------------------------------------------------
INTERN = ("field f {{\n  input w[N]\n  grid i < N\n  param p\n  state x, y\n"
          "  dx/dt = {dx}\n  dy/dt = {dy}\n  solve euler(dt = 1, steps = 1)\n}}")


def _field(dx, dy="0.0"):
    return compile_program(INTERN.format(dx=dx, dy=dy)).program.fields[0]


def test_equal_subexpressions_are_one_object():
    f = _field("sin(x * p) + cos(x * p)", "sin(x * p) * 2.0")
    left, right = f.derivs[0].args
    assert left.args[0] is right.args[0]                 # x * p
    assert f.derivs[1].args[0] is left                   # sin(x * p) on another line
    assert f.derivs[1].args[0].span.line == 6            # keeps its first copy's span


def test_folded_constants_join_the_nodes_they_equal():
    f = _field("x + (1.0 + 2.0)", "x + 3.0")
    assert f.derivs[0] is f.derivs[1]


@pytest.mark.parametrize("op", ["//", "%"])
def test_nodes_that_can_raise_are_one_per_place_in_the_text(op):
    f = _field(f"w[i - 1] + w[i - 1] + float(i {op} 3 + i {op} 3)")
    total, conv = f.derivs[0].args
    a, b = total.args
    assert a == b and a is not b                         # equal, but two reads
    assert a.span.column < b.span.column
    assert a.index[0] is b.index[0]                      # i - 1 cannot raise: one node
    c, d = conv.args[0].args
    assert c == d and c is not d and c.span.column < d.span.column


def test_float_division_is_shared_and_nothing_is_shared_across_texts():
    f = _field("x / p + x / p")
    assert f.derivs[0].args[0] is f.derivs[0].args[1]
    g = _field("x / p + x / p")
    assert g.derivs[0] == f.derivs[0] and g.derivs[0] is not f.derivs[0]


def test_interning_is_scoped_and_every_node_has_a_uid():
    from vgpu_compiler.ir.nodes import Sym, interning
    from vgpu_compiler.ir.ops import SymKind
    made = [Sym(SymKind.STATE, "x", Type.FLOAT) for _ in range(2)]
    assert made[0] == made[1] and made[0] is not made[1]
    assert made[0].uid != made[1].uid
    with interning():
        a = Sym(SymKind.STATE, "x", Type.FLOAT)
        with interning():                                # a nested scope joins
            assert Sym(SymKind.STATE, "x", Type.FLOAT) is a
        add = Apply(Op.ADD, (a, a), Type.FLOAT)
        assert Apply(Op.ADD, (a, a), Type.FLOAT) is add
    assert Sym(SymKind.STATE, "x", Type.FLOAT) is not a


def test_copies_are_interned_through_the_constructor():
    import copy
    import pickle
    from vgpu_compiler.ir.nodes import interning
    f = _field("sin(w[i]) + 1.0")
    with interning():
        again = pickle.loads(pickle.dumps(f.derivs[0]))
        assert copy.deepcopy(again) is again
    assert again == f.derivs[0] and again.args[0].args[0].span == f.derivs[0].args[0].args[0].span
    assert again.uid != f.derivs[0].uid
