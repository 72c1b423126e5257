"""Value numbers and walks over IR expressions, for the printer (render.py).

Nothing here recurses: every walk keeps an explicit stack, so expressions nested
thousands deep are numbered and walked without Python's recursion limit.
"""
from __future__ import annotations

from ...errors import Span
from ...ir.nodes import Apply, Const, CoupledAt, Expr, Load, Reduce, Sym
from ...ir.ops import Op, Type
from ...ir.walk import children, walk


class Numbering:
    """Value numbers: structurally equal nodes (spans aside) get one number, computed
    children first (ir.walk) without hashing or comparing deep trees."""

    def __init__(self):
        self._by_uid: dict[int, int] = {}
        self._by_key: dict[tuple, int] = {}

    def __call__(self, e: Expr) -> int:
        numbers = self._by_uid
        for node in walk(e, skip=lambda n: n.uid in numbers):
            key = (shallow(node), tuple(numbers[k.uid] for k in children(node)))
            numbers[node.uid] = self._by_key.setdefault(key, len(self._by_key))
        return numbers[e.uid]


def shallow(e: Expr) -> tuple:
    """What a node is apart from its children and span (repr keeps -0.0 and nan apart)."""
    if isinstance(e, Const):
        return ("const", e.type, repr(e.value))
    if isinstance(e, Sym):
        return ("sym", e.kind, e.name, e.type)
    if isinstance(e, Load):
        return ("load", e.array)
    if isinstance(e, CoupledAt):
        return ("at", e.name)
    if isinstance(e, Reduce):
        return ("reduce", e.op, e.name)
    return ("apply", e.op, e.type)


def first_span(e: Expr) -> Span | None:
    """The span of ``e``, or of its first descendant that has one."""
    stack = [e]
    while stack:
        x = stack.pop()
        if getattr(x, "span", None) is not None:
            return x.span
        stack.extend(reversed(children(x)))
    return None


def is_pure_node(e: Expr) -> bool:
    if isinstance(e, Load):
        return False
    if isinstance(e, Apply) and e.op in (Op.FLOORDIV, Op.MOD) and e.type is Type.INT:
        return False
    return True
