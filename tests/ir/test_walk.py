"""ir/walk.py: the one IR walk (unique nodes, children first, iterative)."""
from __future__ import annotations

import vgpu_compiler.ir.walk as W
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.nodes import Apply, Const, CoupledAt, Load, Sym
from vgpu_compiler.ir.ops import Op, SymKind, Type

X = Sym(SymKind.STATE, "x", Type.FLOAT)
Y = Sym(SymKind.STATE, "y", Type.FLOAT)
I = Sym(SymKind.GRID, "i", Type.INT)


def add(a, b):
    return Apply(Op.ADD, (a, b), a.type)


def test_children_are_the_operands_in_order():
    load = Load("w", (I, Const(0, Type.INT)))
    assert W.children(add(X, Y)) == (X, Y)
    assert W.children(load) == load.index
    assert W.children(CoupledAt("s", (I,))) == (I,)
    assert W.children(X) == () and W.children(Const(1.0, Type.FLOAT)) == ()


def test_walk_is_post_order_left_to_right():
    s = add(X, Y)
    root = Apply(Op.MUL, (s, Apply(Op.NEG, (X,), Type.FLOAT)), Type.FLOAT)
    got = list(W.walk(root))
    assert [n for n in got] == [X, Y, s, root.args[1], root]


def test_walk_visits_a_shared_subtree_once_and_children_first():
    shared = add(X, Y)
    root = Apply(Op.MUL, (shared, shared), Type.FLOAT)
    other = Apply(Op.SIN, (shared,), Type.FLOAT)
    got = list(W.walk(root, None, other))
    assert [id(n) for n in got] == [id(X), id(Y), id(shared), id(root), id(other)]
    seen = set()
    for n in got:
        assert all(id(k) in seen for k in W.children(n))
        seen.add(id(n))


def test_skip_leaves_a_subtree_out():
    shared = add(X, Y)
    root = Apply(Op.SIN, (shared,), Type.FLOAT)
    got = list(W.walk(root, skip=lambda n: n is shared))
    assert got == [root]


def test_walk_is_iterative_on_deep_and_wide_trees():
    e = X
    for _ in range(20000):
        e = Apply(Op.NEG, (e,), Type.FLOAT)
    assert sum(1 for _ in W.walk(e)) == 20001
    wide = Apply(Op.ADD, (X, X), Type.FLOAT)
    for k in range(5000):
        wide = add(wide, Const(float(k), Type.FLOAT))
    assert sum(isinstance(n, Const) for n in W.walk(wide)) == 5000


def test_rebuild_makes_each_unique_node_once():
    shared = add(X, Y)
    root = Apply(Op.MUL, (shared, shared), Type.FLOAT)
    calls = []

    def swap(node, kids):
        calls.append(node)
        if node == X:
            return Y
        return Apply(node.op, kids, node.type) if isinstance(node, Apply) else node

    memo: dict = {}
    new = W.rebuild(root, swap, memo)
    assert new.args[0].args == (Y, Y)
    assert len(calls) == 4
    W.rebuild(shared, swap, memo)
    assert len(calls) == 4          # shared memo: nothing rebuilt twice


def test_field_roots_cover_every_expression():
    src = """field f {
        param k = 2.0
        input w[N]
        output H[4]
        grid i < N
        basin l < 2
        state x, y = 1.0
        coupled s = x
        dx/dt = -k * x + w[i] + sum(s)
        dy/dt = s[l]
        collapse when x > 5.0
        flux H[0] += y
        solve rk4(dt = 0.1, steps = 3)
    }"""
    field = compile_program(src).program.fields[0]
    roots = W.field_roots(field)
    want = [field.params[0].default, field.states[1].init, field.coupled[0].expr,
            *field.derivs, field.collapse, *field.flux[0].index, field.flux[0].value,
            field.solver.dt, field.solver.steps, field.solver.t0]
    assert [id(r) for r in roots] == [id(r) for r in want]


def test_walk_is_by_object_so_both_copies_of_a_read_are_visited():
    src = """field f {
        input w[N]
        grid i < N
        state x
        dx/dt = where(i > 0, w[i - 1], 0.0) + w[i - 1]
        solve euler(dt = 1, steps = 1)
    }"""
    field = compile_program(src).program.fields[0]
    reads = [n for n in W.walk(*field.derivs) if isinstance(n, Load)]
    assert len(reads) == 2 and reads[0] == reads[1]
    assert [r.span.column for r in reads] == sorted({r.span.column for r in reads})
    subs = [n for n in W.walk(*field.derivs) if isinstance(n, Apply) and n.op is Op.SUB]
    assert len(subs) == 1                       # i - 1: one node, visited once
