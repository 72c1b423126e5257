"""The C dialect: codegen's C target (codegen/targets/c.py: GLSL's table with C's
spellings), under the names this backend (and cuda, through its templates) uses."""
from __future__ import annotations

from ...codegen.targets.c import C_FLOAT32, C_FLOAT64, DIALECTS

__all__ = ["C_FLOAT32", "C_FLOAT64", "DIALECTS"]
