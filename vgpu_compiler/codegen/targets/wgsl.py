"""WGSL's words: GLSL's table (targets/glsl.py) with WGSL's entries replaced.

What differs from GLSL, and how it is handled (not papered over):
- no ``?:``: ``where`` is ``select(false, true, cond)``, which evaluates both sides, so
  the target sets ``lazy_select``: a checked read or an int ``//``/``%`` inside a
  branch gets the condition under which its value is used (``live``) and reports an
  error only then; everything else in a branch is pure, so computing it is harmless;
- no float64: the backend refuses ``dtype="float64"`` (backends/wgpu/__init__.py);
- no ``isnan``/``isinf``: helpers test the bits; no float atomics: the flux template
  adds with a compare-and-swap loop on ``atomic<u32>`` and ``bitcast``;
- uniforms live in one uniform buffer (templates/field.wgsl.j2 copies them into
  private variables, and into ``let``s in ``main`` where control flow must be uniform);
- types are ``f32``, ``i32``, ``u32``; a local is ``let name: T = value;``.
"""
from __future__ import annotations

from dataclasses import replace

from ...ir.ops import Op
from .base import BINARY, FLOAT_OPS, INT_OPS, UNARY
from .glsl import GLSL_FLOAT32

INT = {**INT_OPS,
       Op.FLOORDIV: "vg_ifloordiv({0}, {1}, {e}u, {live})",
       Op.MOD: "vg_imod({0}, {1}, {e}u, {live})"}
FLOAT = dict(FLOAT_OPS)
UNARY_WGSL = {**UNARY, Op.NEG: "(- {0})"}     # never `--` (a WGSL decrement token)
BINARY_WGSL = {**BINARY, Op.SUB: "({0} - {1})"}
HELPER_DEPS = {**GLSL_FLOAT32.helper_deps,
               "vg_min": ("vg_nan", "vg_isnan"), "vg_max": ("vg_nan", "vg_isnan"),
               "vg_sign": ("vg_isnan",), "vg_sqrt": ("vg_nan",),
               "vg_pow": ("vg_nan", "vg_inf", "vg_signbit", "vg_sqrt", "vg_powpos",
                          "vg_isnan", "vg_isinf", "vg_powi"),
               "vg_powpos": ("vg_inf", "vg_log", "vg_exps"),
               "vg_log": ("vg_nan", "vg_inf", "vg_logpoly", "vg_isinf"),
               "vg_log2": ("vg_nan", "vg_inf", "vg_logpoly", "vg_isinf"),
               "vg_atan": ("vg_signbit", "vg_isnan"),
               "vg_atan2": ("vg_nan", "vg_atan", "vg_signbit", "vg_isnan", "vg_isinf"),
               "vg_sinh": ("vg_signbit", "vg_exps", "vg_inf", "vg_isnan"),
               "vg_cosh": ("vg_exps", "vg_inf", "vg_isnan"),
               "vg_tanh": ("vg_signbit", "vg_exps", "vg_isnan"),
               "vg_cfmod": ("vg_nan",),
               "vg_fmod": ("vg_nan", "vg_cfmod", "vg_isnan"),
               "vg_floordiv": ("vg_cfmod", "vg_signbit", "vg_isnan"),
               "vg_fmax": ("vg_isnan",), "vg_fmin": ("vg_isnan",)}
# Helpers with a loop and their most iterations (lavapipe is llvmpipe's code generator).
LOOP_HELPERS = {"vg_powi": 32, "vg_pow": 8, "vg_fmod": 330, "vg_floordiv": 330}   # fmod, //: vg_cfmod
# (277 binary digits + 2 x 24 normalising); pow: vg_powi for |y| <= 64

