"""WGSL's words: codegen's WGSL target (codegen/targets/wgsl.py: GLSL's table with
WGSL's entries replaced, and why each differs), under the names this backend uses."""
from __future__ import annotations

from ...codegen.targets.wgsl import DIALECTS, WGSL

__all__ = ["WGSL", "DIALECTS"]
