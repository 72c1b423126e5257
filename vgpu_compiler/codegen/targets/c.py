"""C's spellings (the word table of field expressions is backends/cpu/dialect.py)."""
from __future__ import annotations

from ..printer import Target

C = Target(
    language="c",
    let="const {T} {name} = {value};",
    builtins={"min": "vg_min({0}, {1})", "max": "vg_max({0}, {1})", "abs": "vg_fabs({0})",
              "sqrt": "vg_sqrt({0})", "isnan": "isnan({0})", "isinf": "isinf({0})",
              "pow": {"float32": "powf({0}, {1})", "float64": "pow({0}, {1})"}},
    accurate_pow=True,          # the C library's pow of the working dtype
    lane_block=True,            # templates/adaptive.c.j2: loops over a block of lanes
)
