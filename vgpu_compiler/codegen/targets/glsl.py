"""GLSL's words: the C family's tables (targets/base.py) are GLSL's; float64 overrides
the entries that differ (``double``, the ``lf`` suffix, ``vg_ceil``, the ops OpenGL has
no double version of)."""
from __future__ import annotations

from dataclasses import replace

from ...ir.ops import Op
from .base import FLOAT_OPS, Target

# OpenGL's double type has no transcendental functions; exp, log and log2 are helpers
# here (vg_dexp, vg_dlog, vg_dlog2: fdlibm's), the rest are refused (docs/language.md).
FLOAT64_MISSING = frozenset({Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.ATAN2,
                             Op.SINH, Op.COSH, Op.TANH})

GLSL_FLOAT32 = Target(
    "glsl", "float32", "float", "", adaptive_lanes=2,
    precise="precise {T} {name} = {value};", precise_var="precise {T} {name} = {value};",
    precise_array="precise {T} {name}[{size}];",
    builtins={"min": "min({0}, {1})", "max": "max({0}, {1})", "abs": "abs({0})",
              "sqrt": "sqrt({0})", "isnan": "isnan({0})", "isinf": "isinf({0})",
              "root": "vg_root({0}, {1})",              # templates/root.glsl.j2
              "basin_fold": "vg_basin_fold({0}, {1})",
              "local_index": "gl_LocalInvocationIndex",
              "mulhilo": "umulExtended({0}, {1}, {2}, {3})",
              "sqrt32": "sqrt({0})", "log32": "log({0})", "cos32": "cos({0})",
              # the helpers built once (codegen/build/helpers.py)
              "to_f64": "double({0})", "to_uint": "uint({0})", "f32": "float({0})",
              "cfmod": "vg_cfmod({0}, {1})", "signbit": "vg_signbit({0})",
              "neg_wrap": "(-{0})", "min_plain": "min({0}, {1})", "max_plain": "max({0}, {1})",
              "float_bits": "uintBitsToFloat({0})", "to_int": "int({0})",
              "bits": "floatBitsToUint({0})",
              "high_word": {"float32": "floatBitsToUint({0})",
                            "float64": "unpackDouble2x32({0}).y"},
              "vec3": "vec3({0}, {1}, {2})",
              "float_high": {"float32": "uintBitsToFloat({0})",
                             "float64": "packDouble2x32(uvec2(0u, {0}))"},
              "f64_high": "unpackDouble2x32({0}).y", "f64_low": "unpackDouble2x32({0}).x",
              "f64_words": "packDouble2x32(uvec2({0}, {1}))"},
    accurate_pow=False)         # no double pow; float pow is not correctly rounded
GLSL_FLOAT64 = replace(
    GLSL_FLOAT32, dtype="float64", F="double", suffix="lf",   # pow: integer powers only
    float_ops={**{op: f for op, f in FLOAT_OPS.items() if op is not Op.POW},
               Op.CEIL: "vg_ceil({0})", Op.EXP: "vg_dexp({0})", Op.LOG: "vg_dlog({0})",
               Op.LOG2: "vg_dlog2({0})"},
    forbidden=FLOAT64_MISSING)
DIALECTS = {"float32": GLSL_FLOAT32, "float64": GLSL_FLOAT64}
