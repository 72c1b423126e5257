"""The IR: one typed description of a field that every backend consumes.

Expressions are frozen dataclasses, interned (hash-consed) where they are
made: inside ``with interning():`` (the frontend and the passes open one per
program text) every constructor call (``Apply(...)``, ``dataclasses.replace``)
returns the one existing node of its content, so common subexpressions are one
object. The key is a node's own fields and its children's identities, plus the
span of a node that can raise at run time (a ``Load``, an int ``//`` or ``%``):
a read that appears twice in the text is two nodes (and so is every node above
it), so an error names the copy that failed. Any other node keeps the span of
its first copy in the text. A table lives for one text, so no node shares a
span with another text; outside one, every call makes a new node.

Every node carries ``uid``, a number never reused: passes and backends key their
memos on it (identity, no deep hash, no node kept alive for its id). ``==`` and
``hash`` stay by content with spans left out (what tests and the position-free
kernel key compare): two copies of one read are equal, not one object. Soundness
never rests on interning: equal nodes that are distinct objects (made outside a
table) are only evaluated twice.

Invariants established by the IR builder (backends rely on them):
- lets are inlined; every Sym names something declared;
- implicit int -> float promotions are explicit ``Apply(Op.TO_FLOAT, ...)``;
  operands of arithmetic and comparisons share one type; DIV and POW and the
  float functions take FLOAT operands; index expressions are INT;
- a ``Load`` / ``CoupledAt`` has exactly as many indices as the rank;
- coupled values, loads and reductions are FLOAT.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
from dataclasses import dataclass, field, fields
from typing import Union

from ..errors import Span
from .ops import INT_TRAPPING, Edge, Op, ReduceOp, SymKind, Type
from .tableau import Tableau

_UIDS = itertools.count()
_TABLE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ir_intern", default=None)


@contextlib.contextmanager
def interning():
    """Intern the nodes made inside (one table per program text; a nested ``with``
    joins the open one). Outside, a node is new each time (it still gets a uid): a
    node never takes the span of a copy in another text."""
    if _TABLE.get() is not None:
        yield
        return
    token = _TABLE.set({})
    try:
        yield
    finally:
        _TABLE.reset(token)


class Interned(type):
    """The metaclass of expression nodes: a constructor call returns the interned node."""

    def __call__(cls, *args, **kwargs):
        node = super().__call__(*args, **kwargs)
        table = _TABLE.get()
        key = None if table is None else (cls, *node._intern_key())
        hit = None if key is None else table.get(key)
        if hit is not None:
            return hit
        object.__setattr__(node, "uid", next(_UIDS))
        hash(node)                  # cached now, while the children's hashes are
        if key is not None:
            table[key] = node
        return node


def _uids(nodes) -> tuple[int, ...]:
    return tuple(n.uid for n in nodes)


def _reduce(self):
    """Pickle and copy through the constructor, so a copy is interned (and gets a uid)."""
    return type(self), tuple(getattr(self, f.name) for f in fields(self))


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
class Const(metaclass=Interned):
    value: Union[int, float, bool]
    type: Type

    __hash__ = _cached_hash
    __reduce__ = _reduce

    def _intern_key(self) -> tuple:
        return (type(self.value), repr(self.value), self.type)   # repr: -0.0 is not 0.0


@dataclass(frozen=True)
class Sym(metaclass=Interned):
    kind: SymKind
    name: str
    type: Type

    __hash__ = _cached_hash
    __reduce__ = _reduce

    def _intern_key(self) -> tuple:
        return (self.kind, self.name, self.type)


@dataclass(frozen=True)
class Load(metaclass=Interned):
    """``A[e1, ...]``: read an input. Out of range is a ProgramIndexError at ``span``.

    ``interp``: a read of ``interp``'s expansion (frontend/interp.py), whose last index is
    ``floor(u)``: piecewise constant in ``u`` while the interpolation it is part of is
    continuous, so sensitivities may differentiate through it (a read does not vary)."""

    array: str
    index: tuple["Expr", ...]
    type: Type = Type.FLOAT
    span: Span | None = _span()
    interp: bool = field(default=False, repr=False)

    __hash__ = _cached_hash
    __reduce__ = _reduce

    def _intern_key(self) -> tuple:
        return (self.array, self.type, _uids(self.index), self.span,     # can raise: per span
                self.interp)


@dataclass(frozen=True)
class CoupledAt(metaclass=Interned):
    """``s[e1, ...]``: the coupled value at a basin position, after the edge rule."""

    name: str
    index: tuple["Expr", ...]
    type: Type = Type.FLOAT
    span: Span | None = _span()

    __hash__ = _cached_hash
    __reduce__ = _reduce

    def _intern_key(self) -> tuple:
        return (self.name, self.type, _uids(self.index))


@dataclass(frozen=True)
class Reduce(metaclass=Interned):
    """``sum(s)`` / ``mean(s)`` / ``min(s)`` / ``max(s)`` over the basin's active lanes."""

    op: ReduceOp
    name: str
    type: Type = Type.FLOAT

    __hash__ = _cached_hash
    __reduce__ = _reduce

    def _intern_key(self) -> tuple:
        return (self.op, self.name, self.type)


