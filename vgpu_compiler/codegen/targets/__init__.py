"""The targets: each language's spellings for the one printer (codegen/printer.py)."""
from __future__ import annotations

from ..printer import Printer, Target
from .c import C
from .glsl import GLSL
from .wgsl import WGSL

TARGETS = {t.language: t for t in (GLSL, WGSL, C)}


def printer(dialect, splices: dict | None = None) -> Printer:
    """The printer for a kernel's dialect (its ``language`` names the target)."""
    return Printer(TARGETS[dialect.language], dialect, splices)


__all__ = ["TARGETS", "Target", "printer"]
