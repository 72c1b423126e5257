"""Part of stage 3: collect the declarations of one field into a name table.

Every name of a field (param, input, output, state, let, dim, grid or basin
index, coupled) lives in one namespace; built-in and function names are
reserved. This module sorts the statements, registers names, and settles the
grid and the basin; ``exprs`` types expressions against the result and
``check`` assembles the IR field.

A basin may have fewer dims than the grid: it then covers the grid's last
dims. The IR basin always has the grid's rank: the leading axes get extent 1
and fresh index names the program never sees (``Scope.basin``), and a coupled
read ``v[l - 1]`` written with the declared rank reads ``v[0, l - 1]``
(``Scope.basin_index``). Every backend then sees one kind of basin.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Union

from ..errors import DeclarationError, NameError_, Span
from ..ir.nodes import Axis, Const, Expr
from ..ir.ops import FUNCTIONS, INT32_MAX, Type
from . import ast as A

BUILTINS = frozenset({"t", "dt", "step"})
SPECIAL_FUNCTIONS = frozenset({"init", "sum", "mean", "interp"})
RESERVED_FUNCTIONS = frozenset(FUNCTIONS) | SPECIAL_FUNCTIONS
MAX_BASIN = 256
MAX_GRID_RANK = 3


@dataclass(frozen=True)
class Binding:
    kind: str                   # param input output state let dim grid basin coupled noise
    span: Span
    decl: object = None         # the AST declaration (an ArrayDecl, a LetDecl ...)


@dataclass
class Scope:
    """Every declaration of one field, sorted by kind, in source order."""

    fielddef: A.FieldDef
    names: dict[str, Binding] = field(default_factory=dict)
    params: list[A.ParamDecl] = field(default_factory=list)
    inputs: list[A.ArrayDecl] = field(default_factory=list)
    outputs: list[A.ArrayDecl] = field(default_factory=list)
    states: list[A.StateItem] = field(default_factory=list)
    lets: dict[str, A.LetDecl] = field(default_factory=dict)
    derivs: list[A.Deriv] = field(default_factory=list)
    coupled: list[A.CoupledItem] = field(default_factory=list)
    collapse: list[A.CollapseDecl] = field(default_factory=list)
    flux: list[A.FluxStmt] = field(default_factory=list)
    solve: list[A.SolveDecl] = field(default_factory=list)
    noises: list[A.Name] = field(default_factory=list)
    events: list = field(default_factory=list)     # WhenBlock and StopWhen, in order
    observers: list = field(default_factory=list)  # ObserveDecl, in order
    grid_decl: A.GridDecl | None = None
    basin_decl: A.GridDecl | None = None
    dims: list[str] = field(default_factory=list)
    grid: tuple[Axis, ...] = ()
    basin: tuple[Axis, ...] | None = None

    def kind(self, name: str) -> str | None:
        binding = self.names.get(name)
        return binding.kind if binding else None

    def array(self, name: str) -> A.ArrayDecl:
        return self.names[name].decl

    @property
    def basin_rank(self) -> int | None:
        """The basin's rank as declared (a coupled read takes this many indices)."""
        return len(self.basin_decl.axes) if self.basin is not None else None

    def basin_index(self, index: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """A coupled read's indices in the declared rank -> the IR basin's rank: a basin
        with fewer dims than the grid is position 0 on the leading (extent 1) axes."""
        pad = len(self.basin or ()) - len(index)
        return (Const(0, Type.INT),) * pad + tuple(index)


ARTICLE = {"param": "a param", "input": "an input", "output": "an output", "state": "a state",
           "let": "a let", "dim": "a dim symbol", "grid": "a grid index",
           "basin": "a basin index", "coupled": "a coupled name", "noise": "a noise",
           "observer": "an observer"}


def describe(kind: str | None) -> str:
    return ARTICLE.get(kind or "", "unknown")


def declare(scope: Scope, name: A.Name, kind: str, decl: object = None) -> None:
    if name.name in BUILTINS:
        raise NameError_(f"`{name.name}` is a built-in name (the time, step size or step "
                         "number) and cannot be declared; choose another name", span=name.span)
    if name.name in RESERVED_FUNCTIONS:
        raise NameError_(f"`{name.name}` is a function name and cannot be declared; "
                         "choose another name", span=name.span)
    old = scope.names.get(name.name)
    if old is not None and not (kind == "dim" and old.kind == "dim"):
        raise NameError_(f"`{name.name}` is already declared as {describe(old.kind)} "
                         f"(line {old.span.line}); choose another name", span=name.span)
    if old is None:
        scope.names[name.name] = Binding(kind, name.span, decl)
        if kind == "dim":
            scope.dims.append(name.name)


def _extent(scope: Scope, ext: Union[A.Name, A.Num], what: str) -> Union[str, int]:
    if isinstance(ext, A.Name):
        declare(scope, ext, "dim")
        return ext.name
    if not ext.is_int or not 1 <= ext.value <= INT32_MAX:
        raise DeclarationError(f"{what} sizes are dim symbols or int literals from 1 to "
                               f"{INT32_MAX}", span=ext.span)
    return ext.value


def _one(scope: Scope, current, stmt, what: str):
    if current is not None:
        raise DeclarationError(f"a second `{what}` statement; a field has at most one "
                               f"(the first is on line {current.span.line})", span=stmt.span)
    return stmt


def _collect(scope: Scope, stmt: A.Statement) -> None:
    if isinstance(stmt, A.ParamDecl):
        declare(scope, stmt.name, "param", stmt)
        scope.params.append(stmt)
    elif isinstance(stmt, A.ArraysDecl):
        for arr in stmt.arrays:
            declare(scope, arr.name, arr.kind, arr)
            for ext in arr.dims:
                _extent(scope, ext, f"{arr.kind} `{arr.name.name}`")
            (scope.inputs if arr.kind == "input" else scope.outputs).append(arr)
    elif isinstance(stmt, A.StateDecl):
        for item in stmt.items:
            declare(scope, item.name, "state", item)
            scope.states.append(item)
    elif isinstance(stmt, A.LetDecl):
        declare(scope, stmt.name, "let", stmt)
        scope.lets[stmt.name.name] = stmt
    elif isinstance(stmt, A.CoupledDecl):
        for item in stmt.items:
            declare(scope, item.name, "coupled", item)
            scope.coupled.append(item)
    elif isinstance(stmt, A.NoiseDecl):
        for name in stmt.names:
            declare(scope, name, "noise", stmt)
            scope.noises.append(name)
    elif isinstance(stmt, A.GridDecl) and stmt.kind == "grid":
        scope.grid_decl = _one(scope, scope.grid_decl, stmt, "grid")
        scope.grid = _grid(scope)
    elif isinstance(stmt, A.GridDecl):
        scope.basin_decl = _one(scope, scope.basin_decl, stmt, "basin")
    elif isinstance(stmt, (A.WhenBlock, A.StopWhen)):
        scope.events.append(stmt)
    elif isinstance(stmt, A.ObserveDecl):
        declare(scope, stmt.name, "observer", stmt)
        scope.observers.append(stmt)
    else:
        bucket = {A.Deriv: scope.derivs, A.CollapseDecl: scope.collapse,
                  A.FluxStmt: scope.flux, A.SolveDecl: scope.solve}[type(stmt)]
        bucket.append(stmt)


def _grid(scope: Scope) -> tuple[Axis, ...]:
    decl = scope.grid_decl
    if not 1 <= len(decl.axes) <= MAX_GRID_RANK:
        raise DeclarationError(f"a grid has 1 to {MAX_GRID_RANK} axes, not {len(decl.axes)}",
                               span=decl.span)
    axes = []
    for ax in decl.axes:
        extent = _extent(scope, ax.extent, "grid")
        declare(scope, ax.index, "grid", ax)
        axes.append(Axis(ax.index.name, extent))
    return tuple(axes)


def _fresh(scope: Scope, base: str) -> str:
    name = base
    while name in scope.names or name in BUILTINS or name in RESERVED_FUNCTIONS:
        name += "_"
    return name


def _implicit_grid(scope: Scope) -> tuple[Axis, ...]:
    """``grid i < N``. Decision: a name `i` or `N` the field already uses for
    something else keeps its meaning, and the implicit grid takes a fresh name
    (``i_``, ``N_`` ...); an existing dim symbol `N` is the grid size itself."""
    span = scope.fielddef.name.span
    index = _fresh(scope, "i")
    extent = "N" if scope.kind("N") in (None, "dim") else _fresh(scope, "N")
    declare(scope, A.Name(extent, span), "dim")
    declare(scope, A.Name(index, span), "grid")
    return (Axis(index, extent),)


def _basin(scope: Scope) -> tuple[Axis, ...] | None:
    decl = scope.basin_decl
    if decl is None:
        return None
    if len(decl.axes) > len(scope.grid):
        raise DeclarationError(f"the basin has rank {len(decl.axes)} but the grid has rank "
                               f"{len(scope.grid)}; a basin has at most the grid's rank (with "
                               "fewer, it covers the grid's last dims)", span=decl.span)
    axes = []
    for ax in decl.axes:
        if not isinstance(ax.extent, A.Num):
            raise DeclarationError("basin sizes must be int literals (a workgroup size is "
                                   "fixed when the kernel is compiled)", span=ax.extent.span)
        size = _extent(scope, ax.extent, "basin")
        declare(scope, ax.index, "basin", ax)
        axes.append(Axis(ax.index.name, size))
    total = prod(int(a.extent) for a in axes)
    if total > MAX_BASIN:
        raise DeclarationError(f"a basin holds at most {MAX_BASIN} trajectories (a portable "
                               f"workgroup size); this one holds {total}", span=decl.span)
    return _leading_axes(scope, len(scope.grid) - len(axes)) + tuple(axes)


def _leading_axes(scope: Scope, count: int) -> tuple[Axis, ...]:
    """Extent-1 basin axes over the first ``count`` grid axes (each grid row is its own
    set of basins), named ``<grid index>_in_basin`` or a fresh variant; undeclared,
    so the program never sees them."""
    taken, out = set(), []
    for g in scope.grid[:count]:
        name = _fresh(scope, f"{g.index}_in_basin")
        while name in taken:
            name += "_"
        taken.add(name)
        out.append(Axis(name, 1))
    return tuple(out)


def build_scope(fielddef: A.FieldDef) -> Scope:
    """Register every declaration of a field; settle its dims, grid and basin."""
    scope = Scope(fielddef)
    for stmt in fielddef.body:
        _collect(scope, stmt)
    if scope.grid_decl is None:
        scope.grid = _implicit_grid(scope)
    scope.basin = _basin(scope)
    return scope
