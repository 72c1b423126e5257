"""IR -> IR passes. Constant folding; CSE is structural.

Common subexpressions need no pass: IR nodes are interned where they are made
(``ir.nodes``), so equal subtrees are one node and backends memoise by its uid.

Folding follows numpy exactly (ints are int32 and wrap; floats are folded in
float64, then rounded to the working dtype by the backend, as a literal is).
It never folds an int ``//`` or ``%`` by zero (that is a run-time error, raised
where the node is evaluated), never folds ``int(x)`` of a non-finite or
out-of-range x, and uses no algebraic identity (``x * 0`` is not 0 when x is
NaN); only operations whose operands are all constants are evaluated, plus
``where``/``and``/``or`` with a constant condition, which only drop a branch
that would never be evaluated. A result of -0.0 is left unfolded, since
equal-comparing nodes ``Const(-0.0) == Const(0.0)`` would be merged.

The walk is ``ir.walk.rebuild`` (children first, iterative, memoised by node
uid), so expressions of any depth fold; new nodes are interned (``optimize``
opens the table, or joins the frontend's) and hashed as they are made.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .evaluate import FUNCS
from .nodes import Apply, Const, CoupledAt, Expr, Field, Load, interning
from .ops import Op, Type
from .walk import rebuild

# numpy's meaning of every op, as the reference evaluates it (ir/evaluate.py); folding
# never divides an int by zero, so // and % are numpy's own here
_NP = {**FUNCS, Op.FLOORDIV: np.floor_divide, Op.MOD: np.mod}
_DTYPE = {Type.INT: np.int32, Type.FLOAT: np.float64, Type.BOOL: np.bool_}
_PY = {Type.INT: int, Type.FLOAT: float, Type.BOOL: bool}


def fold(expr: Expr, _memo: dict | None = None) -> Expr:
    """Fold the constant parts of an expression (see the module docstring).

    Shared subtrees (a let used twice is one object) are folded once."""
    return rebuild(expr, _fold_node, {} if _memo is None else _memo)


def _fold_node(expr: Expr, folded: tuple[Expr, ...]) -> Expr:
    """One node, its children already folded into ``folded``."""
    if isinstance(expr, (Load, CoupledAt)):
        return replace(expr, index=folded)
    if not isinstance(expr, Apply):
        return expr
    args = folded
    node = replace(expr, args=args)
    if expr.op in (Op.WHERE, Op.AND, Op.OR):
        return _fold_conditional(node)
    if all(isinstance(a, Const) for a in args):
        value = _evaluate(node)
        if value is not None and not _negative_zero(value):
            return Const(value, node.type)
    return node


def _negative_zero(value) -> bool:
    """-0.0 is never folded: Const(-0.0) == Const(0.0) would merge the two by CSE."""
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


def _fold_conditional(node: Apply) -> Expr:
    first = node.args[0]
    if not isinstance(first, Const):
        return node
    if node.op is Op.WHERE:
        return node.args[1] if first.value else node.args[2]
    if node.op is Op.AND:
        return node.args[1] if first.value else Const(False, Type.BOOL)
    return Const(True, Type.BOOL) if first.value else node.args[1]   # OR


def _evaluate(node: Apply):
    """The value of an op on constants, or None when it must not be folded."""
    op, values = node.op, [a.value for a in node.args]
    arg_types = [a.type for a in node.args]
    if op in (Op.FLOORDIV, Op.MOD) and arg_types[0] is Type.INT and values[1] == 0:
        return None
    if op is Op.TO_INT:
        x = values[0]
        if not math.isfinite(x) or not -(2**31) <= math.floor(x) < 2**31:
            return None
        return int(math.floor(x))
    if op is Op.TO_FLOAT:
        return float(values[0])
    if op is Op.NOT:
        return not values[0]
    arrays = [np.array(v, dtype=_DTYPE[t]) for v, t in zip(values, arg_types)]
    with np.errstate(all="ignore"):
        result = _NP[op](*arrays)
    return _PY[node.type](result.astype(_DTYPE[node.type]))


def fold_field(field: Field) -> Field:
    """Fold every expression of a field (one memo: shared subtrees are folded once)."""
    memo: dict = {}

    def f(expr: Expr | None) -> Expr | None:
        return None if expr is None else fold(expr, memo)

    solver = field.solver
    return replace(
        field,
        states=tuple(replace(s, init=f(s.init)) for s in field.states),
        derivs=tuple(f(d) for d in field.derivs),
        params=tuple(replace(p, default=f(p.default)) for p in field.params),
        coupled=tuple(replace(c, expr=f(c.expr)) for c in field.coupled),
        collapse=f(field.collapse),
        flux=tuple(replace(x, index=tuple(f(e) for e in x.index), value=f(x.value))
                   for x in field.flux),
        solver=replace(solver, dt=f(solver.dt), steps=f(solver.steps), t0=f(solver.t0),
                       adaptive=None if solver.adaptive is None else replace(
                           solver.adaptive, **{n: f(getattr(solver.adaptive, n))
                                               for n in solver.adaptive.NAMES})),
        noises=tuple(replace(n, diffusion=tuple(f(g) for g in n.diffusion),
                             slope=tuple(f(g) for g in n.slope)) for n in field.noises),
        events=tuple(replace(e, cond=f(e.cond), assigns=tuple((k, f(v)) for k, v in e.assigns),
                             flux=tuple(replace(x, index=tuple(f(i) for i in x.index),
                                                value=f(x.value)) for x in e.flux))
                     for e in field.events),
        observers=tuple(replace(o, expr=f(o.expr)) for o in field.observers),
    )


def optimize(field: Field) -> Field:
    """Every IR -> IR pass, in order. Today: constant folding (new nodes interned)."""
    with interning():
        return fold_field(field)


