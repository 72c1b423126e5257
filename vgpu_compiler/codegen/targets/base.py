"""A target: every word of one language that a printed kernel contains, for one working
dtype; the one table both printers read (the field expressions' printer,
backends/shader/render.py, and the statement printer, codegen/printer.py).

tinygrad's renderer pattern: a target is mostly a table (type names, literal forms,
operator and function spellings, helper names, the select form, declarations, the
``for`` header, builtins) with a few overrides. The defaults are GLSL's (the C family
spells most words alike); ``targets/glsl.py``, ``wgsl.py`` and ``c.py`` hold each
language's overrides, and a float64 target overrides its float32 one where they
differ (``double``, the ``lf`` suffix, the ops OpenGL has no double version of).

A format in a table takes its operands as ``{0}``, ``{1}``, ``{2}``, the error id of a
node that can fail at run time as ``{e}``, and the float type as ``{F}``. Helper
functions are the identifiers starting with ``helper_prefix``; a printer collects the
ones a kernel calls (with ``helper_deps``, transitively) so that the templates emit
only those.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...ir.ops import Op, ReduceOp, Type

# --- the C family's tables (GLSL's spelling) ------------------------------------------
BINARY = {
    Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})",
    Op.DIV: "({0} / {1})",
    Op.LT: "({0} < {1})", Op.LE: "({0} <= {1})", Op.GT: "({0} > {1})",
    Op.GE: "({0} >= {1})", Op.EQ: "({0} == {1})", Op.NE: "({0} != {1})",
    Op.AND: "({0} && {1})", Op.OR: "({0} || {1})",
}
UNARY = {Op.NEG: "(-{0})", Op.NOT: "(!{0})"}
INT_OPS = {
    Op.FLOORDIV: "vg_ifloordiv({0}, {1}, {e}u)",
    Op.MOD: "vg_imod({0}, {1}, {e}u)",
    Op.ABS: "abs({0})", Op.MIN: "min({0}, {1})", Op.MAX: "max({0}, {1})",
    Op.CLAMP: "min(max({0}, {1}), {2})", Op.SIGN: "sign({0})",
}
FLOAT_OPS = {
    Op.FLOORDIV: "vg_floordiv({0}, {1})", Op.MOD: "vg_fmod({0}, {1})",
    Op.POW: "vg_pow({0}, {1})",
    Op.SIN: "sin({0})", Op.COS: "cos({0})", Op.TAN: "tan({0})",
    Op.ASIN: "vg_asin({0})", Op.ACOS: "vg_acos({0})", Op.ATAN: "vg_atan({0})",
    Op.ATAN2: "vg_atan2({0}, {1})", Op.SINH: "vg_sinh({0})", Op.COSH: "vg_cosh({0})",
    Op.TANH: "vg_tanh({0})", Op.EXP: "vg_exp({0})", Op.LOG: "vg_log({0})",
    Op.LOG2: "vg_log2({0})", Op.SQRT: "vg_sqrt({0})", Op.FLOOR: "floor({0})",
    Op.CEIL: "ceil({0})", Op.ABS: "abs({0})", Op.MIN: "vg_min({0}, {1})",
    Op.MAX: "vg_max({0}, {1})", Op.CLAMP: "vg_clamp({0}, {1}, {2})",
    Op.SIGN: "vg_sign({0})", Op.TO_INT: "vg_toint({0})",
}
# Ops every target prints through a rule of the printer, not a table entry:
# WHERE (``select``), POW (``powi`` for integer exponents, else FLOAT_OPS), TO_INT of an
# int (the operand itself), TO_FLOAT (``cast``).
RULES = frozenset({Op.WHERE, Op.POW, Op.TO_INT, Op.TO_FLOAT})
# Helpers each helper needs (resolved transitively).
HELPER_DEPS = {
    "vg_pow": ("vg_nan", "vg_inf", "vg_signbit", "vg_sqrt", "vg_powpos"),
    "vg_powpos": ("vg_inf",), "vg_powi": (), "vg_asin": ("vg_nan",),
    "vg_acos": ("vg_nan", "vg_asin"), "vg_log": ("vg_nan", "vg_inf", "vg_logpoly"),
    "vg_log2": ("vg_nan", "vg_inf", "vg_logpoly"), "vg_atan": ("vg_signbit",),
    "vg_atan2": ("vg_nan", "vg_atan", "vg_signbit"),
    "vg_sinh": ("vg_signbit", "vg_exps", "vg_inf"), "vg_cosh": ("vg_exps", "vg_inf"),
    "vg_tanh": ("vg_signbit", "vg_exps"), "vg_exp": ("vg_exps", "vg_inf"), "vg_exps": (),
    "vg_ceil": ("vg_signbit",), "vg_sqrt": ("vg_nan",), "vg_min": ("vg_nan",),
    "vg_max": ("vg_nan",), "vg_clamp": ("vg_min", "vg_max"), "vg_sign": (),
    "vg_floordiv": ("vg_cfmod", "vg_signbit"), "vg_fmod": ("vg_nan", "vg_cfmod"),
    "vg_cfmod": ("vg_nan", "vg_signbit"), "vg_ifloordiv": ("vg_fail",), "vg_imod": ("vg_fail",),
    "vg_normal": (),
    "vg_dexp": ("vg_inf", "vg_dpow2"), "vg_dpow2": (),
    "vg_dlog": ("vg_nan", "vg_inf"),
    "vg_dlog2": ("vg_nan", "vg_inf"),
    "vg_fmax": (), "vg_fmin": (),
}
# A step-end observer's update m = OBSERVE[kind].format(m, e) (shader/printing.py): NaN
# values of e are passed over, as numpy's fmax/fmin do (backends/numpy/observers.py).
OBSERVE = {"peak": "vg_fmax({0}, {1})", "trough": "vg_fmin({0}, {1})"}
# Helpers with a loop, and the most iterations one call runs (llvmpipe's loop limiter
# counts them: see plan.loop_cap); no other helper loops.
LOOP_HELPERS = {"vg_powi": 32}
# Index arithmetic (shader/kernel.Ix, spelled by shader/printing.index): the C family
# spells it alike. A left operand is put in parentheses where INDEX_GROUPED names (its
# op, the op it is an operand of).
INDEX_OPS = {"add": "{0} + {1}", "sub": "({0} - {1})", "mul": "{0} * {1}",
             "div": "{0} / {1}", "mod": "{0} % {1}"}
INDEX_GROUPED = frozenset({("add", "mul"), ("div", "div")})
# How two partial results of a basin reduction combine, and what an idle lane holds.
REDUCE_COMBINE = {ReduceOp.SUM: "({0} + {1})", ReduceOp.MEAN: "({0} + {1})",
                  ReduceOp.MIN: "vg_min({0}, {1})", ReduceOp.MAX: "vg_max({0}, {1})"}
REDUCE_NEUTRAL = {ReduceOp.SUM: 0.0, ReduceOp.MEAN: 0.0,
                  ReduceOp.MIN: math.inf, ReduceOp.MAX: -math.inf}


@dataclass(frozen=True)
class Target:
    """The words of one language for one working dtype (see the module docstring)."""

    language: str
    dtype: str
    F: str                               # the working float type
    suffix: str                          # float literal suffix
    forbidden: frozenset = frozenset()   # ops with no full-precision version here
    float_ops: dict = field(default_factory=lambda: dict(FLOAT_OPS))
    int_ops: dict = field(default_factory=lambda: dict(INT_OPS))
    binary: dict = field(default_factory=lambda: dict(BINARY))
    unary: dict = field(default_factory=lambda: dict(UNARY))
    types: dict = field(default_factory=lambda: {"int": "int", "uint": "uint", "bool": "bool",
                                                 "word": "uint", "f64": "double",
                                                 "vec3": "vec3", "slot": "int"})
    select: str = "({0} ? {1} : {2})"
    cast: str = "{F}({0})"               # an int to the working float
    declare: str = "{T} {name} = {value};"   # a field expression's local with its value
    buffer_read: str = "{buffer}.v[{index}]"     # an element of a storage buffer
    powi: str = "vg_powi({0}, {1})"      # x ^ n for an int n
    sqrt: str = "vg_sqrt({0})"           # x ^ 0.5 where pow has no full-precision version
    zero: str = "vg_zero"                # a float 0 operand the driver cannot fold
    nan: str = "vg_nan()"
    inf: str = "vg_inf()"
    true: str = "true"
    false: str = "false"
    int_min: str = "(-2147483647 - 1)"
    uint_literal: str = "{0}u"
    index3: str = "ivec3({0}, {1}, {2})"     # the index of an out-of-range access, 3 ints
    fail: str = "vg_fail"                    # the helper that records a run-time error
    helper_prefix: str = "vg_"
    helper_deps: dict = field(default_factory=lambda: dict(HELPER_DEPS))
    loop_helpers: dict = field(default_factory=lambda: dict(LOOP_HELPERS))
    # the loop trips of one call of an input's loader and of a flux's adder (GLSL's
    # compare-and-swap loop: a SIMD group's lanes add in turn, llvmpipe's vectors at most
    # 16 wide), which llvmpipe's limiter counts even where no lane runs the loop
    guarded_trips: tuple = (0, 16)
    event_first: str = "vg_first"   # the earliest event's variable (codegen/build/events.py)
    reduce_combine: dict = field(default_factory=lambda: dict(REDUCE_COMBINE))
    observe: dict = field(default_factory=lambda: dict(OBSERVE))
    index_ops: dict = field(default_factory=lambda: dict(INDEX_OPS))
    index_grouped: frozenset = INDEX_GROUPED
    group: str = "({0})"
    below: str = "{0} < {1}"
    all_of: str = " && "                # joins conditions that must all hold
    # declarations and synchronisation, for the templates
    uniform_decl: str = "uniform {T} {name};"
    constant_decl: str = "const {T} {name} = {value};"   # a uniform fixed at compile time
    shared_decl: str = "shared {T} {name}{size};"   # workgroup memory; size "[n]" or ""
    barrier: str = "barrier();"                     # workgroup barrier (memory included)
    # a shared variable read alike by the workgroup after a barrier (ir.UniformLoad), and
    # whether that barrier is printed (False: the load synchronises itself, WGSL's)
    uniform_load: str = "{0}"
    load_barrier: bool = True
    atomic_add: str = "atomicAdd({0}, {1})"
    atomic_cas: str = "atomicCompSwap({0}, {1}, {2})"   # returns the old value
    template: str = "field.glsl.j2"                 # its main template (templates/)
    # A language whose select evaluates both sides (WGSL's ``select``; GLSL's ``?:`` is
    # lazy): the printer then passes each read and int ``//``/``%`` inside a branch of a
    # ``where`` the condition under which its value is used (``{live}`` in ``int_ops``,
    # ``loader_call``), so a branch not taken reports no error.
    lazy_select: bool = False
    loader_call: str = "{func}({args})"             # a checked input read
    adaptive_template: str = "adaptive.glsl.j2"     # ... of an adaptive method's kernel
    # trajectories per invocation of a plain adaptive kernel (shader/lanes.py), and its
    # template: several where the driver runs an invocation's operations one at a time
    adaptive_lanes: int = 1
    lanes_template: str = "adaptive_lanes.glsl.j2"
    # stochastic fields (shader/noise.py): the float32 normal of the counter
    # (trajectory, step, noise k, 0), and the trajectory's flat index as a uint
    normal: str = "vg_normal({traj}, uint({step}), {k}, 0u, u_key0, u_key1)"
    normal_type: str = "float"          # the normal is float32 for every working dtype
    to_uint: str = "uint({0})"
    # --- statements of codegen.ir (codegen/printer.py) ---------------------------------
    # a local: {T} type, {name}, {value}; the mutable and precise forms where they differ
    let: str = "{T} {name} = {value};"
    var: str = "{T} {name} = {value};"
    precise: str = "{T} {name} = {value};"
    precise_var: str = "{T} {name} = {value};"   # a precise local assigned again later
    loop: str = "for (int {var} = {start}; {var} < {stop}; {var}++) {{"
    loop_down: str = "for (int {var} = {start}; {var} >= {stop}; {var}--) {{"
    loop_step: str = "for (int {var} = {start}; {var} < {stop}; {var} += {step}) {{"
    loop_halve: str = "for (uint {var} = {start}; {var} > 0u; {var} >>= 1) {{"   # ir.Halve
    or_assign: str = "{0} = {0} || {1};"     # a flag or-ed in place (ir.Assign, op OR)
    array: str = "{T} {name}[{size}];"
    declare_only: str = "{T} {name};"       # a local without a value (ir.Let, value None)
    # a function (ir.Function): {R} its type, {name}, {params} each ``param`` joined
    function: str = "{R} {name}({params}) {{"
    function_void: str = "void {name}({params}) {{"
    function_always: str | None = None      # an ``always_inline`` one (None: ``function``)
    param: str = "{T} {name}"
    # the high and low words of a 32 x 32-bit product (codegen/mathlib.mulhilo): "extended"
    # (the builtin ``mulhilo``: GLSL's umulExtended), "halves" (four 16-bit products) or
    # "u64" (a 64-bit product: C)
    wide_mul: str = "extended"
    precise_array: str = "{T} {name}[{size}];"
    # the note on the explicit zeroing of a local array each time round a loop (WGSL: a
    # var starts at 0, but naga does not zero one declared in a loop again)
    zero_note: str | None = None
    not_: str = "!{0}"
    neg: str = "-{0}"
    # neutral builtins (codegen.ir.Call) -> a format of the arguments {0}, {1}, ...; an
    # entry may be a dict by working dtype (C's powf, pow)
    builtins: dict = field(default_factory=dict)
    # what the kernel's math has (codegen/mathlib.py writes what it lacks as IR)
    accurate_pow: bool = False       # pow is correctly rounded enough for x^(-1/m)
    has_isnan: bool = True           # isnan/isinf exist (else: the bits, mathlib)
    # a float zero the driver must not fold (a stage value before its block writes it)
    stage_zero: str | None = None
    # a kernel of lane blocks: each piece of a trajectory's step runs in a loop over the
    # block's lanes, its scalars in arrays (codegen/lanes.py), its comparisons 0/1 ints;
    # the controller in select form there (codegen/build/controller.py), so the compiler
    # vectorises the loops
    lane_block: bool = False
    # the controller's pow is the C library's scalar function (builtin ``pow_libm``), one
    # call a lane in a loop of its own, not a vector variant (C float64: an ulp of a step
    # size shows in a float64 run's later states; numpy's power gives libm's)
    pow_apart: bool = False

    # --- types and literals --------------------------------------------------------
    def type(self, neutral: str) -> str:
        """A neutral type (``float`` = the working float, ``int``, ``uint``, ``bool``)."""
        return self.F if neutral == "float" else self.types[neutral]

    def type_name(self, t: Type) -> str:
        return self.type(t.value)

    def literal(self, value, t: Type) -> str:
        if t is Type.BOOL:
            return self.true if value else self.false
        if t is Type.INT:
            v = int(value)
            return str(v) if v != -2**31 else self.int_min
        return self.float_literal(value)

    def float_literal(self, value) -> str:
        with np.errstate(over="ignore"):
            v = float(np.dtype(self.dtype).type(value))
        if math.isnan(v):
            return self.nan
        if math.isinf(v):
            return self.inf if v > 0 else f"(-{self.inf})"
        text = str(np.float32(v)) if self.dtype == "float32" else repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        if text.startswith("-"):
            return f"({text}{self.suffix})"
        return text + self.suffix

    def f64_literal(self, value) -> str:
        """A double literal (ir.F64: a helper's double-precision arithmetic where the
        target has doubles, ``"f64" in types``)."""
        text = repr(float(value))
        text = text if "e" in text or "." in text else text + ".0"
        suffix = "lf" if self.language == "glsl" else ""
        return f"({text}{suffix})" if text.startswith("-") else text + suffix

    def uint(self, value: int) -> str:
        return self.uint_literal.format(value)

    def at(self, index: list[str]) -> str:
        """The index vector of an error report (missing axes 0)."""
        return self.index3.format(*(list(index) + ["0"] * (3 - len(index))))

    def builtin(self, fn: str, args: list[str]) -> str:
        """A neutral builtin's text (codegen.ir.Call); a name not in the table verbatim."""
        fmt = self.builtins.get(fn)
        if isinstance(fmt, dict):
            fmt = fmt[self.dtype]
        return fmt.format(*args) if fmt is not None else f"{fn}({', '.join(args)})"

    # --- helpers ---------------------------------------------------------------------
    def helper_names(self, text: str) -> list[str]:
        """The helpers a format or a printed piece calls."""
        out, p = [], self.helper_prefix
        i = text.find(p)
        while i >= 0:
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(text[i:j])
            i = text.find(p, j)
        return out

    def reduce_neutral(self, op: ReduceOp) -> str:
        return self.float_literal(REDUCE_NEUTRAL[op])

    # --- specialisation ----------------------------------------------------------------
    def fix_ints(self, source: str, values: dict[str, int]) -> str | None:
        """``source`` with each named int uniform declared as a constant of its value
        (``uniform_decl`` -> ``constant_decl``), so that the driver folds what the
        uniforms decide (loop trips, unchecked-access branches); None when one of them
        is not declared exactly once as the templates declare it."""
        T = self.types["int"]
        for name, value in values.items():
            decl = self.uniform_decl.format(T=T, name=name)
            at = source.find("\n" + decl)
            if at < 0 or source.find("\n" + decl, at + 1) >= 0:
                return None
            fixed = self.constant_decl.format(T=T, name=name, value=self.literal(value, Type.INT))
            source = source[:at + 1] + fixed + source[at + 1 + len(decl):]
        return source
