"""C's words (C99 + GNU, the cpu backend's and, through its templates, CUDA's): GLSL's
table (targets/glsl.py) with C's spellings.

A cast is ``((float)(x))``, storage buffers are plain pointers, the error index is
three ints, and every float function goes through a ``vg_*`` helper of
templates/helpers.c.j2: the C library's function of the working dtype (libmvec's SIMD
variant on x86-64 glibc; float32 ``tan`` in double precision, rounded once), or inline
arithmetic where that is faster (``exp``; float64 ``tanh``; ``log``, ``tanh``, float32
``sin``/``cos`` and the normal's ``log``/``cos`` where there is no libmvec variant): this
backend has no GLSL limits, so float64 has every function. min/max/sign/clamp propagate
NaN as numpy does; int ``//`` and ``%`` are Python's, an error by zero, exactly as in
GLSL. Compiled without ``-ffast-math`` and with ``-ffp-contract=off``, so the compiler
neither fuses nor reorders float arithmetic. The kernel runs each piece of a step as a
loop over a block of lanes (``lane_block``: codegen/lanes.py).
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.ops import Op
from .base import FLOAT_OPS, INT_OPS
from .glsl import GLSL_FLOAT32

# every float function: a helper (templates/helpers.c.j2)
C_FLOAT_OPS = {
    **FLOAT_OPS,
    Op.SIN: "vg_sin({0})", Op.COS: "vg_cos({0})", Op.TAN: "vg_tan({0})",
    Op.FLOOR: "vg_floor({0})", Op.CEIL: "vg_ceil({0})", Op.ABS: "vg_fabs({0})",
}
C_INT_OPS = {
    **INT_OPS,
    Op.ABS: "vg_iabs({0})", Op.MIN: "vg_imin({0}, {1})", Op.MAX: "vg_imax({0}, {1})",
    Op.CLAMP: "vg_imin(vg_imax({0}, {1}), {2})", Op.SIGN: "vg_isign({0})",
}

C_FLOAT32 = replace(
    GLSL_FLOAT32, language="c", suffix="f", float_ops=C_FLOAT_OPS, int_ops=C_INT_OPS,
    types={"int": "int", "uint": "unsigned", "bool": "bool",
           "word": "vg_word", "u64": "uint64_t",
           "f64": "double", "slot": "long"},   # (vg_word: templates/helpers.c.j2)
    cast="(({F})({0}))", buffer_read="{buffer}[{index}]", index3="{0}, {1}, {2}",
    uniform_decl="{T} {name};", constant_decl="const {T} {name} = {value};",
    shared_decl="{T} {name}{size};", barrier="", template="field.c.j2",
    adaptive_template="adaptive.c.j2",
    adaptive_lanes=1,           # (the C kernel has lane blocks of its own)
    # stochastic fields: the normal of a noise counter
    normal="vg_normal({traj}, (unsigned)({step}), {k}, 0u, u_key0, u_key1)",
    to_uint="((unsigned)({0}))",
    # statements (codegen/printer.py)
    let="const {T} {name} = {value};", precise="const {T} {name} = {value};",
    precise_var="{T} {name} = {value};",
    precise_array="{T} {name}[{size}];",
    or_assign="{0} |= {1};",    # (the flags are 0/1 ints)
    builtins={"min": "vg_min({0}, {1})", "max": "vg_max({0}, {1})", "abs": "vg_fabs({0})",
              "sqrt": "vg_sqrt({0})", "isnan": "isnan({0})", "isinf": "isinf({0})",
              "pow": {"float32": "powf({0}, {1})", "float64": "pow({0}, {1})"},
              "pow_libm": "vg_pow_libm({0}, {1})",      # templates/adaptive.c.j2
              "u64": "((uint64_t){0})", "word": "((vg_word)({0}))",
              "sqrt32": "sqrtf({0})", "log32": "vg_log32({0})", "cos32": "vg_cos32({0})",
              # the helpers built once (codegen/build/helpers.py): C's fmod is libm's
              "to_f64": "((double)({0}))", "to_uint": "((unsigned)({0}))",
              "f32": "((float)({0}))", "floor": "vg_floor({0})", "signbit": "signbit({0})",
              "cfmod": {"float32": "((float)fmod((double)({0}), (double)({1})))",
                        "float64": "fmod({0}, {1})"},
              "neg_wrap": "((int)(0u - (unsigned)({0})))",      # (no -fwrapv in CUDA)
              "constant_p": "__builtin_constant_p({0})",
              "min_plain": "({1} < {0} ? {1} : {0})", "max_plain": "({1} > {0} ? {1} : {0})",
              # C's own math (codegen/build/cmath.py): VG_FMAF / VG_FMA of the template,
              # the float of the working dtype from its bits (a union's compound literal)
              "fma": {"float32": "VG_FMAF({0}, {1}, {2})", "float64": "VG_FMA({0}, {1}, {2})"},
              "to_int": "((int)({0}))",
              "floor64": "floor({0})", "to_bits64": "((uint64_t)(int64_t)({0}))",
              "f64_bits": "((union {{ uint64_t u; double f; }}){{ {0} }}).f",
              "fabs": {"float32": "fabsf({0})", "float64": "fabs({0})"},
              "copysign": {"float32": "copysignf({0}, {1})", "float64": "copysign({0}, {1})"},
              "inf": {"float32": "((float)INFINITY)", "float64": "((double)INFINITY)"},
              "nan": {"float32": "((float)NAN)", "float64": "((double)NAN)"},
              "bits": {"float32": "((union {{ float f; uint32_t u; }}){{ {0} }}).u",
                       "float64": "((union {{ double f; uint64_t u; }}){{ {0} }}).u"},
              "to_bits_int": {"float32": "((uint32_t)({0}))",
                              "float64": "((uint64_t)(int64_t)({0}))"},
              "float_bits": {"float32": "((union {{ uint32_t u; float f; }}){{ {0} }}).f",
                             "float64": "((union {{ uint64_t u; double f; }}){{ {0} }}).f"}},
    function="static inline {R} {name}({params}) {{",
    function_always="static inline __attribute__((always_inline)) {R} {name}({params}) {{",
    function_void="static inline void {name}({params}) {{", wide_mul="u64",
    accurate_pow=True,          # the C library's pow of the working dtype
    lane_block=True)            # templates/adaptive.c.j2: loops over a block of lanes
C_FLOAT64 = replace(C_FLOAT32, dtype="float64", F="double", suffix="", pow_apart=True)
DIALECTS = {"float32": C_FLOAT32, "float64": C_FLOAT64}