WGSL = replace(
    GLSL_FLOAT32, language="wgsl", F="f32", suffix="",
    int_ops=INT, float_ops=FLOAT, unary=UNARY_WGSL, binary=BINARY_WGSL,
    types={"int": "i32", "uint": "u32", "bool": "bool", "word": "u32",
           "vec3": "vec3<f32>", "slot": "i32"},
    select="select({2}, {1}, {0})", lazy_select=True,
    cast="f32({0})", declare="let {name}: {T} = {value};",
    buffer_read="{buffer}[{index}]",
    loader_call="{func}({args}, {live})",
    index3="vec3<i32>({0}, {1}, {2})",
    helper_deps=HELPER_DEPS, loop_helpers=LOOP_HELPERS,
    guarded_trips=(1, 17),      # vg_fail's compare-exchange loop in both, then the add's
    event_first="vg_efirst",    # (vg_first: the first step's struct there)
    uniform_decl="var<private> {name}: {T};",
    constant_decl="const {name}: {T} = {value};",
    shared_decl="var<workgroup> {name}: {T};",
    barrier="workgroupBarrier();",
    uniform_load="workgroupUniformLoad(&{0})", load_barrier=False,
    atomic_add="atomicAdd(&{0}, {1})",
    atomic_cas="atomicCompareExchangeWeak(&{0}, {1}, {2})",
    template="field.wgsl.j2", adaptive_template="adaptive.wgsl.j2",
    adaptive_lanes=1,           # (no two-trajectory template in WGSL: shader/lanes.py)
    normal="vg_normal({traj}, u32({step}), {k}, 0u, u_key0, u_key1)", normal_type="f32",
    to_uint="u32({0})",
    # statements (codegen/printer.py)
    let="let {name}: {T} = {value};",
    var="var {name}: {T} = {value};",
    precise="let {name}: {T} = {value};",       # (no `precise`: no fusing in WGSL)
    precise_var="var {name}: {T} = {value};",
    array="var {name}: array<{T}, {size}>;", precise_array="var {name}: array<{T}, {size}>;",
    declare_only="var {name}: {T};",
    function="fn {name}({params}) -> {R} {{", function_void="fn {name}({params}) {{",
    param="{name}: {T}", wide_mul="halves",     # (no umulExtended)
    zero_note="(explicitly: a var in a loop need not start at 0 again)",
    loop="for (var {var}: i32 = {start}; {var} < {stop}; {var}++) {{",
    loop_down="for (var {var}: i32 = {start}; {var} >= {stop}; {var}--) {{",
    loop_step="for (var {var}: i32 = {start}; {var} < {stop}; {var} += {step}) {{",
    loop_halve="for (var {var}: u32 = {start}; {var} > 0u; {var} = {var} >> 1u) {{",
    builtins={"min": "min({0}, {1})", "max": "max({0}, {1})", "abs": "abs({0})",
              "sqrt": "sqrt({0})", "nonfinite": "vg_ad_bad({0})",
              "isnan": "vg_ad_isnan({0})",              # templates/adaptive.wgsl.j2
              "root": "vg_root({0}, {1})",      # templates/adaptive.wgsl.j2
              "basin_fold": "vg_basin_fold({0}, {1}, vg_lidx)",
              "local_index": "vg_lidx",
              "sqrt32": "sqrt({0})", "log32": "log({0})", "cos32": "cos({0})",
              # the helpers built once (codegen/build/helpers.py)
              "to_uint": "u32({0})", "f32": "f32({0})", "cfmod": "vg_cfmod({0}, {1})",
              "signbit": "vg_signbit({0})", "neg_wrap": "(0 - {0})",
              "bits": "bitcast<u32>({0})", "high_word": "bitcast<u32>({0})",
              "min_plain": "min({0}, {1})",
              "max_plain": "max({0}, {1})",
              "float_bits": "bitcast<f32>({0})", "to_int": "i32({0})",
              "vec3": "vec3<f32>({0}, {1}, {2})", "float_high": "bitcast<f32>({0})"},
    accurate_pow=False,
    has_isnan=False,            # the bits are tested (vg_ad_bad)
    stage_zero="vg_zero")
DIALECTS = {"float32": WGSL}