@dataclass(frozen=True)
class Apply(metaclass=Interned):
    op: Op
    args: tuple["Expr", ...]
    type: Type
    span: Span | None = _span()

    __hash__ = _cached_hash
    __reduce__ = _reduce

    @property
    def traps(self) -> bool:
        """An int ``//`` or ``%``: raises where its divisor is 0."""
        return self.op in INT_TRAPPING and self.type is Type.INT

    def _intern_key(self) -> tuple:
        return (self.op, self.type, _uids(self.args), self.span if self.traps else None)


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
class Event:
    """``when COND { x = e; flux H[..] += v }`` or ``stop when COND`` (``stop``): see the
    Events section of docs/language.md. ``assigns`` are (state index, value) in written
    order, every value evaluated on the state at the event before any is made;
    ``block`` is this event's position among the ``when`` blocks (event_counts'
    last axis), None for a stop."""

    cond: Expr                              # BOOL
    assigns: tuple[tuple[int, Expr], ...] = ()
    flux: tuple[Flux, ...] = ()
    stop: bool = False
    block: int | None = None
    span: Span | None = _span()


@dataclass(frozen=True)
class Observer:
    """``observe NAME = KIND(expr)``: a statistic of each trajectory (docs/language.md,
    Observers). ``kind`` is one of ``OBSERVER_KINDS``; ``expr`` is FLOAT (BOOL for
    ``first``). ir/observers.py lowers them to hidden states."""

    name: str
    kind: str
    expr: Expr
    span: Span | None = _span()


OBSERVER_KINDS = ("peak", "trough", "integral", "average", "first")


@dataclass(frozen=True)
class Adaptive:
    """The arguments of an adaptive method's solve statement (None: not written there;
    its default or a call-time value applies)."""
    t1: Expr | None = None
    rtol: Expr | None = None
    atol: Expr | None = None
    dt0: Expr | None = None
    dtmax: Expr | None = None
    max_steps: Expr | None = None   # INT

    NAMES = ("t1", "rtol", "atol", "dt0", "dtmax", "max_steps")

    def exprs(self) -> list:
        return [getattr(self, n) for n in self.NAMES]


@dataclass(frozen=True)
class Noise:
    """``noise xi``: a standard white noise, independent per trajectory. The Ito SDE is
    ``dX_i = F_i dt + sum_k G_ik dW_k``: ``Field.derivs`` hold the drifts F, and each
    noise its column G_k (``diffusion``, one entry per state, None where the noise
    is absent). ``slope`` (``milstein`` only): dG_ik/dx_i, per state, None where absent.
    ``index`` is the noise's position in declaration order (the counter word k)."""

    name: str
    index: int
    diffusion: tuple["Expr | None", ...]
    slope: tuple["Expr | None", ...] = ()
    span: Span | None = _span()


@dataclass(frozen=True)
class Solver:
    method: str
    tableau: Tableau
    dt: Expr                    # over Const, Sym(PARAM) (scalar) and Sym(DIM); adaptive: 0
    steps: Expr                 # INT; adaptive: 0
    t0: Expr
    span: Span | None = _span()
    adaptive: Adaptive | None = None    # an adaptive method's arguments (ir/embedded.py)
    # a fixed-step method run for save_at (dense output): a backend may build another
    # kernel for it (the GLSL backend: templates/adaptive.glsl.j2 with fixed steps)
    dense: bool = False


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
    noises: tuple[Noise, ...] = ()      # stochastic fields (declaration order)
    events: tuple[Event, ...] = ()      # `when` blocks and `stop when`, in written order
    # a Rosenbrock method's (rodas4) dF/dh and dF/dt: ir.jacobian.Jacobian, derived from
    # ``derivs`` by passes.optimize (None for every other method)
    jacobian: object = None
    # True when the field has no `grid` statement (its grid is the implicit `grid i < N`):
    # a call may then pass a batch of any shape, run flattened (call/batch.py)
    implicit_grid: bool = False
    # the states an adaptive method's error norm (and first step) measures: the first
    # ``error_states`` (None: all). A field joined with its sensitivities
    # (ir/sensitivity.py) measures its own states only, so its steps are theirs.
    error_states: int | None = None
    # `observe` statements, in written order (ir/observers.py lowers them to hidden states)
    observers: tuple[Observer, ...] = ()
    # a lowered field (ir/observers.py): its hidden observer states' step-end rules
    # (ir.observers.Rule), applied by the backend at t0, every accepted step's end and
    # just before and after every event
    observer_rules: tuple = ()

    @property
    def n_error(self) -> int:
        """How many states (the first ones) the error norm measures."""
        return len(self.states) if self.error_states is None else self.error_states

    @property
    def n_when(self) -> int:
        """How many `when` blocks (the last axis of Solution.event_counts)."""
        return sum(1 for e in self.events if not e.stop)

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
