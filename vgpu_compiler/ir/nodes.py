"""The IR: one typed description of a field that every backend consumes.

Expressions are frozen dataclasses, hashed by content, so equal subtrees are
equal objects to the passes (common subexpressions) and the cache key.
Spans never take part in equality: two reads of ``A[i]`` on different lines
are one node, and report the first one's position.

Invariants established by the IR builder (backends rely on them):
- lets are inlined; every Sym names something declared;
- implicit int -> float promotions are explicit ``Apply(Op.TO_FLOAT, ...)``;
  operands of arithmetic and comparisons share one type; DIV and POW and the
  float functions take FLOAT operands; index expressions are INT;
- a ``Load`` / ``CoupledAt`` has exactly as many indices as the rank;
- coupled values, loads and reductions are FLOAT.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Union

from ..errors import Span
from .ops import Edge, Op, ReduceOp, SymKind, Type
from .tableau import Tableau


def _span() -> Span | None:
    return field(default=None, compare=False, repr=False)


def _cached_hash(self) -> int:
    """Expression nodes hash once: an inlined let may share a subtree many times over,
    and a recursive hash on every dict lookup would then cost exponential time.
    (Set as ``__hash__`` in each class body, so @dataclass keeps it.)"""
    cached = self.__dict__.get("_hash")
    if cached is None:
        key = tuple(getattr(self, f.name) for f in fields(self) if f.compare)
        cached = hash((type(self).__name__,) + key)
        object.__setattr__(self, "_hash", cached)
    return cached


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    type: Type

    __hash__ = _cached_hash


@dataclass(frozen=True)
class Sym:
    kind: SymKind
    name: str
    type: Type

    __hash__ = _cached_hash


@dataclass(frozen=True)
class Load:
    """``A[e1, ...]``: read an input. Out of range is a ProgramIndexError at ``span``."""

    array: str
    index: tuple["Expr", ...]
    type: Type = Type.FLOAT
    span: Span | None = _span()

    __hash__ = _cached_hash


@dataclass(frozen=True)
class CoupledAt:
    """``s[e1, ...]``: the coupled value at a basin position, after the edge rule."""

    name: str
    index: tuple["Expr", ...]
    type: Type = Type.FLOAT
    span: Span | None = _span()

    __hash__ = _cached_hash


@dataclass(frozen=True)
class Reduce:
    """``sum(s)`` / ``mean(s)`` / ``min(s)`` / ``max(s)`` over the basin's active lanes."""

    op: ReduceOp
    name: str
    type: Type = Type.FLOAT

    __hash__ = _cached_hash


@dataclass(frozen=True)
class Apply:
    op: Op
    args: tuple["Expr", ...]
    type: Type
    span: Span | None = _span()

    __hash__ = _cached_hash


Expr = Union[Const, Sym, Load, CoupledAt, Reduce, Apply]


# --- declarations -----------------------------------------------------------
Extent = Union[str, int]    # a dim symbol or an int literal


@dataclass(frozen=True)
class State:
    name: str
    init: Expr | None           # None: the value comes from h0
    span: Span | None = _span()


@dataclass(frozen=True)
class Param:
    name: str
    default: Expr | None        # over Const and Sym(PARAM) only; None: must be given
    span: Span | None = _span()


@dataclass(frozen=True)
class ArrayDecl:
    """An ``input`` or ``output``: a float array with fixed rank."""

    name: str
    dims: tuple[Extent, ...]
    span: Span | None = _span()


@dataclass(frozen=True)
class Axis:
    """One axis of the grid (``i < N``) or the basin (``l < 64``)."""

    index: str                  # the int name bound to the position on this axis
    extent: Extent              # basin extents are always int


@dataclass(frozen=True)
class Coupled:
    name: str
    expr: Expr
    edge: Edge = Edge.CLAMP
    span: Span | None = _span()


@dataclass(frozen=True)
class Flux:
    output: str
    index: tuple[Expr, ...]
    value: Expr                 # FLOAT
    span: Span | None = _span()


@dataclass(frozen=True)
class Solver:
    method: str
    tableau: Tableau
    dt: Expr                    # over Const, Sym(PARAM) (scalar) and Sym(DIM)
    steps: Expr                 # INT
    t0: Expr
    span: Span | None = _span()


@dataclass(frozen=True)
class Field:
    name: str
    states: tuple[State, ...]
    derivs: tuple[Expr, ...]            # one per state, in state order
    params: tuple[Param, ...]
    inputs: tuple[ArrayDecl, ...]
    outputs: tuple[ArrayDecl, ...]
    dims: tuple[str, ...]               # every dim symbol, in order of first appearance
    grid: tuple[Axis, ...]              # 1 to 3 axes, extents are dims or ints
    basin: tuple[Axis, ...] | None      # None: no basin statement (the backend picks)
    coupled: tuple[Coupled, ...]
    collapse: Expr | None               # BOOL
    flux: tuple[Flux, ...]
    solver: Solver
    span: Span | None = _span()

    @property
    def free_states(self) -> tuple[State, ...]:
        """States whose start comes from h0, in order."""
        return tuple(s for s in self.states if s.init is None)

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)


@dataclass(frozen=True)
class Program:
    """Every field of one program text."""

    fields: tuple[Field, ...]
    source: str = field(default="", compare=False, repr=False)
    filename: str = field(default="<string>", compare=False, repr=False)
