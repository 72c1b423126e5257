"""Symbolic ranges of int index expressions: which reads and flux writes are in range.

``Ranges(field).check(index, extents, where)`` says, for every axis of one
``A[e1, e2]`` (or ``H[e] += ...``), whether ``0 <= e < extent`` holds for
EVERY call of the field — whatever shapes, dims, dt, steps or t0 the call
binds — or holds given one run-time condition on the call's ``steps``, or is
not proven.

A value is described by sets of lower and upper bounds that are affine in the
dim symbols and the call's ``steps`` (``[0, M - 1]``), plus a plain int32
interval that guards against wrap-around: ints wrap on overflow, so an
operation whose plain interval leaves int32 forgets every bound.

The facts, all true wherever an index is evaluated (on an active lane):
- a dim is an int in 0 .. 2^31-1; a dim that is a grid extent is >= 1 (a grid
  with extent 0 has no trajectories, so nothing is read at all);
- a grid index on an axis of extent X is in [0, X - 1], a basin index in
  [0, size - 1], an int literal is itself;
- ``step`` is in [0, steps - 1] in the stages (and steps >= 1 there), in
  [1, steps] in the collapse vote, in [0, steps] in flux, 0 in start values.
  ``steps`` is the call's (the solve statement's, or the ``steps=`` override),
  so a proof that needs ``steps <= K`` is a run-time condition, never a static
  proof: ``Verdict.condition``.
- ``e % m`` with m >= 1 is in [0, m - 1] (floor mod); ``clamp``, ``min``,
  ``max``, ``where``, ``abs``, ``+``, ``-``, ``*`` by a constant and ``//`` of
  non-negatives follow from their operands.

No walk recurses: ranges are computed children first (``ir.walk.walk``) and
memoised by node uid (no deep hash or comparison).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

from .nodes import Apply, Const, Expr, Extent, Field, Sym
from .ops import Op, SymKind, Type
from .walk import walk

INT_MIN, INT_MAX = -2**31, 2**31 - 1
STEPS = "#steps"         # the call's steps, in affine bounds (no dim can have this name)
MAX_BOUNDS = 4           # bounds kept per side of a range


class Where(Enum):
    """Where an expression is evaluated: fixes the range of ``step``."""

    STAGE = "stage"          # step in [0, steps - 1], steps >= 1
    COLLAPSE = "collapse"    # step in [1, steps], steps >= 1
    FLUX = "flux"            # step in [0, steps]
    INIT = "init"            # step = 0 (start values cannot name step)
    AFTER = "after"          # collapse or flux: step in [0, steps]


# --- affine forms ------------------------------------------------------------------
@dataclass(frozen=True)
class Affine:
    """``const + sum(coef * symbol)``; symbols are dim names and STEPS."""

    terms: tuple[tuple[str, int], ...] = ()    # sorted by symbol, no zero coefficients
    const: int = 0

    @staticmethod
    def of(terms: Mapping[str, int], const: int = 0) -> "Affine":
        return Affine(tuple(sorted((s, c) for s, c in terms.items() if c)), const)

    @staticmethod
    def sym(name: str) -> "Affine":
        return Affine(((name, 1),), 0)

    @staticmethod
    def extent(x: Extent) -> "Affine":
        return Affine((), int(x)) if isinstance(x, int) else Affine.sym(x)

    def __add__(self, other: "Affine") -> "Affine":
        terms = dict(self.terms)
        for s, c in other.terms:
            terms[s] = terms.get(s, 0) + c
        return Affine.of(terms, self.const + other.const)

    def scale(self, k: int) -> "Affine":
        return Affine.of({s: c * k for s, c in self.terms}, self.const * k)

    def __neg__(self) -> "Affine":
        return self.scale(-1)

    def __sub__(self, other: "Affine") -> "Affine":
        return self + (-other)

    def shift(self, k: int) -> "Affine":
        return Affine(self.terms, self.const + k)

    def symbols(self) -> set[str]:
        return {s for s, _ in self.terms}

    def value(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * int(env[s]) for s, c in self.terms)

    def __str__(self) -> str:
        parts = []
        for s, c in self.terms:
            mag = "" if abs(c) == 1 else f"{abs(c)} * "
            parts.append(("- " if c < 0 else "+ ") + mag + s)
        if self.const or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + str(abs(self.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


# --- abstract values --------------------------------------------------------------------
@dataclass(frozen=True)
class Range:
    """lo <= every bound in ``lo``; every bound in ``hi`` >= the value; nlo <= value <= nhi."""

    lo: tuple[Affine, ...]
    hi: tuple[Affine, ...]
    nlo: int
    nhi: int


TOP = Range((), (), INT_MIN, INT_MAX)


def _keep(bounds: Iterable[Affine], plain: int) -> tuple[Affine, ...]:
    """The first few distinct bounds, and always the plain one."""
    out: list[Affine] = []
    for b in bounds:
        if b not in out and not (not b.terms and b.const == plain):
            out.append(b)
    return (*out[:MAX_BOUNDS - 1], Affine((), plain))


@dataclass(frozen=True)
class Verdict:
    """One axis: ``proven`` for every call; else in range when ``condition <= 0`` holds for
    the call (an affine form in STEPS and dims), or not proven (``condition`` None)."""

    proven: bool
    reason: str = ""                     # e.g. "i < M", for a comment
    condition: Affine | None = None

    @property
    def conditional(self) -> bool:
        return not self.proven and self.condition is not None


class Ranges:
    """Index range facts of one field."""

    def __init__(self, field: Field):
        self.field = field
        self.grid = {a.index: a.extent for a in field.grid}
        self.basin = {a.index: int(a.extent) for a in field.basin or ()}
        positive = {a.extent for a in field.grid if isinstance(a.extent, str)}
        self.dim_lo = {d: (1 if d in positive else 0) for d in field.dims}
        self.arrays = {a.name: a.dims for a in (*field.inputs, *field.outputs)}

    # the box of the symbols ------------------------------------------------------------
    def _box(self, where: Where) -> dict[str, tuple[int, int]]:
        box = {d: (lo, INT_MAX) for d, lo in self.dim_lo.items()}
        box[STEPS] = (1 if where in (Where.STAGE, Where.COLLAPSE) else 0, INT_MAX)
        return box

    @staticmethod
    def _span(a: Affine, box) -> tuple[int, int]:
        lo = hi = a.const
        for s, c in a.terms:
            blo, bhi = box[s]
            lo += c * (blo if c > 0 else bhi)
            hi += c * (bhi if c > 0 else blo)
        return lo, hi

    # evaluation ----------------------------------------------------------------------
    def range(self, e: Expr, where: Where) -> Range:
        return _Eval(self, where).range(e)

    def check(self, index: tuple[Expr, ...], extents: tuple[Extent, ...],
              where: Where) -> tuple[Verdict, ...]:
        ev = _Eval(self, where)
        return tuple(ev.verdict(e, x) for e, x in zip(index, extents))

    def load(self, array: str, index: tuple[Expr, ...], where: Where) -> tuple[Verdict, ...]:
        return self.check(index, self.arrays[array], where)


class _Eval:
    def __init__(self, r: Ranges, where: Where):
        self.r, self.where = r, where
        self.box = r._box(where)
        self.memo: dict[int, Range] = {}        # node uid -> range

    # proofs over the box ---------------------------------------------------------------
    def le(self, a: Affine, b: Affine) -> bool:
        """a <= b for every value of the symbols."""
        return Ranges._span(a - b, self.box)[1] <= 0

    def value(self, lo: Iterable[Affine], hi: Iterable[Affine], nlo: int, nhi: int) -> Range:
        if nlo < INT_MIN or nhi > INT_MAX:
            return TOP
        lo, hi = list(lo), list(hi)
        for b in lo:     # tighten the plain interval by the bounds' own extremes
            nlo = max(nlo, Ranges._span(b, self.box)[0])
        for b in hi:
            nhi = min(nhi, Ranges._span(b, self.box)[1])
        return Range(_keep(lo, nlo), _keep(hi, nhi), nlo, nhi)

    def const(self, c: int) -> Range:
        return self.value([Affine((), c)], [Affine((), c)], c, c)

    # the rules -------------------------------------------------------------------------
    def range(self, e: Expr) -> Range:
        """The range of ``e``; its subtrees first (``ir.walk``), so ``_range`` finds its
        operands' ranges memoised."""
        memo = self.memo
        for node in walk(e, skip=lambda n: n.uid in memo, kids=_int_operands):
            memo[node.uid] = self._range(node)
        return memo[e.uid]

    def _range(self, e: Expr) -> Range:
        if e.type is not Type.INT:
            return TOP
        if isinstance(e, Const):
            return self.const(int(e.value))
        if isinstance(e, Sym):
            return self._sym(e)
        if isinstance(e, Apply):
            return self._apply(e)
        return TOP

    def _sym(self, s: Sym) -> Range:
        if s.kind is SymKind.DIM and s.name in self.r.dim_lo:
            d = Affine.sym(s.name)
            return self.value([d], [d], self.r.dim_lo[s.name], INT_MAX)
        if s.kind is SymKind.GRID and s.name in self.r.grid:
            top = Affine.extent(self.r.grid[s.name]).shift(-1)
            return self.value([Affine()], [top], 0, INT_MAX - 1)
        if s.kind is SymKind.BASIN and s.name in self.r.basin:
            return self.value([Affine()], [Affine((), self.r.basin[s.name] - 1)], 0,
                              self.r.basin[s.name] - 1)
        if s.kind is SymKind.STEP:
            steps = Affine.sym(STEPS)
            if self.where is Where.INIT:
                return self.const(0)
            if self.where is Where.STAGE:
                return self.value([Affine()], [steps.shift(-1)], 0, INT_MAX - 1)
            if self.where is Where.COLLAPSE:
                return self.value([Affine((), 1)], [steps], 1, INT_MAX)
            return self.value([Affine()], [steps], 0, INT_MAX)
        return TOP

    def _apply(self, e: Apply) -> Range:
        op, args = e.op, e.args
        if op is Op.TO_INT:
            return self.range(args[0]) if args[0].type is Type.INT else TOP
        if op is Op.WHERE:
            return self.join(self.range(args[1]), self.range(args[2]))
        rs = [self.range(a) for a in args]
        if op is Op.ADD:
            a, b = rs
            return self.value([x + y for x in a.lo for y in b.lo],
                              [x + y for x in a.hi for y in b.hi], a.nlo + b.nlo, a.nhi + b.nhi)
        if op is Op.SUB:
            a, b = rs
            return self.value([x - y for x in a.lo for y in b.hi],
                              [x - y for x in a.hi for y in b.lo], a.nlo - b.nhi, a.nhi - b.nlo)
        if op is Op.NEG:
            (a,) = rs
            return self.value([-x for x in a.hi], [-x for x in a.lo], -a.nhi, -a.nlo)
        if op is Op.MUL:
            return self.mul(*rs)
        if op is Op.MOD:
            return self.mod(*rs)
        if op is Op.FLOORDIV:
            a, b = rs
            if a.nlo >= 0 and b.nlo >= 1:       # 0 <= a // b <= a
                return self.value([Affine()], a.hi, 0, a.nhi // b.nlo)
            return TOP
        if op is Op.MIN:
            return self.min(*rs)
        if op is Op.MAX:
            return self.max(*rs)
        if op is Op.CLAMP:            # min(max(x, lo), hi), as both backends compute it
            x, lo, hi = rs
            return self.min(self.max(x, lo), hi)
        if op is Op.ABS:
            (a,) = rs
            if a.nlo >= 0:
                return a
            if a.nhi <= 0 and a.nlo > INT_MIN:
                return self.value([-x for x in a.hi], [-x for x in a.lo], -a.nhi, -a.nlo)
            if a.nlo > INT_MIN:
                return self.value([Affine()], [], 0, max(-a.nlo, a.nhi))
            return TOP
        if op is Op.SIGN:
            (a,) = rs
            lo = -1 if a.nlo < 0 else (0 if a.nlo == 0 else 1)
            hi = 1 if a.nhi > 0 else (0 if a.nhi == 0 else -1)
            return self.value([], [], lo, hi)
        return TOP

    def mul(self, a: Range, b: Range) -> Range:
        if a.nlo == a.nhi:
            a, b = b, a
        products = [a.nlo * b.nlo, a.nlo * b.nhi, a.nhi * b.nlo, a.nhi * b.nhi]
        if b.nlo != b.nhi:            # no bounds for a product of two variables
            return self.value([], [], min(products), max(products))
        k = b.nlo
        lo, hi = (a.lo, a.hi) if k >= 0 else (a.hi, a.lo)
        return self.value([x.scale(k) for x in lo], [x.scale(k) for x in hi],
                          min(products), max(products))

    def mod(self, a: Range, m: Range) -> Range:
        if m.nlo >= 1:                # floor mod by a positive m: 0 .. m - 1 (and <= a if a >= 0)
            hi = [x.shift(-1) for x in m.hi] + (list(a.hi) if a.nlo >= 0 else [])
            return self.value([Affine()], hi, 0, m.nhi - 1)
        if m.nhi <= -1:               # by a negative m: m + 1 .. 0
            return self.value([x.shift(1) for x in m.lo], [Affine()], m.nlo + 1, 0)
        return TOP                    # m may be 0: a run-time error, value unspecified

    def upper(self, xs: tuple[Affine, ...], ys: tuple[Affine, ...]) -> list[Affine]:
        """Bounds u with x <= u and y <= u for a bound x of xs and y of ys: the larger of
        the two where provable, else x raised by the most y can exceed it (i - 1 and 0
        with i <= N - 1, N >= 1: N - 2 + 1 = N - 1)."""
        exact, raised = [], []
        for x in xs:
            for y in ys:
                if self.le(y, x):
                    exact.append(x)
                elif self.le(x, y):
                    exact.append(y)
                else:
                    raised.append(x.shift(Ranges._span(y - x, self.box)[1]))
                    raised.append(y.shift(Ranges._span(x - y, self.box)[1]))
        return exact + raised

    def lower(self, xs: tuple[Affine, ...], ys: tuple[Affine, ...]) -> list[Affine]:
        """Bounds l with l <= x and l <= y (as ``upper``, mirrored)."""
        return [-u for u in self.upper(tuple(-x for x in xs), tuple(-y for y in ys))]

    def min(self, a: Range, b: Range) -> Range:
        return self.value(self.lower(a.lo, b.lo), (*a.hi, *b.hi),
                          min(a.nlo, b.nlo), min(a.nhi, b.nhi))

    def max(self, a: Range, b: Range) -> Range:
        return self.value((*a.lo, *b.lo), self.upper(a.hi, b.hi),
                          max(a.nlo, b.nlo), max(a.nhi, b.nhi))

    def join(self, a: Range, b: Range) -> Range:
        """Either a or b."""
        return self.value(self.lower(a.lo, b.lo), self.upper(a.hi, b.hi),
                          min(a.nlo, b.nlo), max(a.nhi, b.nhi))

    # the verdict on one axis ---------------------------------------------------------------
    def verdict(self, e: Expr, extent: Extent) -> Verdict:
        r = self.range(e)
        if r.nlo < 0 and not any(Ranges._span(x, self.box)[0] >= 0 for x in r.lo):
            return Verdict(False)
        top = Affine.extent(extent).shift(-1)
        for h in r.hi:
            if self.le(h, top):
                return Verdict(True, _reason(e, extent))
        for h in r.hi:                # needs the call's steps: a run-time condition
            need = h - top            # in range when need <= 0
            if STEPS in need.symbols() and _checkable(need):
                return Verdict(False, _reason(e, extent), need)
        return Verdict(False)


def _checkable(c: Affine) -> bool:
    """``c <= 0`` is a condition the kernel can test exactly in int32: steps + k <= D."""
    terms = dict(c.terms)
    dims = [s for s in terms if s != STEPS]
    return (terms.get(STEPS) == 1 and abs(c.const) <= 2**20
            and all(terms[d] == -1 for d in dims) and len(dims) <= 1)


def condition_text(c: Affine, name) -> str:
    """``c <= 0`` as an int32-safe comparison; ``name(symbol)`` names STEPS and the dims."""
    terms = dict(c.terms)
    dims = [s for s in terms if s != STEPS]
    right = name(dims[0]) if dims else "0"
    k = c.const
    left = name(STEPS) if k == 0 else f"{name(STEPS)} {'+' if k > 0 else '-'} {abs(k)}"
    if dims and k > 0:              # steps + k <= D  ->  steps <= D - k (no overflow either way)
        left, right = name(STEPS), f"{right} - {k}"
    elif not dims:
        left, right = name(STEPS), str(-k)
    return f"{left} <= {right}"


def _reason(e: Expr, extent: Extent) -> str:
    return f"{_text(e)} < {extent}"


_INFIX = {Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.MOD}


def _text(root: Expr) -> str:
    """Short source-like text of an int index (for comments), children first."""
    texts: dict[int, str] = {}
    for e in walk(root, kids=_operands):
        texts[e.uid] = _text_of(e, [texts[a.uid] for a in _operands(e)])
    return texts[root.uid]


def _operands(e: Expr) -> tuple[Expr, ...]:
    return e.args if isinstance(e, Apply) else ()


def _int_operands(e: Expr) -> tuple[Expr, ...]:
    """The operands whose ranges an int op's range is made of."""
    return e.args if isinstance(e, Apply) and e.type is Type.INT else ()


def _text_of(e: Expr, args: list[str]) -> str:
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Sym):
        return e.name
    if isinstance(e, Apply):
        if e.op in _INFIX:
            return f"({args[0]} {e.op.value} {args[1]})"
        if e.op is Op.NEG:
            return f"-{args[0]}"
        return f"{e.op.value}({', '.join(args)})"
    return "?"


__all__ = ["Ranges", "Range", "Verdict", "Affine", "Where", "STEPS", "condition_text"]
