"""Binding dim symbols from the shapes that carry them (a helper of ``bind``)."""
from __future__ import annotations

import functools

from ..errors import ShapeError
from ..ir.nodes import ArrayDecl, Expr, Extent, Field, Sym
from ..ir.ops import SymKind
from ..ir.walk import walk


class Dims:
    """Dim symbol -> value, remembering where each value came from."""

    def __init__(self, field: Field):
        self.field = field
        self.values: dict[str, int] = {}
        self.source: dict[str, str] = {}

    def bind(self, name: str, value: int, source: str) -> None:
        old = self.values.get(name)
        if old is not None and old != value:
            raise ShapeError(f"dim {name} is {old} from {self.source[name]} "
                             f"but {value} from {source}")
        if old is None:
            self.values[name] = int(value)
            self.source[name] = source

    def match(self, extents: tuple[Extent, ...], shape: tuple[int, ...], source: str) -> None:
        """Bind (or check) each declared extent against the actual length on that axis."""
        for axis, (extent, n) in enumerate(zip(extents, shape)):
            if isinstance(extent, str):
                self.bind(extent, n, f"{source} (axis {axis})")
            elif extent != n:
                raise ShapeError(f"{source} has length {n} on axis {axis}, where the field "
                                 f"declares {extent} (expected shape "
                                 f"{shape_text(extents, '()')}, got {tuple(shape)})")

    def _used(self, name: str) -> str:
        for a in self.field.grid:
            if a.extent == name:
                return "a grid extent (h0, a per-trajectory param or an input could bind it)"
        for kind, decls in (("input", self.field.inputs), ("output", self.field.outputs)):
            for d in decls:
                if name in d.dims:
                    return f"used by {kind} {d.name}{shape_text(d.dims, '[]')}"
        return "used in an expression"

    def extent(self, extent: Extent) -> int:
        return self.values[extent] if isinstance(extent, str) else int(extent)

    def shape(self, decl: ArrayDecl) -> tuple[int, ...]:
        return tuple(self.extent(e) for e in decl.dims)


def shape_text(extents, brackets: str) -> str:
    inner = ", ".join(str(e) for e in extents)
    if brackets == "()" and len(extents) == 1:
        inner += ","
    return f"{brackets[0]}{inner}{brackets[1]}"


@functools.lru_cache(maxsize=1024)
def free_params(expr: Expr) -> tuple[str, ...]:
    """The params an expression names, in order of first appearance. Memoised: bind asks
    for the solve statement's dt, steps and t0 on every call (nodes hash by content,
    with the hash cached)."""
    found: dict[str, None] = {}
    for node in walk(expr):
        if isinstance(node, Sym) and node.kind is SymKind.PARAM:
            found.setdefault(node.name)
    return tuple(found)
