"""Printing IR expressions with a dialect (dialect.py): every spelling comes from it.

The printer is data-driven (tinygrad's renderer style): it knows the IR's rules
(where a float zero must not be a literal, which powers are integer powers, what
may be hoisted) and asks its ``Dialect`` for every word. Which helpers a kernel
needs is collected while printing, and pure shared subtrees are hoisted into
temporaries by ``Printer.hoist``.

An input read whose indices ``ir.ranges`` proves in range for every call is a
plain buffer read; one proven only when the call's ``steps`` is small enough
is a plain read in the *fast* printing (``Printer.fast``), which the kernel
runs only under that run-time condition (``Printer.guards``); every other
read goes through its checked loader ``ld_A(..., id)``.

Nothing here recurses over an expression: printing goes children first on an
explicit stack, and hoisting numbers nodes by value (equal subtrees, one
number) without hashing or comparing deep trees. An expression nested deeper
than ``MAX_NEST`` is cut into temporaries where that is safe (a pure subtree,
or one every lane evaluates anyway); one that cannot be cut and is nested
deeper than ``MAX_DEPTH`` is refused with a BackendError at its position, so
``backend="auto"`` runs it on numpy.

Semantics that GLSL leaves undefined (NaN in min/max, ``pow`` of a negative
base, integer ``//`` and ``%`` of negatives ...) go through the dialect's
helpers (GLSL: the ``vg_*`` functions of codegen/build/helpers.py and
templates/helpers.glsl.j2), which follow numpy exactly.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ... import spelling as S
from ...errors import BackendError, Span
from ...ir.nodes import Apply, Const, CoupledAt, Expr, Load, Reduce, Sym
from ...ir.ops import Op, SymKind, Type
from ...ir.ranges import STEPS, Ranges, condition_text
from ...ir.walk import Numbering as _Numbering
from ...ir.walk import children as _children
from .kernel import Context
from .traits import first_span as _first_span
from .traits import is_pure_node as _is_pure_node
from .dialect import (DIALECTS, FLOAT32, FLOAT64, LOOP_HELPERS, Dialect, float64_error,
                      mangle)

MAX_NEST = 32        # printed nesting past which a subtree goes into a temporary
MAX_DEPTH = 250      # nesting the GLSL backend refuses when it cannot cut it (see hoist)

# Ops whose float constant zeros may stay literal (no arithmetic on them to fold wrongly).
COMPARISONS = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE})


# --- the printer -------------------------------------------------------------------
class Printer:
    """Prints expressions of one field; collects helpers and run-time error sites."""

    def __init__(self, dialect: Dialect, *, param_prefix: Callable[[str], str],
                 loader: Callable[[str], str], coupled_at: Callable[[str], str],
                 reduce_name: Callable[[Reduce], str], ranges: Ranges | None = None,
                 buffer: Callable[[str], str] = lambda a: mangle("b_in", a)):
        self.d = dialect
        self.helpers: set[str] = set()
        self.errors: list[tuple[str, str, Span | None]] = []   # (kind, what, span)
        self._error_ids: dict[tuple, int] = {}
        self._param = param_prefix
        self._loader = loader
        self._coupled_at = coupled_at
        self._reduce = reduce_name
        self._ranges = ranges
        self._buffer = buffer
        self._verdicts: dict = {}
        # fast printing: reads proven given a condition on the call's steps are plain too;
        # the conditions used (GLSL text -> why) are collected in ``guards``
        self.fast = False
        self.guards: dict[str, list[str]] = {}
        self.guards_used: list[Load] = []       # every read printed plain under a guard
        self.number = _Numbering()              # value numbers: the keys of ``temps``
        self._texts: dict | None = None         # id -> (node, text) in one expr() call
        self._live: dict[int, str] = {}         # lazy_select: id -> when its value is used
        self._pure_memo: dict = {}              # id -> (node, pure): kept alive with it

    # error sites ---------------------------------------------------------------
    def error_id(self, kind: str, what: str, span: Span | None) -> int:
        key = (kind, what, span)
        if key not in self._error_ids:
            self._error_ids[key] = len(self.errors)
            self.errors.append(key)
            self.helpers.add(self.d.fail)
        return self._error_ids[key]

    def need(self, fmt: str) -> None:
        for name in self.d.helper_names(fmt):
            self._add_helper(name)

    def _add_helper(self, name: str) -> None:
        if name in self.helpers:
            return
        self.helpers.add(name)
        for dep in self.d.helper_deps.get(name, ()):
            self._add_helper(dep)

    # printing ------------------------------------------------------------------
    def expr(self, e: Expr, ctx: Context, temps: dict | None = None) -> str:
        self._check_depth(e, temps or {})
        if self.d.lazy_select and self._texts is None:
            self._live = self._liveness(e, ctx, temps or {})
        text = self._expr(e, ctx, temps or {})
        if text.startswith("(") and _balanced_outer(text):
            return text[1:-1]
        return text

    def _expr(self, e: Expr, ctx: Context, temps: dict) -> str:
        """The text of ``e``: its subtrees are printed first, on an explicit stack, so
        the rules below (``_text``, ``_apply``, ``_pow``) find their operands' texts made."""
        texts = self._texts
        if texts is not None and id(e) in texts:
            return texts[id(e)][1]
        outer = texts is None
        if outer:
            self._texts = texts = {}
        try:
            stack = [(e, False)]
            while stack:
                node, ready = stack.pop()
                if id(node) in texts:
                    continue
                kids = () if self._temp(node, temps) is not None else _children(node)
                if ready or not kids:
                    texts[id(node)] = (node, self._text(node, ctx, temps))
                else:
                    stack.append((node, True))
                    stack.extend((k, False) for k in reversed(kids))
            return texts[id(e)][1]
        finally:
            if outer:
                self._texts = None

    def _check_depth(self, e: Expr, temps: dict) -> None:
        """A BackendError if ``e`` prints nested deeper than MAX_DEPTH (temporaries cut it)."""
        depth: dict[int, int] = {}
        stack = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in depth:
                continue
            kids = () if self._temp(node, temps) is not None else _children(node)
            if ready or not kids:
                depth[id(node)] = d = 1 + max((depth[id(k)] for k in kids), default=0)
                if d > MAX_DEPTH:
                    raise _too_deep(node)
            else:
                stack.append((node, True))
                stack.extend((k, False) for k in kids)

    def _temp(self, e: Expr, temps: dict) -> str | None:
        return temps.get(self.number(e)) if temps else None

    def _text(self, e: Expr, ctx: Context, temps: dict) -> str:
        """One node's text; its operands' texts are made (see ``_expr``)."""
        name = self._temp(e, temps)
        if name is not None:
            return name
        if isinstance(e, Const):
            if e.type is Type.FLOAT:
                text = self.d.float_literal(e.value)
                self.need(text)
                return text
            return self.d.literal(e.value, e.type)
        if isinstance(e, Sym):
            return self._sym(e, ctx)
        if isinstance(e, Load):
            idx = [self._expr(i, ctx, temps) for i in e.index]
            if self._in_range(e, ctx):
                return self._plain_read(e.array, idx)
            eid = self.error_id("index", e.array, e.span)
            return self.d.loader_call.format(func=self._loader(e.array),
                                             args=", ".join(idx + [self.d.uint(eid)]),
                                             live=self._live.get(id(e), self.d.true))
        if isinstance(e, CoupledAt):
            idx = [self._expr(i, ctx, temps) for i in e.index]
            return f"{self._coupled_at(e.name)}({', '.join(idx)})"
        if isinstance(e, Reduce):
            return self._reduce(e)
        return self._apply(e, ctx, temps)

    def _in_range(self, e: Load, ctx: Context) -> bool:
        """Is every index of this read in range (proven; or, printing fast, given a condition)?"""
        if self._ranges is None:
            return False
        key = (self.number(e), ctx.place())
        verdicts = self._verdicts.get(key)
        if verdicts is None:
            verdicts = self._verdicts[key] = self._ranges.load(e.array, e.index, key[1])
        if all(v.proven for v in verdicts):
            return True
        if not self.fast or not all(v.proven or v.conditional for v in verdicts):
            return False
        self.guards_used.append(e)
        for v in verdicts:
            if v.conditional:
                text = condition_text(v.condition, _uniform_name)
                why = self.guards.setdefault(text, [])
                if v.reason not in why:
                    why.append(v.reason)
        return True

    def _plain_read(self, array: str, idx: list[str]) -> str:
        dims = [_uniform_name(x) if isinstance(x, str) else str(x)
                for x in self._ranges.arrays[array]]
        flat = idx[0]
        for n, (i, d) in enumerate(zip(idx[1:], dims[1:])):
            flat = f"({flat}) * {d} + {i}" if n else f"{flat} * {d} + {i}"
        return self.d.buffer_read.format(buffer=self._buffer(array), index=flat)

    def _sym(self, s: Sym, ctx: Context) -> str:
        k = s.kind
        if k is SymKind.STATE:
            return mangle(ctx.state, s.name)
        if k is SymKind.INIT:
            return mangle("s0", s.name)
        if k is SymKind.PARAM:
            return self._param(s.name)
        if k is SymKind.DIM:
            return mangle("d", s.name)
        if k is SymKind.GRID:
            return mangle("g", s.name)
        if k is SymKind.BASIN:
            return mangle("l", s.name)
        if k is SymKind.COUPLED:
            return mangle("c", s.name)
        if k is SymKind.TIME:
            return ctx.time
        if k is SymKind.STEP:
            return ctx.step
        if k is SymKind.DT:
            return "u_dt"
        raise AssertionError(f"unknown symbol kind {k}")

    def _apply(self, e: Apply, ctx: Context, temps: dict) -> str:
        op = e.op
        if op in self.d.forbidden:
            raise float64_error(op.value, e.span)
        if op is Op.WHERE:
            return self.d.select.format(*(self._expr(x, ctx, temps) for x in e.args))
        if op is Op.POW:
            return self._pow(e, ctx, temps)
        operand = self._expr if op in COMPARISONS else self._operand
        args = [operand(x, ctx, temps) for x in e.args]
        operand_type = e.args[0].type if e.args else e.type
        d = self.d
        if op in d.binary:
            fmt = d.binary[op]
        elif op in d.unary:
            fmt = d.unary[op]
        elif operand_type is Type.INT and op in d.int_ops:
            fmt = d.int_ops[op]
        elif op is Op.TO_INT and operand_type is Type.INT:
            fmt = "{0}"
        elif op is Op.TO_FLOAT:
            fmt = d.cast
        else:
            fmt = self.d.float_ops[op]
        self.need(fmt)
        eid = ""
        if "{e}" in fmt:
            eid = self.error_id("zero", op.value, e.span)
        return fmt.format(*args, e=eid, F=self.d.F, live=self._live.get(id(e), d.true))

    def _liveness(self, e: Expr, ctx: Context, temps: dict) -> dict[int, str]:
        """For a dialect whose select evaluates both sides: id -> the condition under
        which each node that can fail (a checked read, an int ``//``/``%``) inside a
        ``where`` branch is used (absent: always). A condition's own nodes get theirs
        before it is printed (the stack is last in, first out, and ``self._live`` is
        filled as it goes), so a condition's text carries its own nodes' conditions."""
        self._live = live = {}
        paths: dict[int, list] = {}
        stack: list = [(e, (), False)]
        while stack:
            node, conds, second = stack.pop()
            if second:          # the condition's subtree is done: print it, then branches
                c, a, b = node.args
                text = self._expr(c, ctx, temps)
                stack.append((a, conds + (text,), False))
                stack.append((b, conds + (f"!({text})",), False))
                continue
            if self._temp(node, temps) is not None or _is_pure(node, self._pure_memo):
                continue
            seen = paths.setdefault(id(node), [])
            seen.append(conds)
            if any(not p for p in seen):
                live.pop(id(node), None)
            elif len(seen) == 1:
                live[id(node)] = " && ".join(conds)
            else:
                live[id(node)] = " || ".join("(" + " && ".join(p) + ")" for p in seen)
            if isinstance(node, Apply) and node.op is Op.WHERE:
                stack.append((node, conds, True))
                stack.append((node.args[0], conds, False))
                continue
            stack.extend((k, conds, False) for k in reversed(_children(node)))
        return live

    def _pow(self, e: Apply, ctx: Context, temps: dict) -> str:
        base, expo = e.args
        d = self.d
        if Op.POW not in d.float_ops and isinstance(expo, Const) and expo.value == 0.5:
            self.need(d.sqrt)                   # x ^ 0.5 is sqrt(x) (see vg_pow)
            return d.sqrt.format(self._operand(base, ctx, temps))
        n = _integer_exponent(expo)
        if n is not None and d.dtype == "float32":
            n = int(np.float32(n))          # the exponent is a float32, as in numpy
        if n is not None and -2**31 <= n < 2**31:
            self.need(d.powi)
            return d.powi.format(self._operand(base, ctx, temps), d.literal(n, Type.INT))
        if expo_int := _int_operand(expo):
            self.need(d.powi)
            return d.powi.format(self._operand(base, ctx, temps),
                               self._expr(expo_int, ctx, temps))
        if Op.POW not in d.float_ops:
            raise float64_error("^ with a non-integer exponent", e.span)
        fmt = self.d.float_ops[Op.POW]
        self.need(fmt)
        y = self.d.float_literal(n) if n is not None else self._operand(expo, ctx, temps)
        return fmt.format(self._operand(base, ctx, temps), y)

    def _operand(self, e: Expr, ctx: Context, temps: dict) -> str:
        """An operand; a float constant zero is ``vg_zero`` (a uniform): the driver's
        compiler folds ``x * 0.0``, ``x / 0.0``, ``0.0 + x`` ... without IEEE (NaN, inf and
        the sign of zero lost; GLSL ``precise`` does not stop it)."""
        if (isinstance(e, Const) and e.type is Type.FLOAT and e.value == 0
                and self._temp(e, temps) is None):
            self.need(self.d.zero)
            z = self.d.zero
            return f"(-{z})" if math.copysign(1.0, e.value) < 0 else z
        return self._expr(e, ctx, temps)

    # hoisting pure common subexpressions ------------------------------------------
    def hoist(self, roots: list[Expr], ctx: Context, prefix: str) -> tuple[list[str], dict]:
        """Declarations of temporaries, and the map (value number -> name) ``expr`` reads.

        A pure subtree used more than once gets a temporary. A subtree is pure when
        it holds no input read and no int ``//``/``%``: computing it where its value is
        not needed has no effect, so moving it out of a ``where`` branch is safe.
        Impure subtrees stay inline. A subtree nested ``MAX_NEST`` deep gets one too
        when it is pure or evaluated on every path (no ``where`` branch, no right
        side of ``and``/``or`` above it); nesting that cannot be cut so and passes
        ``MAX_DEPTH`` is a BackendError.
        """
        order, uses, pure, rep = self._uses(roots)
        always = self._unconditional(roots)
        temps: dict[int, str] = {}
        lines: list[str] = []
        depth: dict[int, int] = {}
        for n in order:
            e = rep[n]
            kids = [self.number(c) for c in _children(e)]
            d = 1 + max((depth[k] for k in kids), default=0)
            shared = uses[n] > 1 and pure[n]
            deep = d >= MAX_NEST and (pure[n] or n in always)
            if (shared or deep) and isinstance(e, Apply) and e.op is not Op.TO_FLOAT:
                text = self.expr(e, ctx, temps)
                name = f"{prefix}{len(temps)}"
                lines.append(self.d.declare.format(T=self.d.type_name(e.type), name=name,
                                                   value=text))
                temps[n], d = name, 0
            elif d > MAX_DEPTH:
                raise _too_deep(e)
            depth[n] = d
        return lines, temps

    def _uses(self, roots: list[Expr]):
        """Post-order of first visits, reference counts and purity, by value number."""
        uses: dict[int, int] = {}
        order: list[int] = []
        pure: dict[int, bool] = {}
        rep: dict[int, Expr] = {}
        stack = [(r, False) for r in reversed(roots)]
        while stack:
            e, ready = stack.pop()
            n = self.number(e)
            if ready:
                pure[n] = _is_pure_node(e) and all(pure[self.number(c)] for c in _children(e))
                order.append(n)
                continue
            uses[n] = uses.get(n, 0) + 1
            if uses[n] > 1:
                continue
            rep[n] = e
            stack.append((e, True))
            stack.extend((c, False) for c in reversed(_children(e)))
        return order, uses, pure, rep

    def _unconditional(self, roots: list[Expr]) -> set[int]:
        """Value numbers of the subtrees every evaluation of the roots evaluates."""
        seen: set[tuple[int, bool]] = set()
        always: set[int] = set()
        stack = [(r, False) for r in roots]
        while stack:
            e, maybe = stack.pop()
            n = self.number(e)
            if (n, maybe) in seen:
                continue
            seen.add((n, maybe))
            if not maybe:
                always.add(n)
            for k, c in enumerate(_children(e)):
                lazy = isinstance(e, Apply) and k > 0 and e.op in (Op.WHERE, Op.AND, Op.OR)
                stack.append((c, maybe or lazy))
        return always


