"""Part of stage 3: type one AST expression against a field's scope, giving IR.

Implements the typing rules of docs/language.md: int / float / bool, explicit
``TO_FLOAT`` promotions, int indices, ranks, reductions, and the names each
kind of expression may use (a :class:`Context`). Lets are inlined: a let's body
is typed once, and each use checks that what the let uses is allowed there.

No walk here recurses, so expressions and let chains of any depth are typed.
The rules are written as generators: one that needs a subexpression typed
yields a :class:`_Want` and is sent the typed node back; ``ExprChecker._drive``
runs them on an explicit stack, in exactly the order plain recursion would (so
the first error found is the same). IR nodes are interned and hashed as they
are made (``ir.nodes.Interned``), children first, so no later hash of a deep
tree recurses.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from types import GeneratorType
from typing import Iterator, NamedTuple

from ..errors import NameError_, Span, TypeError_
from ..ir import nodes as N
from ..ir.ops import (ARITY, COMPARE, FLOAT_FUNCS, FUNCTIONS, INT32_MAX, INT32_MIN, POLY_FUNCS,
                      Op, ReduceOp, SymKind, Type)
from ..ir.walk import walk
from . import ast as A
from .interp import expand as expand_interp
from .scope import BUILTINS, RESERVED_FUNCTIONS, Scope, describe

_BUILTIN_SYMS = {"t": N.Sym(SymKind.TIME, "t", Type.FLOAT),
                 "dt": N.Sym(SymKind.DT, "dt", Type.FLOAT),
                 "step": N.Sym(SymKind.STEP, "step", Type.INT)}
_SYM_KIND = {"param": SymKind.PARAM, "state": SymKind.STATE, "dim": SymKind.DIM,
             "grid": SymKind.GRID, "basin": SymKind.BASIN, "coupled": SymKind.COUPLED,
             "noise": SymKind.NOISE}
_KIND_OF_SYM = {SymKind.PARAM: "param", SymKind.STATE: "state", SymKind.DIM: "dim",
                SymKind.GRID: "grid", SymKind.BASIN: "basin", SymKind.COUPLED: "coupled",
                SymKind.TIME: "t", SymKind.DT: "dt", SymKind.STEP: "step",
                SymKind.INIT: "init", SymKind.NOISE: "noise"}
_WHAT = {"t": "the time `t`", "dt": "the step size `dt`", "step": "the step number `step`",
         "init": "`init(...)`"}
ALL = frozenset({"param", "state", "dim", "grid", "basin", "input", "coupled", "t", "dt",
                 "step", "init"})


@dataclass(frozen=True)
class Context:
    """What one kind of expression may use: a set of name kinds (and which states)."""

    where: str                              # "a param default", for messages
    allowed: frozenset[str] = ALL
    states: frozenset[str] | None = None    # None: every state (when "state" is allowed)
    rule: str = ""                          # "; " + the rule, for messages

    def check(self, kind: str, name: str, span: Span, via: str | None = None) -> None:
        ok = kind in self.allowed
        if ok and kind == "state" and self.states is not None:
            ok = name in self.states
        if ok:
            return
        what = _WHAT.get(kind) or f"`{name}` ({describe(kind)})"
        if kind == "state" and self.states is not None and "state" in self.allowed:
            what = f"`{name}`, a state declared at or after this one"
        if via:
            what = f"`{via}`, which uses {what}"
        raise NameError_(f"{self.where} may not use {what}{self.rule}", span=span)


FULL = Context("this expression")


def uses(expr: N.Expr) -> frozenset[tuple[str, str]]:
    """Every (kind, name) an IR expression reads (each shared node visited once)."""
    found: set[tuple[str, str]] = set()
    for e in walk(expr):
        if isinstance(e, N.Sym):
            found.add((_KIND_OF_SYM[e.kind], e.name))
        elif isinstance(e, N.Load):
            found.add(("input", e.array))
        elif isinstance(e, (N.CoupledAt, N.Reduce)):
            found.add(("coupled", e.name))
    return frozenset(found)


class _Want(NamedTuple):
    """A request of a rule: type ``expr`` in ``ctx`` as ``kind`` (see ExprChecker._finish)."""

    kind: str           # "check", "number", "float", "int" or "cond"
    expr: A.Expr
    ctx: Context
    what: str = "an index"      # for "int": what must be an int, in its message


def _ask(want: _Want) -> Iterator:
    """A generator whose value is the answer to one request (the root of a drive)."""
    return (yield want)


def _type_name(t: Type) -> str:
    return {Type.INT: "an int", Type.FLOAT: "a float", Type.BOOL: "a condition (bool)"}[t]


class ExprChecker:
    """Types AST expressions of one field into IR expressions."""

    def __init__(self, scope: Scope):
        self.scope = scope
        self._lets: dict[str, N.Expr] = {}
        self._let_uses: dict[str, frozenset[tuple[str, str]]] = {}
        self._busy: list[str] = []

    def let_uses(self, name: str) -> frozenset[tuple[str, str]]:
        if name not in self._let_uses:
            self._let_uses[name] = uses(self.let_body(name))
        return self._let_uses[name]

    # --- entry points -------------------------------------------------------
    def check(self, expr: A.Expr, ctx: Context = FULL) -> N.Expr:
        return self._drive(_Want("check", expr, ctx))

    def number(self, expr: A.Expr, ctx: Context = FULL) -> N.Expr:
        return self._drive(_Want("number", expr, ctx))

    def float(self, expr: A.Expr, ctx: Context = FULL) -> N.Expr:
        return self._drive(_Want("float", expr, ctx))

    def int(self, expr: A.Expr, ctx: Context = FULL, what: str = "an index") -> N.Expr:
        return self._drive(_Want("int", expr, ctx, what))

    def cond(self, expr: A.Expr, ctx: Context = FULL) -> N.Expr:
        return self._drive(_Want("cond", expr, ctx))

    def let_body(self, name: str) -> N.Expr:
        """The typed body of a let, typed once (detects cycles)."""
        return self._drive(self._let(name))

    def indices(self, expr: A.Index | A.FluxStmt, rank: int,
                ctx: Context) -> tuple[N.Expr, ...]:
        return self._drive(self._indices(expr, rank, ctx))

    # --- the explicit stack ------------------------------------------------------
    def _drive(self, root):
        """Run a request (or a rule's generator) to its value without recursion."""
        stack = [(_ask(root) if isinstance(root, _Want) else root, None)]
        value, error = None, None
        while True:
            gen, want = stack[-1]
            try:
                request = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                stack.pop()
                value, error = self._settle(want, stop.value)
            except Exception as exc:                # noqa: BLE001 - to the requester
                stack.pop()
                value, error = None, exc
            else:
                value, error = self._begin(request, stack)
                continue
            if not stack:
                if error is not None:
                    raise error
                return value

    def _begin(self, want: _Want, stack: list) -> tuple:
        """Start the rule for ``want``: a generator goes on the stack, a value is settled."""
        try:
            got = getattr(self, "_" + type(want.expr).__name__.lower())(want.expr, want.ctx)
        except Exception as exc:                    # noqa: BLE001 - to the requester
            return None, exc
        if isinstance(got, GeneratorType):
            stack.append((got, want))
            return None, None
        return self._settle(want, got)

    def _settle(self, want: _Want | None, node: N.Expr) -> tuple:
        """(value, None) for the requester, or (None, the error ``_finish`` raised)."""
        try:
            return (node if want is None else self._finish(want, node)), None
        except Exception as exc:                    # noqa: BLE001 - to the requester
            return None, exc

    def _finish(self, want: _Want, node: N.Expr) -> N.Expr:
        """What a request asks of its typed node: a number, a float, an int or a bool."""
        span = want.expr.span
        if want.kind == "check":
            return node
        if want.kind in ("number", "float"):
            node = self.numeric(node, span)
            return to_float(node, span) if want.kind == "float" else node
        if want.kind == "int" and node.type is not Type.INT:
            hint = "; use int(...) to floor a float" if node.type is Type.FLOAT else ""
            raise TypeError_(f"{want.what} must be an int, not {_type_name(node.type)}{hint}",
                             span=span)
        if want.kind == "cond" and node.type is not Type.BOOL:
            raise TypeError_(f"expected a condition (a comparison such as `x > 0`), not "
                             f"{_type_name(node.type)}", span=span)
        return node

    @staticmethod
    def numeric(node: N.Expr, span: Span) -> N.Expr:
        if node.type is Type.BOOL:
            raise TypeError_("a condition (bool) is not a number; it is allowed only where a "
                             "condition is expected (use where(cond, 1.0, 0.0))", span=span)
        return node

    def _let(self, name: str) -> Iterator:
        if name in self._lets:
            return self._lets[name]
        decl = self.scope.lets[name]
        if name in self._busy:
            chain = " -> ".join(self._busy[self._busy.index(name):] + [name])
            raise NameError_(f"let `{name}` depends on itself ({chain})", span=decl.name.span)
        self._busy.append(name)
        try:
            body = yield _Want("number", decl.expr, FULL)
        finally:
            self._busy.pop()
        self._lets[name] = body
        return body

    # --- leaves ---------------------------------------------------------------
    def _num(self, expr: A.Num, ctx: Context) -> N.Expr:
        if not expr.is_int:
            return N.Const(float(expr.value), Type.FLOAT)
        return N.Const(_int32(expr.value, expr.span), Type.INT)

    def _name(self, expr: A.Name, ctx: Context) -> Iterator:
        name = expr.name
        if name in BUILTINS:
            ctx.check(name, name, expr.span)
            return _BUILTIN_SYMS[name]
        kind = self.scope.kind(name)
        if kind == "let":
            body = yield from self._let(name)
            if ctx is not FULL:
                for used_kind, used in sorted(self.let_uses(name)):
                    ctx.check(used_kind, used, expr.span, via=name)
            return body
        if kind == "noise" and ("noise" not in ctx.allowed or self._busy):
            raise self._misplaced_noise(expr, ctx)
        if kind in _SYM_KIND:
            ctx.check(kind, name, expr.span)
            node_type = Type.INT if kind in ("dim", "grid", "basin") else Type.FLOAT
            return N.Sym(_SYM_KIND[kind], name, node_type)
        raise self._bad_name(expr, kind)

    def _misplaced_noise(self, expr: A.Name, ctx: Context) -> Exception:
        """A noise outside a derivative (docs/language.md, Noise)."""
        where = f"let `{self._busy[-1]}`" if self._busy else ctx.where
        return NameError_(f"noise `{expr.name}` used in {where}; a noise may appear only in "
                          f"a derivative, linearly (`dx/dt = F + G * {expr.name}`)",
                          span=expr.span)

    def _bad_name(self, expr: A.Name, kind: str | None) -> Exception:
        name = expr.name
        if kind == "input":
            rank = len(self.scope.array(name).dims)
            idx = ", ".join(f"e{k + 1}" for k in range(rank))
            return TypeError_(f"input `{name}` is an array of rank {rank}; read one element "
                              f"as `{name}[{idx}]`", span=expr.span)
        if kind == "output":
            return NameError_(f"output `{name}` is written only by `flux` and cannot be read",
                              span=expr.span)
        if name in RESERVED_FUNCTIONS:
            return NameError_(f"`{name}` is a function; call it as `{name}(...)`",
                              span=expr.span)
        return NameError_(f"unknown name `{name}`{self._suggest(name)}", span=expr.span)

    def _suggest(self, name: str) -> str:
        known = list(self.scope.names) + sorted(BUILTINS)
        close = difflib.get_close_matches(name, known, n=1)
        return f"; did you mean `{close[0]}`?" if close else ""

    # --- operators ------------------------------------------------------------
    def _unary(self, expr: A.Unary, ctx: Context) -> Iterator:
        if expr.op is Op.NOT:
            operand = yield _Want("cond", expr.operand, ctx)
            return N.Apply(Op.NOT, (operand,), Type.BOOL, expr.span)
        operand = expr.operand
        if isinstance(operand, A.Num) and operand.is_int:
            return N.Const(_int32(-operand.value, expr.span), Type.INT)
        node = yield _Want("number", operand, ctx)
        return N.Apply(Op.NEG, (node,), node.type, expr.span)

    def _binary(self, expr: A.Binary, ctx: Context) -> Iterator:
        op = expr.op
        if op in (Op.AND, Op.OR):
            left = yield _Want("cond", expr.left, ctx)
            right = yield _Want("cond", expr.right, ctx)
            return N.Apply(op, (left, right), Type.BOOL, expr.span)
        left = yield _Want("number", expr.left, ctx)
        right = yield _Want("number", expr.right, ctx)
        if op in (Op.DIV, Op.POW):
            args = (to_float(left, expr.left.span), to_float(right, expr.right.span))
            return N.Apply(op, args, Type.FLOAT, expr.span)
        args = unify((left, right), (expr.left.span, expr.right.span))
        result = Type.BOOL if op in COMPARE else args[0].type
        return N.Apply(op, args, result, expr.span)

    # --- calls and indexing ---------------------------------------------------
    def _call(self, expr: A.Call, ctx: Context) -> Iterator:
        name, args = expr.func.name, expr.args
        if name == "init":
            return self._init(expr, ctx)
        if name == "interp":
            return (yield from self._interp(expr, ctx))
        if name in ("sum", "mean") or (name in ("min", "max") and len(args) == 1):
            return self._reduce(expr, ctx)
        if name not in FUNCTIONS:
            raise self._not_function(expr)
        op = FUNCTIONS[name]
        if len(args) != ARITY[op]:
            want = ARITY[op]
            raise TypeError_(f"`{name}` takes {want} argument{'s' * (want != 1)}, "
                             f"not {len(args)}", span=expr.span)
        if op is Op.WHERE:
            return (yield from self._where(expr, ctx))
        nodes = []
        for a in args:
            nodes.append((yield _Want("number", a, ctx)))
        nodes = tuple(nodes)
        spans = tuple(a.span for a in args)
        if op is Op.TO_INT:
            return nodes[0] if nodes[0].type is Type.INT else \
                N.Apply(Op.TO_INT, nodes, Type.INT, expr.span)
        if op is Op.TO_FLOAT:
            return to_float(nodes[0], expr.span)
        if op in POLY_FUNCS:
            nodes = unify(nodes, spans)
            return N.Apply(op, nodes, nodes[0].type, expr.span)
        assert op in FLOAT_FUNCS or op is Op.POW
        nodes = tuple(to_float(n, s) for n, s in zip(nodes, spans))
        return N.Apply(op, nodes, Type.FLOAT, expr.span)

    def _not_function(self, expr: A.Call) -> Exception:
        name = expr.func.name
        kind = self.scope.kind(name)
        if kind is not None or name in BUILTINS:
            return TypeError_(f"`{name}` is {describe(kind) if kind else 'a built-in name'}, "
                              "not a function", span=expr.func.span)
        close = difflib.get_close_matches(name, sorted(RESERVED_FUNCTIONS), n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        return NameError_(f"unknown function `{name}`{hint}", span=expr.func.span)

    def _where(self, expr: A.Call, ctx: Context) -> Iterator:
        cond = yield _Want("cond", expr.args[0], ctx)
        a = yield _Want("number", expr.args[1], ctx)
        b = yield _Want("number", expr.args[2], ctx)
        a, b = unify((a, b), (expr.args[1].span, expr.args[2].span))
        return N.Apply(Op.WHERE, (cond, a, b), a.type, expr.span)

    def _interp(self, expr: A.Call, ctx: Context) -> Iterator:
        """``interp(A, e1, ..., u)``: the input ``A`` read at the fractional position ``u``
        of its last axis (frontend/interp.py)."""
        args = expr.args
        table = args[0] if args else None
        if not isinstance(table, A.Name) or self.scope.kind(table.name) != "input":
            what = ""
            if isinstance(table, A.Name):
                kind = self.scope.kind(table.name)
                what = f"; `{table.name}` is {describe(kind) if kind else 'unknown'}"
            raise TypeError_(f"`interp(A, u)` reads an input table `A` at the position `u`: "
                             f"its first argument must be the name of an input{what}",
                             span=(table or expr).span)
        name = table.name
        dims = self.scope.array(name).dims
        if len(args) != len(dims) + 1:
            lead = "".join(f"e{k + 1}, " for k in range(len(dims) - 1))
            n = len(dims) - 1
            takes = (f"{n} int ind{'ex' if n == 1 else 'ices'} and a position" if n
                     else "a position")
            raise TypeError_(f"`interp` of input `{name}` (rank {len(dims)}) takes {takes} "
                             f"after the table: `interp({name}, {lead}u)`, not "
                             f"{len(args) - 1} argument{'s' * (len(args) != 2)}",
                             span=expr.span)
        ctx.check("input", name, expr.span)
        lead = []
        for e in args[1:-1]:
            lead.append((yield _Want("int", e, ctx, f"an index of `{name}`")))
        u = yield _Want("float", args[-1], ctx)
        ext = dims[-1]
        extent = (N.Sym(SymKind.DIM, ext.name, Type.INT) if isinstance(ext, A.Name)
                  else N.Const(ext.value, Type.INT))
        return expand_interp(name, tuple(lead), u, extent, expr.span)

    def _init(self, expr: A.Call, ctx: Context) -> N.Expr:
        arg = expr.args[0] if len(expr.args) == 1 else None
        if not isinstance(arg, A.Name) or self.scope.kind(arg.name) != "state":
            raise TypeError_("`init(x)` takes the name of a state", span=expr.span)
        ctx.check("init", arg.name, expr.span)
        return N.Sym(SymKind.INIT, arg.name, Type.FLOAT)

    def _reduce(self, expr: A.Call, ctx: Context) -> N.Expr:
        name = expr.func.name
        arg = expr.args[0] if len(expr.args) == 1 else None
        if not isinstance(arg, A.Name) or self.scope.kind(arg.name) != "coupled":
            extra = " (two-argument min/max compare numbers)" if name in ("min", "max") else ""
            raise TypeError_(f"`{name}(s)` reduces a coupled name `s` over the basin; its "
                             f"argument must be one coupled name{extra}", span=expr.span)
        ctx.check("coupled", arg.name, expr.span)
        return N.Reduce(ReduceOp(name), arg.name)

    def _index(self, expr: A.Index, ctx: Context) -> Iterator:
        name = expr.target.name
        kind = self.scope.kind(name)
        if kind == "input":
            rank = len(self.scope.array(name).dims)
            ctx.check("input", name, expr.span)
            index = yield from self._indices(expr, rank, ctx)
            return N.Load(name, index, Type.FLOAT, expr.span)
        if kind == "coupled":
            ctx.check("coupled", name, expr.span)
            rank = self.scope.basin_rank or 0
            index = yield from self._indices(expr, rank, ctx)
            index = self.scope.basin_index(index)      # a lower-rank basin: leading 0s
            return N.CoupledAt(name, index, Type.FLOAT, expr.span)
        if kind is None and name not in BUILTINS:
            raise self._bad_name(expr.target, kind)
        if kind == "output":
            raise self._bad_name(expr.target, kind)
        what = describe(kind) if kind else "a built-in name"
        raise TypeError_(f"`{name}` is {what}; only inputs and coupled names can be indexed",
                         span=expr.target.span)

    def _indices(self, expr: A.Index | A.FluxStmt, rank: int, ctx: Context) -> Iterator:
        target = expr.target.name
        if len(expr.indices) != rank:
            raise TypeError_(f"`{target}` takes {rank} ind{'ex' if rank == 1 else 'ices'}, "
                             f"not {len(expr.indices)}", span=expr.span)
        out = []
        for e in expr.indices:
            out.append((yield _Want("int", e, ctx, f"an index of `{target}`")))
        return tuple(out)


# --- helpers ---------------------------------------------------------------------
def _int32(value: int, span: Span) -> int:
    if not INT32_MIN <= value <= INT32_MAX:
        raise TypeError_(f"the int literal {value} does not fit in 32 bits (ints are "
                         f"{INT32_MIN} .. {INT32_MAX}); write it as a float", span=span)
    return value


def to_float(node: N.Expr, span: Span | None) -> N.Expr:
    if node.type is Type.FLOAT:
        return node
    return N.Apply(Op.TO_FLOAT, (node,), Type.FLOAT, span)


def unify(nodes: tuple[N.Expr, ...], spans: tuple[Span, ...]) -> tuple[N.Expr, ...]:
    """Give numeric operands one type: all int stays int, else all float."""
    if all(n.type is Type.INT for n in nodes):
        return nodes
    return tuple(to_float(n, s) for n, s in zip(nodes, spans))
