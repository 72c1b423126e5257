"""Symbolic differentiation over the IR: ``derivative(expr, wrt)`` is d(expr)/d(wrt).

``wrt`` is a FLOAT symbol (a state, or the time ``t``); the result is a FLOAT IR
expression in the same symbols, simplified as it is built (terms that are 0
are dropped, factors 1 too, constants folded by ``passes.fold``). Used by the
Milstein method (dG/dx of a noise's coefficient) and by any method that needs
a Jacobian. The walk is ``ir.walk.walk`` (children first, iterative, each
shared node once): expressions of any depth differentiate.

Rules (every op of ``ir.ops``):
- sums, products, quotients, powers and every float function by the usual
  rules; ``a ^ b`` is ``b * a^(b - 1) * a' + (a^b * log(a)) * b'`` (the second
  term only when ``b`` depends on ``wrt``);
- ``abs``, ``min``, ``max``, ``clamp`` and ``where`` piecewise: ``where(c, a,
  b)`` is ``where(c, a', b')``, ``abs(a)`` is ``sign(a) * a'``, ``min(a, b)``
  is ``where(a <= b, a', b')``, ``clamp(a, lo, hi)`` takes the derivative of
  the operand it returns (the derivative at a kink is the one of a side);
- conditions and indices are never differentiated; other int and bool values,
  inputs (``A[i]``), ``dt``, ``step``, params, dims and
  ``init(x)`` do not vary with a state: 0;
- ``floor``, ``ceil``, ``int``, ``sign``, ``//`` and float ``%`` of something
  that depends on ``wrt`` have no derivative worth the name (a step
  function): ``NotDifferentiable``, naming the op and where it is; the same
  for coupled values and basin reductions (they depend on other trajectories).

The simplification uses ``0 * e = 0`` and ``1 * e = e``: the derivative of a
NaN-valued subexpression may be 0 where numpy's value would be NaN.

**Strong zero** (docs/language.md, "Derivatives the compiler takes"): a product
that a rule builds, ``z * e``, in which ``e`` can be infinite at finite operands
(it holds a division, a power or a logarithm: ``sqrt``'s ``0.5 / sqrt(u)``,
``log``'s ``1 / u``, ``u^(b - 1)``), is emitted as ``where(z == 0, 0, z * e)``:
0 wherever the other factor is exactly 0, not ``0 * inf = NaN``. That covers
the chain rule's ``f'(u) * u'`` (``z = u'``), the product rule's ``a * b'``
and ``a' * b``, the quotient rule's ``a * b'``, ``atan2``'s, and the power
rule's ``a^b * log(a) * b'`` (``z = a^b``; ``a^b`` with ``b`` varying is
differentiated as ``b * a^(b - 1) * a' + (a^b * log(a)) * b'``). ``guard``
applies the same rule to a product a method forms (Milstein's ``G * G_x``).
A product whose ``z`` is a nonzero constant, or whose ``e`` cannot be
infinite, is the plain product (the generated code is unchanged there).
"""
from __future__ import annotations

import math

from ..errors import TypeError_
from .nodes import Apply, Const, CoupledAt, Expr, Load, Reduce, Sym
from .ops import Op, SymKind, Type
from .passes import fold
from .walk import children, walk

F = Type.FLOAT
ZERO = None        # the derivative 0 is None while building (dropped from sums)


class NotDifferentiable(TypeError_):
    """An expression whose derivative the compiler will not take (see the module doc)."""


def _c(v: float) -> Const:
    return Const(float(v), F)


def _is(e: Expr | None, v: float) -> bool:
    return isinstance(e, Const) and e.type is F and e.value == v


