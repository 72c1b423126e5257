"""The targets: each language's words for both printers (targets/base.py: the table and
the C family's defaults; glsl.py, wgsl.py, c.py: each language's overrides), one per
working dtype."""
from __future__ import annotations

from ..printer import Printer
from .base import Target
from .c import C_FLOAT32, C_FLOAT64
from .glsl import GLSL_FLOAT32, GLSL_FLOAT64
from .wgsl import WGSL

# language -> dtype -> target
TARGETS = {"glsl": {"float32": GLSL_FLOAT32, "float64": GLSL_FLOAT64},
           "wgsl": {"float32": WGSL},
           "c": {"float32": C_FLOAT32, "float64": C_FLOAT64}}


def printer(target: Target, splices: dict | None = None) -> Printer:
    """The statement printer of ``target`` (a kernel's dialect)."""
    return Printer(target, splices)


__all__ = ["TARGETS", "Target", "printer"]
