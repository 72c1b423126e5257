"""GLSL's spellings (the word table of field expressions is backends/shader/dialect.py)."""
from __future__ import annotations

from ..printer import Target

GLSL = Target(
    language="glsl",
    precise="precise {T} {name} = {value};",
    builtins={"min": "min({0}, {1})", "max": "max({0}, {1})", "abs": "abs({0})",
              "sqrt": "sqrt({0})", "isnan": "isnan({0})", "isinf": "isinf({0})",
              "root": "vg_root({0}, {1})",              # templates/root.glsl.j2
              "basin_fold": "vg_basin_fold({0}, {1})"},
    accurate_pow=False,         # no double pow; float pow is not correctly rounded
)
