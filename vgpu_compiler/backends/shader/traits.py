"""What the printer (render.py) asks of an IR node: where it is in the text, and
whether it may be computed where its value is not needed. (Value numbers and the
walk itself are ir/walk.py's.)"""
from __future__ import annotations

from ...errors import Span
from ...ir.nodes import Apply, Expr, Load
from ...ir.ops import Op, Type
from ...ir.walk import children


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