def _is_pure(e: Expr, memo: dict) -> bool:
    """No checked read and no int ``//``/``%`` in ``e`` (children first, no recursion)."""
    stack = [(e, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in memo:
            continue
        kids = _children(node)
        if ready or not kids:
            memo[id(node)] = (node, _is_pure_node(node) and all(memo[id(k)][1] for k in kids))
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
    return memo[id(e)][1]


def _too_deep(e: Expr) -> BackendError:
    return BackendError(
        f"this expression is nested more than {MAX_DEPTH} levels deep where the GLSL "
        f"backend cannot split it (a start value or coupled value, or inside a `where` "
        f"branch or an `and`/`or` that reads inputs or divides ints); write it in smaller "
        f"pieces, or use {S.setting('backend', 'numpy')}", span=_first_span(e))


def _uniform_name(symbol: str) -> str:
    """The uniform holding a dim or the call's steps."""
    return "u_steps" if symbol == STEPS else mangle("d", symbol)


def _integer_exponent(expo: Expr) -> int | None:
    """The exponent as an int when it is a constant integer (through any chain of
    negations, walked without recursion), else None."""
    sign = 1
    while isinstance(expo, Apply) and expo.op is Op.NEG:
        sign, expo = -sign, expo.args[0]
    if isinstance(expo, Apply) and expo.op is Op.TO_FLOAT and isinstance(expo.args[0], Const):
        return sign * int(expo.args[0].value)
    if isinstance(expo, Const) and float(expo.value).is_integer() and abs(expo.value) <= 2**31 - 1:
        return sign * int(expo.value)
    return None


def _int_operand(expo: Expr) -> Expr | None:
    if isinstance(expo, Apply) and expo.op is Op.TO_FLOAT and expo.args[0].type is Type.INT:
        return expo.args[0]
    return None


def _balanced_outer(text: str) -> bool:
    depth = 0
    for pos, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and pos < len(text) - 1:
            return False
    return depth == 0


__all__ = ["Dialect", "FLOAT32", "FLOAT64", "DIALECTS", "Printer", "Context", "mangle",
           "float64_error", "LOOP_HELPERS"]