def add(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is ZERO:
        return b
    if b is ZERO:
        return a
    return Apply(Op.ADD, (a, b), F)


def sub(a: Expr | None, b: Expr | None) -> Expr | None:
    if b is ZERO:
        return a
    if a is ZERO:
        return neg(b)
    return Apply(Op.SUB, (a, b), F)


def neg(a: Expr | None) -> Expr | None:
    if a is ZERO:
        return ZERO
    if isinstance(a, Apply) and a.op is Op.NEG:
        return a.args[0]
    return Apply(Op.NEG, (a,), F)


def mul(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is ZERO or b is ZERO or _is(a, 0.0) or _is(b, 0.0):
        return ZERO
    if _is(a, 1.0):
        return b
    if _is(b, 1.0):
        return a
    if _is(a, -1.0):
        return neg(b)
    if _is(b, -1.0):
        return neg(a)
    return Apply(Op.MUL, (a, b), F)


def can_blow(e: Expr | None, memo: dict | None = None) -> bool:
    """Can ``e`` be infinite (or NaN) where its symbols are finite: does it divide, take
    a power or a logarithm? (``memo``: uid -> answer, shared over one derivative.)"""
    if e is ZERO:
        return False
    memo = {} if memo is None else memo
    for node in walk(e, skip=lambda n: n.uid in memo):
        memo[node.uid] = (isinstance(node, Apply) and node.op in _BLOW) or any(
            memo[k.uid] for k in children(node))
    return memo[e.uid]


_BLOW = frozenset({Op.DIV, Op.POW, Op.LOG, Op.LOG2})


def guard(z: Expr | None, e: Expr | None, product: Expr | None = None,
          memo: dict | None = None) -> Expr | None:
    """``product`` (``e`` unless given; a product of ``z`` and ``e``) where ``z`` is not
    0, else 0 (the strong zero of the module doc), as ``where(z == 0, 0, product)``;
    ``product`` itself when ``z`` is a nonzero constant or ``e`` cannot be infinite."""
    product = e if product is None else product
    if z is ZERO or _is(z, 0.0) or e is ZERO or product is ZERO:
        return ZERO
    if isinstance(z, Const) or not can_blow(e, memo):
        return product
    return Apply(Op.WHERE, (Apply(Op.EQ, (z, _c(0.0)), Type.BOOL), _c(0.0), product), F)


def div(a: Expr | None, b: Expr) -> Expr | None:
    if a is ZERO:
        return ZERO
    if _is(b, 1.0):
        return a
    return Apply(Op.DIV, (a, b), F)


def call(op: Op, *args: Expr) -> Expr:
    return Apply(op, tuple(args), F)


def _where(cond: Expr, a: Expr | None, b: Expr | None) -> Expr | None:
    if a is ZERO and b is ZERO:
        return ZERO
    return Apply(Op.WHERE, (cond, a if a is not ZERO else _c(0), b if b is not ZERO else _c(0)), F)


def derivative(expr: Expr, wrt: Sym, piecewise: bool = False) -> Expr:
    """d(expr)/d(wrt), simplified and folded; ``Const(0.0)`` when it does not depend on it.

    ``piecewise``: the derivative almost everywhere of the step functions (``floor``,
    ``ceil``, ``sign``, ``int``, ``//``: 0; float ``a % b``: ``a' - floor(a / b) * b'``)
    instead of NotDifferentiable, as a Jacobian needs (rodas4: ir/jacobian.py)."""
    if wrt.type is not F:
        raise ValueError(f"can only differentiate with respect to a float symbol, not {wrt}")
    memo: dict[int, Expr | None] = {}
    blow: dict[int, bool] = {}
    for node in walk(expr, kids=_needed):
        memo[node.uid] = _rule(node, [memo.get(k.uid) for k in children(node)], wrt,
                               piecewise, blow)
    result = memo.get(expr.uid)
    return _c(0.0) if result is ZERO else fold(result)


def _needed(node: Expr) -> tuple[Expr, ...]:
    """The operands whose derivative a node's rule reads (the walk visits only those):
    not a condition, an index, or an int or bool value, except ``float(int(e))``,
    whose ``int`` must see whether ``e`` varies."""
    if not isinstance(node, Apply):
        return ()
    if node.op is Op.TO_FLOAT:
        inner = node.args[0]
        return (inner,) if isinstance(inner, Apply) and inner.op is Op.TO_INT else ()
    if node.op is Op.TO_INT:
        return node.args if node.args[0].type is F else ()
    if node.type is not F:
        return ()
    if node.op is Op.WHERE:
        return node.args[1:]
    return node.args


def depends(expr: Expr, sym: Sym) -> bool:
    """Does ``expr`` read ``sym``?"""
    return any(n == sym for n in walk(expr) if isinstance(n, Sym))


def _rule(node: Expr, d: list, wrt: Sym, piecewise: bool = False,
          blow: dict | None = None) -> Expr | None:
    """The derivative of one node, its children's derivatives ``d`` already taken
    (``blow``: ``can_blow``'s memo)."""
    blow = {} if blow is None else blow

    def smul(z, e):                 # z * e, 0 where z is 0 (the strong zero)
        return guard(z, e, mul(z, e), blow)

    def emul(e, z):                 # e * z, 0 where z is 0 (the strong zero)
        return guard(z, e, mul(e, z), blow)

    if isinstance(node, Sym):
        if node == wrt:
            return _c(1.0)
        if node.kind is SymKind.COUPLED:
            raise NotDifferentiable(f"cannot differentiate coupled value `{node.name}` with "
                                    f"respect to `{wrt.name}`: it depends on the basin")
        return ZERO
    if isinstance(node, (Const, Load)):
        return ZERO
    if isinstance(node, (CoupledAt, Reduce)):
        raise NotDifferentiable(f"cannot differentiate coupled value `{node.name}` with "
                                f"respect to `{wrt.name}`: it depends on the basin",
                                span=getattr(node, "span", None))
    assert isinstance(node, Apply)
    op, args = node.op, node.args
    if op is Op.TO_INT and d[0] is not ZERO and not piecewise:
        raise NotDifferentiable(f"`int` of an expression that depends on `{wrt.name}` is a "
                                f"step function, with no derivative to take", span=node.span)
    if node.type is not F or op is Op.TO_FLOAT:
        return ZERO                 # int and bool values are piecewise constant
    a = args[0]
    da = d[0]
    if op is Op.ADD:
        return add(da, d[1])
    if op is Op.SUB:
        return sub(da, d[1])
    if op is Op.NEG:
        return neg(da)
    if op is Op.MUL:
        return add(emul(da, args[1]), smul(a, d[1]))
    if op is Op.DIV:
        b, db = args[1], d[1]
        return sub(div(da, b), div(smul(a, db), mul(b, b)))
    if op is Op.POW:
        return _pow(node, da, d[1], emul)
    if op is Op.WHERE:
        return _where(a, d[1], d[2])
    if op in _CHAIN:
        if da is ZERO:
            return ZERO
        return emul(_CHAIN[op](a, node), da)
    if op is Op.ATAN2:
        y, x = args
        den = add(mul(x, x), mul(y, y))
        return div(sub(smul(x, da), smul(y, d[1])), den)
    if op is Op.ABS:
        return mul(call(Op.SIGN, a), da)
    if op in (Op.MIN, Op.MAX):
        cmp = Op.LE if op is Op.MIN else Op.GE
        return _where(Apply(cmp, (a, args[1]), Type.BOOL), da, d[1])
    if op is Op.CLAMP:
        lo, hi = args[1], args[2]
        below = Apply(Op.LT, (a, lo), Type.BOOL)
        above = Apply(Op.GT, (call(Op.MAX, a, lo), hi), Type.BOOL)
        return _where(above, d[2], _where(below, d[1], da))
    if op in (Op.FLOOR, Op.CEIL, Op.SIGN, Op.FLOORDIV, Op.MOD):
        if all(x is ZERO for x in d):
            return ZERO
        if piecewise and op is Op.MOD:          # a - b * floor(a / b)
            return sub(da, mul(call(Op.FLOOR, call(Op.DIV, a, args[1])), d[1]))
        if piecewise:
            return ZERO
        raise NotDifferentiable(f"`{op.value}` of an expression that depends on `{wrt.name}` "
                                f"is a step function, with no derivative to take", span=node.span)
    raise AssertionError(f"no differentiation rule for {op}")


def _pow(node: Apply, da, db, emul) -> Expr | None:
    """``b * a^(b - 1) * a' + (a^b * log(a)) * b'``, each product a strong zero
    (``emul(e, z)``: 0 where ``z`` is 0)."""
    a, b = node.args
    by_a = ZERO
    if da is not ZERO:
        if isinstance(b, Const):
            e = b.value - 1.0
            power = _c(1.0) if e == 0 else (a if e == 1 else call(Op.POW, a, _c(e)))
        else:
            power = call(Op.POW, a, sub(b, _c(1.0)))
        by_a = emul(mul(b, power), da)
    if db is ZERO:
        return by_a
    return add(by_a, emul(emul(call(Op.LOG, a), node), db))


_LN2 = math.log(2.0)

# f(a) -> f'(a), given a and the node f(a) itself (exp' = exp reuses it)
_CHAIN = {
    Op.SIN: lambda a, n: call(Op.COS, a),
    Op.COS: lambda a, n: neg(call(Op.SIN, a)),
    Op.TAN: lambda a, n: add(_c(1.0), mul(n, n)),
    Op.ASIN: lambda a, n: div(_c(1.0), call(Op.SQRT, sub(_c(1.0), mul(a, a)))),
    Op.ACOS: lambda a, n: neg(div(_c(1.0), call(Op.SQRT, sub(_c(1.0), mul(a, a))))),
    Op.ATAN: lambda a, n: div(_c(1.0), add(_c(1.0), mul(a, a))),
    Op.SINH: lambda a, n: call(Op.COSH, a),
    Op.COSH: lambda a, n: call(Op.SINH, a),
    Op.TANH: lambda a, n: sub(_c(1.0), mul(n, n)),
    Op.EXP: lambda a, n: n,
    Op.LOG: lambda a, n: div(_c(1.0), a),
    Op.LOG2: lambda a, n: div(_c(1.0), mul(a, _c(_LN2))),
    Op.SQRT: lambda a, n: div(_c(0.5), n),
}
