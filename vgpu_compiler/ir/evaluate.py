"""Mask-aware evaluation of IR expressions over numpy arrays.

This module is the meaning of every op, in one table. It knows nothing about
basins or layouts: symbols, coupled reads and reductions come from callbacks,
so the reference backend and ``call.bind`` (param defaults, ``dt``,
``steps``, ``t0``) share it.

Evaluation is split in two, so a value is computed once however many times a
node is used (equal nodes are one slot: CSE for free):
- ``Frame.value(slot)`` computes a node on every lane. Reads clamp their
  indices and integer division by zero divides by 1, so a value never fails;
  where such a lane's value is wrong, the lane is one that ``check`` rejects.
- ``Frame.check(slot, mask)`` raises the run-time errors (index out of range,
  int ``//`` or ``%`` by zero) for the lanes where the node *is* evaluated:
  ``where(c, a, b)`` checks ``a`` under ``mask & c`` and ``b`` under
  ``mask & ~c``; ``and`` / ``or`` check their right side only where needed.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Callable

import numpy as np

from ..errors import ProgramIndexError, ZeroDivision
from .nodes import Apply, Const, CoupledAt, Expr, Load, Reduce, Sym
from .ops import Op, Type
from .walk import children, walk

INT = np.dtype(np.int32)
BOOL = np.dtype(bool)
INT_MIN = np.iinfo(np.int32).min
INT_MAX = np.iinfo(np.int32).max


def _to_int(x):
    """``int(x)``: floor to int32. NaN, inf and values outside int32 give INT_MIN
    (what x86 and GPU conversions give; the language leaves them unspecified)."""
    if np.asarray(x).dtype.kind in "iu":
        return np.asarray(x, INT)
    f = np.floor(x)
    wide = np.asarray(f, np.float64)            # compare exactly, even for float32
    ok = np.isfinite(wide) & (wide >= INT_MIN) & (wide <= INT_MAX)
    return np.where(ok, np.where(ok, f, 0).astype(INT), INT_MIN).astype(INT)


def _safe(b):
    return np.where(b == 0, np.ones((), np.asarray(b).dtype), b)


def _clamp(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _power(a, b):
    """numpy's power; ``x ^ 0.5`` is ``sqrt(x)`` for every exponent array too, as numpy's
    power is for a scalar 0.5 (its C pow would give inf for (-inf)^0.5, +0 for (-0)^0.5)."""
    r = np.power(a, b)
    half = np.asarray(b) == 0.5
    return np.where(half, np.sqrt(a), r).astype(r.dtype, copy=False) if half.any() else r


# op -> numpy function over the operand values (every operand already evaluated)
FUNCS: dict[Op, Callable] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide,
    Op.POW: _power, Op.NEG: np.negative,
    Op.LT: np.less, Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal,
    Op.EQ: np.equal, Op.NE: np.not_equal,
    Op.AND: np.logical_and, Op.OR: np.logical_or, Op.NOT: np.logical_not,
    Op.WHERE: np.where,
    Op.SIN: np.sin, Op.COS: np.cos, Op.TAN: np.tan, Op.ASIN: np.arcsin, Op.ACOS: np.arccos,
    Op.ATAN: np.arctan, Op.ATAN2: np.arctan2, Op.SINH: np.sinh, Op.COSH: np.cosh,
    Op.TANH: np.tanh, Op.EXP: np.exp, Op.LOG: np.log, Op.LOG2: np.log2, Op.SQRT: np.sqrt,
    Op.FLOOR: np.floor, Op.CEIL: np.ceil,
    Op.ABS: np.abs, Op.MIN: np.minimum, Op.MAX: np.maximum, Op.CLAMP: _clamp,
    Op.SIGN: np.sign, Op.TO_INT: _to_int,
}
# int // and % divide by 1 where the divisor is 0 (check() reports those lanes)
INT_FUNCS: dict[Op, Callable] = {
    Op.FLOORDIV: lambda a, b: np.floor_divide(a, _safe(b)),
    Op.MOD: lambda a, b: np.mod(a, _safe(b)),
}
FLOAT_FUNCS: dict[Op, Callable] = {Op.FLOORDIV: np.floor_divide, Op.MOD: np.mod}


def _traps_here(node: Expr) -> bool:
    return isinstance(node, Load) or (isinstance(node, Apply) and node.traps)


# Symbol kinds whose value changes during a run (everything else is fixed per call):
# ``dt`` too, since an adaptive method's step (and a fixed-step run's partial step)
# changes it between stages.
VARYING = frozenset({"state", "t", "dt", "step", "init", "coupled"})


class Plan:
    """The unique nodes of some expressions, numbered children first.

    One slot per node object (``uid``): the IR is interned, so equal subtrees
    are one node and share a slot, while a node that can raise is one node per
    place in the text (``where(i > 0, w[i - 1], 0) + w[i - 1]`` reads ``w`` at
    two), each checked on the lanes where *it* is evaluated: an error names the
    read that failed, not an equal one a guard kept in range. No method
    recurses: expressions of any depth are fine.
    """

    def __init__(self) -> None:
        self.by_uid: dict[int, int] = {}
        self.nodes: list[Expr] = []
        self.kids: list[tuple[int, ...]] = []
        self.traps: list[bool] = []       # the subtree can raise a run-time error
        self.varies: list[bool] = []      # the value can change from one stage to the next

    def add(self, root: Expr) -> int:
        for node in walk(root, skip=lambda n: n.uid in self.by_uid):
            kids = tuple(self.by_uid[c.uid] for c in children(node))
            self.by_uid[node.uid] = self._new(node, kids)
        return self.by_uid[root.uid]

    def _new(self, node: Expr, kids: tuple[int, ...]) -> int:
        self.nodes.append(node)
        self.kids.append(kids)
        self.traps.append(_traps_here(node) or any(self.traps[k] for k in kids))
        own = isinstance(node, (CoupledAt, Reduce)) or (
            isinstance(node, Sym) and node.kind.value in VARYING)
        self.varies.append(own or any(self.varies[k] for k in kids))
        return len(self.nodes) - 1

    def schedule(self, roots: list[int], dtype) -> "Schedule":
        return Schedule(self, roots, np.dtype(dtype))


class Schedule:
    """What it takes to evaluate some roots of a plan again and again: a straight line.

    ``fixed`` are the non-varying nodes the roots read (computed once per run,
    kept in ``Frame.fixed``), ``symbols`` the varying symbols, ``steps`` the
    other varying nodes, children first (slot order), each with the function
    computing it from its operands. ``Frame.run`` executes it with one call
    per step, and checks run-time errors only if a node on the way can raise.
    A step is (slot, function or None, operands getter, is the function a
    ufunc: then it can write its result into an array given for it).
    """

    def __init__(self, plan: Plan, roots: list[int], dtype: np.dtype):
        self.roots = list(roots)
        need, stack = set(), list(roots)
        while stack:
            s = stack.pop()
            if s not in need:
                need.add(s)
                if plan.varies[s]:
                    stack.extend(plan.kids[s])
        varying = [s for s in sorted(need) if plan.varies[s]]
        self.fixed = sorted(s for s in need if not plan.varies[s])
        self.symbols = [(s, plan.nodes[s], _dtype(plan.nodes[s].type, dtype))
                        for s in varying if isinstance(plan.nodes[s], Sym)]
        self.steps = []
        for s in varying:
            if not isinstance(plan.nodes[s], Sym):
                fn = _direct(plan, s, dtype)
                self.steps.append((s, fn, _getter(plan.kids[s]), isinstance(fn, np.ufunc)))
        self.traps = any(plan.traps[s] for s in roots)


def _direct(plan: Plan, slot: int, dtype: np.dtype):
    """The function computing an op node from its operand values, as ``Frame._compute``
    does; None for reads (``Frame._compute`` does those, with the context).

    Every value has its type's dtype (symbols are coerced, inputs converted by
    bind), and numpy's result dtype depends on the operand dtypes only, so an op
    that gives ``want`` on zeros of those dtypes needs no ``astype``.
    """
    node = plan.nodes[slot]
    if not isinstance(node, Apply):
        return None
    if node.op is Op.TO_FLOAT:
        return lambda v: np.asarray(v).astype(dtype)
    table = INT_FUNCS if node.type is Type.INT else FLOAT_FUNCS
    fn = table.get(node.op) or FUNCS[node.op]
    want = _dtype(node.type, dtype)
    with np.errstate(all="ignore"):
        zeros = [np.zeros((), _dtype(plan.nodes[k].type, dtype)) for k in plan.kids[slot]]
        if np.asarray(fn(*zeros)).dtype == want:
            return fn

    def apply(*args):
        v = fn(*args)
        return v if v.dtype == want else np.asarray(v).astype(want)
    return apply


def _getter(kids: tuple[int, ...]) -> Callable:
    """values -> the tuple of the operands' values (``itemgetter``: no Python loop)."""
    if len(kids) >= 2:
        return itemgetter(*kids)
    return lambda values: tuple(values[k] for k in kids)


