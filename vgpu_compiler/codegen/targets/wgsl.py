"""WGSL's spellings (the word table of field expressions is backends/wgpu/dialect.py)."""
from __future__ import annotations

from ..printer import Target

WGSL = Target(
    language="wgsl",
    let="let {name}: {T} = {value};",
    var="var {name}: {T} = {value};",
    precise="let {name}: {T} = {value};",       # (no `precise`: no fusing in WGSL)
    array="var {name}: array<{T}, {size}>;",
    loop="for (var {var}: i32 = {start}; {var} < {stop}; {var}++) {{",
    builtins={"min": "min({0}, {1})", "max": "max({0}, {1})", "abs": "abs({0})",
              "sqrt": "sqrt({0})", "nonfinite": "vg_ad_bad({0})",
              "root": "vg_root({0}, {1})",      # templates/adaptive.wgsl.j2
              "basin_fold": "vg_basin_fold({0}, {1}, vg_lidx)"},
    accurate_pow=False,
    has_isnan=False,            # the bits are tested (vg_ad_bad)
    stage_zero="vg_zero",
)
