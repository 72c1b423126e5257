"""Stage 2: the AST (frozen dataclasses, each with its Span) and lark tree -> AST.

The builder is a lark Transformer with one small method per grammar alias.
Operators are named by the one vocabulary of ops, :class:`ir.ops.Op`.
Its ``transform`` walks the tree on an explicit stack (lark's own recurses), so
an expression of any depth (a 2000-term sum is a tree 2000 levels deep) builds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from lark import Token, Transformer, Tree, v_args

from ..errors import Span, SyntaxError_
from ..ir.ops import Op


# --- expressions ------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    value: Union[int, float]
    is_int: bool
    span: Span


@dataclass(frozen=True)
class Name:
    name: str
    span: Span


@dataclass(frozen=True)
class Unary:
    op: Op                      # NEG or NOT
    operand: "Expr"
    span: Span


@dataclass(frozen=True)
class Binary:
    op: Op                      # arithmetic, comparison, AND, OR
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Call:
    func: Name
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Index:
    target: Name
    indices: tuple["Expr", ...]
    span: Span


Expr = Union[Num, Name, Unary, Binary, Call, Index]


# --- statements -------------------------------------------------------------
@dataclass(frozen=True)
class ParamDecl:
    name: Name
    default: Expr | None
    span: Span


@dataclass(frozen=True)
class ArrayDecl:
    kind: str                   # "input" or "output"
    name: Name
    dims: tuple[Union[Name, Num], ...]
    span: Span


@dataclass(frozen=True)
class ArraysDecl:
    kind: str
    arrays: tuple[ArrayDecl, ...]
    span: Span


@dataclass(frozen=True)
class StateItem:
    name: Name
    init: Expr | None
    span: Span


@dataclass(frozen=True)
class StateDecl:
    items: tuple[StateItem, ...]
    span: Span


@dataclass(frozen=True)
class LetDecl:
    name: Name
    expr: Expr
    span: Span


@dataclass(frozen=True)
class Deriv:
    state: Name                 # the state, spanning the `dx` (or `d x`) text
    expr: Expr
    span: Span


@dataclass(frozen=True)
class AxisDecl:
    index: Name
    extent: Union[Name, Num]
    span: Span


@dataclass(frozen=True)
class GridDecl:
    kind: str                   # "grid" or "basin"
    axes: tuple[AxisDecl, ...]
    span: Span


@dataclass(frozen=True)
class CoupledItem:
    name: Name
    expr: Expr
    edge: Name | None
    span: Span


@dataclass(frozen=True)
class CoupledDecl:
    items: tuple[CoupledItem, ...]
    span: Span


@dataclass(frozen=True)
class CollapseDecl:
    cond: Expr
    span: Span


@dataclass(frozen=True)
class FluxStmt:
    target: Name
    indices: tuple[Expr, ...]
    value: Expr
    span: Span


@dataclass(frozen=True)
class SolveArg:
    name: Name
    value: Expr
    span: Span


@dataclass(frozen=True)
class SolveDecl:
    method: Name
    args: tuple[SolveArg, ...]
    span: Span


@dataclass(frozen=True)
class NoiseDecl:
    names: tuple[Name, ...]     # standard white noises, in declaration order
    span: Span


@dataclass(frozen=True)
class Assign:
    """``x = expr`` inside a ``when`` block."""
    target: Name
    value: Expr
    span: Span


@dataclass(frozen=True)
class WhenBlock:
    """``when COND { x = ...; flux H[...] += ... }`` (body: Assign, FluxStmt, or any other
    statement, which the checker refuses there)."""
    cond: Expr
    body: tuple
    span: Span


@dataclass(frozen=True)
class StopWhen:
    """``stop when COND``."""
    cond: Expr
    span: Span


@dataclass(frozen=True)
class ObserveDecl:
    """``observe NAME = KIND(expr)`` (the kind and its arguments as written: the checker
    says what is wrong with them)."""
    name: Name
    kind: Name
    args: tuple[Expr, ...]
    span: Span


Statement = Union[ParamDecl, ArraysDecl, StateDecl, LetDecl, Deriv, GridDecl, CoupledDecl,
                  CollapseDecl, FluxStmt, SolveDecl, NoiseDecl, WhenBlock, StopWhen,
                  ObserveDecl]


@dataclass(frozen=True)
class FieldDef:
    name: Name
    body: tuple[Statement, ...]
    span: Span


@dataclass(frozen=True)
class ProgramAST:
    fields: tuple[FieldDef, ...]


# --- tree -> AST --------------------------------------------------------------


def span_of(item: Union[Tree, Token]) -> Span:
    if isinstance(item, Token):
        return Span(item.line, item.column, item.end_line, item.end_column)
    meta = item.meta
    if getattr(meta, "empty", True):
        return Span(1, 1)
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


def _name(tok: Token) -> Name:
    return Name(str(tok), span_of(tok))


def _binary(op: Op):
    @v_args(meta=True)
    def method(self, meta, children):
        left, right = children
        return Binary(op, left, right, _meta_span(meta))
    return method


def _meta_span(meta) -> Span:
    return Span(meta.line, meta.column, meta.end_line, meta.end_column)


@v_args(meta=True)
class _Builder(Transformer):
    """One method per alias of grammar/field.lark."""

    def __default_token__(self, tok):
        return tok

    def transform(self, tree: Tree):
        """Lark's ``transform`` without recursion: the same callbacks, in the same order
        (children left to right, each subtree whole before the next)."""
        values: list = []
        stack: list = [(tree, False)]
        while stack:
            node, ready = stack.pop()
            if not isinstance(node, Tree):
                values.append(self._call_userfunc_token(node) if isinstance(node, Token)
                              else node)
            elif ready:
                n = len(node.children)
                kids = values[len(values) - n:]
                del values[len(values) - n:]
                values.append(self._call_userfunc(node, kids))
            else:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(node.children))
        return values[0]

    # expressions
    def int(self, meta, children):
        return Num(int(children[0]), True, _meta_span(meta))

    def float(self, meta, children):
        return Num(float(children[0]), False, _meta_span(meta))

    def name(self, meta, children):
        return _name(children[0])

    def neg(self, meta, children):
        return Unary(Op.NEG, children[0], _meta_span(meta))

    def not_(self, meta, children):
        return Unary(Op.NOT, children[0], _meta_span(meta))

    def call(self, meta, children):
        return Call(_name(children[0]), tuple(children[1:]), _meta_span(meta))

    def index(self, meta, children):
        return Index(_name(children[0]), tuple(children[1:]), _meta_span(meta))

    # statements
    def param(self, meta, children):
        default = children[1] if len(children) > 1 else None
        return ParamDecl(_name(children[0]), default, _meta_span(meta))

    def array_decl(self, meta, children):
        return ArrayDecl("", _name(children[0]), tuple(children[1:]), _meta_span(meta))

    def extent_name(self, meta, children):
        return _name(children[0])

    def extent_int(self, meta, children):
        return Num(int(children[0]), True, _meta_span(meta))

    def input(self, meta, children):
        return self._arrays("input", meta, children)

    def output(self, meta, children):
        return self._arrays("output", meta, children)

    def _arrays(self, kind, meta, children):
        arrays = tuple(ArrayDecl(kind, a.name, a.dims, a.span) for a in children)
        return ArraysDecl(kind, arrays, _meta_span(meta))

    def state_item(self, meta, children):
        init = children[1] if len(children) > 1 else None
        return StateItem(_name(children[0]), init, _meta_span(meta))

    def state(self, meta, children):
        return StateDecl(tuple(children), _meta_span(meta))

    def let(self, meta, children):
        return LetDecl(_name(children[0]), children[1], _meta_span(meta))

    def deriv(self, meta, children):
        dx, dt, expr = children
        _expect_d(dx, dt)
        state = Name(str(dx)[1:], Span(dx.line, dx.column + 1, dx.end_line, dx.end_column))
        return Deriv(state, expr, _meta_span(meta))

    def deriv_spaced(self, meta, children):
        d, x, dt, expr = children
        if str(d) != "d":
            raise SyntaxError_(f"unexpected `{x}`; a derivative is written `d{x}/dt`",
                               span=span_of(x))
        _expect_d(None, dt)
        return Deriv(_name(x), expr, _meta_span(meta))

    def axis(self, meta, children):
        return AxisDecl(_name(children[0]), children[1], _meta_span(meta))

    def grid(self, meta, children):
        return GridDecl("grid", tuple(children), _meta_span(meta))

    def basin(self, meta, children):
        return GridDecl("basin", tuple(children), _meta_span(meta))

    def coupled_item(self, meta, children):
        edge = _name(children[2]) if len(children) > 2 else None
        return CoupledItem(_name(children[0]), children[1], edge, _meta_span(meta))

    def coupled(self, meta, children):
        return CoupledDecl(tuple(children), _meta_span(meta))

    def collapse(self, meta, children):
        return CollapseDecl(children[0], _meta_span(meta))

    def flux(self, meta, children):
        *indices, value = children[1:]
        return FluxStmt(_name(children[0]), tuple(indices), value, _meta_span(meta))

    def solve_arg(self, meta, children):
        return SolveArg(_name(children[0]), children[1], _meta_span(meta))

    def solve(self, meta, children):
        return SolveDecl(_name(children[0]), tuple(children[1:]), _meta_span(meta))

    def noise(self, meta, children):
        return NoiseDecl(tuple(_name(c) for c in children), _meta_span(meta))

    def assign(self, meta, children):
        return Assign(_name(children[0]), children[1], _meta_span(meta))

    def when(self, meta, children):
        return WhenBlock(children[0], tuple(children[1:]), _meta_span(meta))

    def stop(self, meta, children):
        return StopWhen(children[0], _meta_span(meta))

    def observe(self, meta, children):
        return ObserveDecl(_name(children[0]), _name(children[1]), tuple(children[2:]),
                           _meta_span(meta))

    def field(self, meta, children):
        return FieldDef(_name(children[0]), tuple(children[1:]), _meta_span(meta))

    def start(self, meta, children):
        return ProgramAST(tuple(children))


for _alias, _op in {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "div": Op.DIV,
                    "floordiv": Op.FLOORDIV, "mod": Op.MOD, "pow": Op.POW,
                    "lt": Op.LT, "le": Op.LE, "gt": Op.GT, "ge": Op.GE, "eq": Op.EQ,
                    "ne": Op.NE, "and_": Op.AND, "or_": Op.OR}.items():
    setattr(_Builder, _alias, _binary(_op))


def _expect_d(dx: Token | None, dt: Token) -> None:
    if dx is not None and (not str(dx).startswith("d") or len(str(dx)) < 2):
        raise SyntaxError_(f"unexpected `{dx}`; a derivative is written `dx/dt`",
                           span=span_of(dx))
    if str(dt) != "dt":
        raise SyntaxError_(f"unexpected `{dt}`; a derivative is written `dx/dt`",
                           span=span_of(dt))


def build(tree: Tree) -> ProgramAST:
    """Turn the lark tree of a whole program into its AST."""
    try:
        return _Builder().transform(tree)
    except Exception as exc:  # lark wraps errors raised in callbacks
        inner = getattr(exc, "orig_exc", exc)
        if isinstance(inner, (SyntaxError_, RecursionError)):
            raise inner from None
        raise