def _dtype(typ: Type, dtype: np.dtype) -> np.dtype:
    return dtype if typ is Type.FLOAT else INT if typ is Type.INT else BOOL


class Context:
    """What a frame reads from outside the expression (provided by the caller)."""

    def symbol(self, node: Sym):
        raise NotImplementedError

    def array(self, name: str) -> np.ndarray:
        raise NotImplementedError(f"no input {name} here")

    def coupled_at(self, node: CoupledAt, index: list):
        raise NotImplementedError("coupled reads need a basin")

    def reduce(self, node: Reduce):
        raise NotImplementedError("reductions need a basin")


class Frame:
    """One evaluation of a plan: memoised values and the masks already checked."""

    def __init__(self, plan: Plan, ctx: Context, dtype, fixed: dict | None = None):
        self.plan = plan
        self.ctx = ctx
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.values: list = [None] * len(plan.nodes)
        self.checked: dict[int, np.ndarray] = {}
        self.fixed = fixed          # values of non-varying slots, shared across frames

    def eval(self, node: Expr, mask) -> np.ndarray:
        """The value of ``node``, having raised any error on a lane of ``mask``."""
        slot = self.plan.add(node)
        self._grow()
        value = self.value(slot)
        self.check(slot, mask)
        return value

    def run(self, schedule: Schedule, mask, into: dict | None = None) -> list:
        """The values of the schedule's roots, having raised any error on a lane of ``mask``.

        ``into`` (slot -> array of the node's shape and dtype) says where ufunc
        nodes write their values instead of new arrays: the same results, since
        numpy's do not depend on where they are written (fresh arrays land at
        any alignment too)."""
        self._grow()
        values, fixed, ctx = self.values, self.fixed or {}, self.ctx
        for s in schedule.fixed:
            values[s] = fixed[s] if s in fixed else self.value(s)
        for s, node, want in schedule.symbols:
            v = ctx.symbol(node)
            values[s] = v if getattr(v, "dtype", None) == want else self._coerce(v, node.type)
        into = into or {}
        for s, fn, operands, ufunc in schedule.steps:
            args = operands(values)
            if fn is None:
                values[s] = self._compute(self.plan.nodes[s], list(args))
            elif ufunc and s in into:
                values[s] = fn(*args, out=into[s])
            else:
                values[s] = fn(*args)
        if schedule.traps:
            for s in schedule.roots:
                self.check(s, mask)
        return [values[s] for s in schedule.roots]

    def _grow(self) -> None:
        """Room for the nodes added to the plan since this frame was made."""
        if len(self.values) < len(self.plan.nodes):
            self.values.extend([None] * (len(self.plan.nodes) - len(self.values)))

    # --- values -------------------------------------------------------------
    def value(self, slot: int):
        stack = [slot]
        while stack:
            s = stack[-1]
            if self.values[s] is not None:
                stack.pop()
                continue
            keep = self.fixed is not None and not self.plan.varies[s]
            if keep and s in self.fixed:
                self.values[s] = self.fixed[s]
                continue
            missing = [k for k in self.plan.kids[s] if self.values[k] is None]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            v = self._compute(self.plan.nodes[s], [self.values[k] for k in self.plan.kids[s]])
            self.values[s] = v
            if keep:
                self.fixed[s] = v
        return self.values[slot]

    def _compute(self, node: Expr, args: list):
        if isinstance(node, Sym):
            return self._coerce(self.ctx.symbol(node), node.type)
        if isinstance(node, Const):
            return self._const(node)
        if isinstance(node, Load):
            a = self.ctx.array(node.array)
            idx = tuple(np.clip(i, 0, max(n - 1, 0)) for i, n in zip(args, a.shape))
            return a[idx] if a.size else np.zeros(np.broadcast(*idx).shape, self.dtype)
        if isinstance(node, CoupledAt):
            return self.ctx.coupled_at(node, args)
        if isinstance(node, Reduce):
            return self.ctx.reduce(node)
        table = INT_FUNCS if node.type is Type.INT else FLOAT_FUNCS
        fn = table.get(node.op) or FUNCS.get(node.op)
        if node.op is Op.TO_FLOAT:
            return np.asarray(args[0]).astype(self.dtype)
        return self._coerce(fn(*args), node.type)

    def _const(self, node: Const):
        if node.type is Type.FLOAT:
            return self.dtype.type(node.value)
        if node.type is Type.INT:
            return INT.type(node.value)
        return np.bool_(node.value)

    def _coerce(self, v, typ: Type):
        want = _dtype(typ, self.dtype)
        if np.asarray(v).dtype != want:
            return np.asarray(v).astype(want)
        return v

    # --- run-time errors ----------------------------------------------------
    def check(self, slot: int, mask) -> None:
        """Raise the first run-time error on a lane of ``mask`` (children before parents)."""
        stack = [(slot, mask, False)]
        while stack:
            s, m, own = stack.pop()
            if own:
                self._check_own(s, m)
                continue
            if not self.plan.traps[s]:
                continue
            done = self.checked.get(s)
            new = m if done is None else m & ~done
            if not np.any(new):
                continue
            self.checked[s] = new if done is None else done | new
            stack.append((s, new, True))
            stack.extend(self._kid_masks(s, new))

    def _kid_masks(self, slot: int, mask) -> list:
        """(child, the lanes where it is evaluated, False) for each child."""
        node, kids = self.plan.nodes[slot], self.plan.kids[slot]
        if not (isinstance(node, Apply) and node.op in (Op.WHERE, Op.AND, Op.OR)):
            return [(k, mask, False) for k in kids]
        first = self.value(kids[0])
        if node.op is Op.WHERE:
            rest = [(kids[1], mask & first, False), (kids[2], mask & ~first, False)]
        else:
            rest = [(kids[1], mask & (first if node.op is Op.AND else ~first), False)]
        return rest + [(kids[0], mask, False)]

    def _check_own(self, slot: int, mask) -> None:
        node, kids = self.plan.nodes[slot], self.plan.kids[slot]
        if isinstance(node, Load):
            self._check_load(node, [self.value(k) for k in kids], mask)
        elif _traps_here(node):
            self._check_div(node, self.value(kids[1]), mask)

    def _check_load(self, node: Load, index: list, mask) -> None:
        shape = self.ctx.array(node.array).shape
        check_index(node.array, "input", shape, index, mask, node.span)

    def _check_div(self, node: Apply, divisor, mask) -> None:
        bad = np.broadcast_to(np.asarray(divisor) == 0, np.shape(mask)) & mask
        if np.any(bad):
            line = f" (line {node.span.line})" if node.span else ""
            raise ZeroDivision(f"integer {node.op.value} by zero{line}", span=node.span)


def check_index(name: str, what: str, shape, index: list, mask, span) -> None:
    """Raise ProgramIndexError for the first lane of ``mask`` whose index is outside ``shape``."""
    mshape = np.shape(mask)
    bad = np.zeros(mshape, bool)
    for i, n in zip(index, shape):
        i = np.broadcast_to(i, mshape)
        bad |= (i < 0) | (i >= n)
    bad &= mask
    if not np.any(bad):
        return
    at = tuple(np.argwhere(bad)[0]) if mshape else ()
    value = ", ".join(str(int(np.broadcast_to(i, mshape)[at])) for i in index)
    line = f" (line {span.line})" if span else ""
    raise ProgramIndexError(
        f"index out of range: {name}[{value}] but {what} {name} has shape {tuple(shape)}{line}",
        span=span)


def evaluate(node: Expr, ctx: Context, dtype, mask=True):
    """Evaluate one expression once (no plan kept): for bind's constant expressions."""
    with np.errstate(all="ignore"):
        return Frame(Plan(), ctx, dtype).eval(node, np.asarray(mask))
