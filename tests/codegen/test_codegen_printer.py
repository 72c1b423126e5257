"""codegen/: the statement IR, the one printer and its three targets.

The same IR printed for GLSL, WGSL and C differs only in spelling (the skeleton of
braces, ifs and loops is one); the printed order of operations is the tree's (checked
by evaluating printed text against the tree, bit for bit); the pieces the adaptive
kernels use validate (glslangValidator, naga) and compile (the C toolchain), and the
printed C controller gives ir/controller.py's factor exactly.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from conftest import find_validator
from vgpu_compiler.backends.cpu.dialect import C_FLOAT32, C_FLOAT64
from vgpu_compiler.backends.shader.dialect import GLSL_FLOAT32, GLSL_FLOAT64
from vgpu_compiler.backends.wgpu.dialect import WGSL
from vgpu_compiler.codegen import ir, lanes
from vgpu_compiler.codegen.build import controller, first_step
from vgpu_compiler.codegen.ir import BOOL, FLOAT, INT, Var, f, i
from vgpu_compiler.codegen.targets import TARGETS, printer
from vgpu_compiler.ir import controller as C
from vgpu_compiler.ir.ops import Op

DIALECTS = {"glsl": GLSL_FLOAT32, "wgsl": WGSL, "c": C_FLOAT32}


def sample() -> tuple:
    """Every statement kind once."""
    x, n = Var("x"), Var("n")
    return (
        ir.Comment("a sample of every statement"),
        ir.Let("x", FLOAT, ir.add(f(1.5), ir.mul(Var("u_a"), f(2.0))), mutable=True),
        ir.Let("n", INT, i(3)),
        ir.Let("y", FLOAT, x, precise=True),
        ir.Loop("j", i(0), n, (ir.Assign(x, ir.mul(x, f(0.5)), Op.ADD),)),
        ir.If(ir.and_(ir.lt(x, f(1.0)), ir.not_(ir.eq(n, i(0)))),
              (ir.Assign(x, ir.call("min", x, f(4.0))),),
              (ir.If(ir.gt(x, f(8.0)), (ir.Assign(x, f(8.0)),), (ir.Assign(x, f(0.0)),)),)),
        ir.Block((ir.Let("b", BOOL, ir.Lit(True, BOOL)),), comment="a scope"),
        ir.Assign(x, ir.Select(ir.le(x, f(2.0)), x, ir.sub(x, f(1.0)))),
    )


def skeleton(text: str) -> list[str]:
    """The layout of printed code without its words: braces, keywords, comments."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        key = re.match(r"(if|for|\} else if|\} else|\{|\}|//|return)", s)
        out.append((len(line) - len(s), key.group(1) if key else "stmt"))
    return out


def test_every_target_prints_the_same_ir_in_its_own_spelling():
    texts = {name: printer(d).text(sample()) for name, d in DIALECTS.items()}
    assert skeleton(texts["glsl"]) == skeleton(texts["wgsl"]) == skeleton(texts["c"])
    assert "float x = 1.5 + u_a * 2.0;" in texts["glsl"]
    assert "var x: f32 = 1.5 + u_a * 2.0;" in texts["wgsl"]
    assert "float x = 1.5f + u_a * 2.0f;" in texts["c"]
    assert "const int n = 3;" in texts["c"] and "let n: i32 = 3;" in texts["wgsl"]
    assert "precise float y = x;" in texts["glsl"]
    assert "for (var j: i32 = 0; j < n; j++) {" in texts["wgsl"]
    assert "for (int j = 0; j < n; j++) {" in texts["glsl"]
    assert "for (int j = 0; j < n; j++) {" in texts["c"]
    assert "x = select(x - 1.0, x, x <= 2.0);" in texts["wgsl"]
    assert "x = (x <= 2.0) ? x : x - 1.0;" in texts["glsl"]
    assert "vg_min(x, 4.0f)" in texts["c"] and "min(x, 4.0)" in texts["glsl"]
    assert "} else if (x > 8.0) {" in texts["glsl"]


def test_one_table_of_words_per_target():
    """The backends' dialects are codegen's targets (one table for the field printer and
    the statement printer): no second spelling of a type, literal or cast."""
    from vgpu_compiler.backends.shader import dialect as shader_dialect
    from vgpu_compiler.codegen.targets.base import Target
    assert TARGETS == {"glsl": {"float32": GLSL_FLOAT32, "float64": GLSL_FLOAT64},
                       "wgsl": {"float32": WGSL}, "c": {"float32": C_FLOAT32, "float64": C_FLOAT64}}
    assert shader_dialect.Dialect is Target
    for by_dtype in TARGETS.values():
        for dtype, t in by_dtype.items():
            assert isinstance(t, Target) and t.dtype == dtype
            lit = t.float_literal(0.5)
            assert printer(t).expr(f(0.5)) == lit and printer(t).expr(ir.Var("x")) == "x"
    assert printer(C_FLOAT32).expr(ir.call("pow", Var("x"), f(2.0))) == "powf(x, 2.0f)"
    assert printer(C_FLOAT64).expr(ir.call("pow", Var("x"), f(2.0))) == "pow(x, 2.0)"


def _tree(rng, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return Var(f"v{rng.integers(4)}") if rng.random() < 0.7 else f(rng.normal())
    op = [Op.ADD, Op.SUB, Op.MUL, Op.DIV][rng.integers(4)]
    return ir.Bin(op, _tree(rng, depth - 1), _tree(rng, depth - 1))


def _value(e, env):
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, ir.Lit):
        return np.float64(e.value)
    a, b = _value(e.a, env), _value(e.b, env)
    return {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply,
            Op.DIV: np.divide}[e.op](a, b)


def test_the_printed_order_of_operations_is_the_trees():
    """C's + - * / group as Python's: the printed text, evaluated, gives the tree's value
    bit for bit (a parenthesis dropped or added across a regrouping would not)."""
    rng = np.random.default_rng(7)
    p = printer(GLSL_FLOAT64)
    env = {f"v{j}": np.float64(rng.normal()) for j in range(4)}
    with np.errstate(all="ignore"):
        for _ in range(400):
            e = _tree(rng, 5)
            text = p.expr(e).replace("lf", "").replace("(-", "(0-")    # Python spelling
            text = re.sub(r"(?<![\w.])(\d[\d.e+-]*)", r"np.float64(\1)", text)
            got = eval(text, {"np": np}, env)                          # noqa: S307
            want = _value(e, env)
            assert np.float64(got).tobytes() == np.float64(want).tobytes(), (p.expr(e), got, want)


def test_parentheses_only_where_the_tree_needs_them():
    p = printer(GLSL_FLOAT32)
    a, b, c = Var("a"), Var("b"), Var("c")
    assert p.expr(ir.mul(ir.mul(a, b), c)) == "a * b * c"
    assert p.expr(ir.mul(a, ir.mul(b, c))) == "a * (b * c)"
    assert p.expr(ir.div(ir.mul(a, b), c)) == "(a * b) / c"
    assert p.expr(ir.sub(a, ir.sub(b, c))) == "a - (b - c)"
    assert p.expr(ir.add(a, ir.mul(b, c))) == "a + b * c"
    assert p.expr(ir.or_(ir.and_(a, b), c)) == "(a && b) || c"      # (WGSL requires them)
    assert p.expr(ir.not_(ir.gt(a, b))) == "!(a > b)"


def test_flags_print_as_one_chain_with_no_short_circuit():
    p = printer(C_FLOAT32)
    a, b, c = Var("a"), Var("b"), Var("c")
    assert p.expr(ir.band(ir.eq(a, b), ir.not_(c), ir.band(a, b))) == "(a == b) & !c & a & b"
    assert p.expr(ir.band(ir.not_(a), b)) == "(!a) & b"          # (gcc's -Wparentheses)
    assert p.expr(ir.bor(ir.band(a, b), c)) == "(a & b) | c"
    assert p.expr(ir.Select(ir.bor(a, b), a, b)) == "(a | b) ? a : b"
    assert p.expr(ir.and_(ir.band(a, b), c)) == "(a & b) && c"


def test_the_c_controller_is_in_select_form():
    """The lane target's accept and factor: no branch, no short circuit (gcc vectorises
    the lane loops); float64's pow in a loop of its own (libm's, not libmvec's)."""
    for d in (C_FLOAT32, C_FLOAT64):
        ps = _pieces(d)
        for piece in (ps["accept"], ps["factor"]):
            assert "if (" not in piece and "&&" not in piece and "||" not in piece, piece
        assert ps["factor"].count("for (int l = 0; l < VG_W; l++) {") == (2 if d is C_FLOAT64 else 1)
        assert ("vg_pow_libm(vg_err[l]" in ps["factor"]) == (d is C_FLOAT64)


def test_the_lane_pass_makes_a_trajectorys_scalars_lane_elements():
    stmts = (ir.Let("vg_ok", BOOL, ir.lt(Var("vg_err"), f(1.0))),
             ir.Let("tmp", FLOAT, Var("vg_err")))
    out = lanes.lane_arrays(stmts, ("vg_ok", "vg_err"))
    text = printer(C_FLOAT32).text(out)
    assert text == "vg_ok[l] = vg_err[l] < 1.0f;\nconst float tmp = vg_err[l];"


# --- the pieces the adaptive kernels use ---------------------------------------------
def _pieces(dialect, q=4):
    return controller.printed(dialect, q, dialect.dtype, -1)


GLSL_SHELL = """#version 430
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B {{ {F} v[]; }} b;
uniform {F} u_dt; uniform {F} u_dtmax; uniform {F} u_t1; uniform {F} u_dt0;
uniform {F} u_atol; uniform {F} u_rtol;
{F} vg_root({F} x, int m) {{ return x; }}
void main() {{
    {F} vg_err = b.v[0]; {F} vg_t = b.v[1]; {F} vg_h = b.v[2];
    int vg_again = 0; int vg_status = -1; bool vg_flux_due = false;
    {F} s_x = b.v[3]; {F} k0_x = b.v[4];
{body}
    b.v[0] = vg_h + {F}(vg_status) + (vg_ok && vg_flux_due ? {F}(1) : {F}(0));
}}
"""


@pytest.mark.parametrize("dialect", [GLSL_FLOAT32, GLSL_FLOAT64], ids=["float32", "float64"])
def test_the_printed_glsl_validates(dialect, tmp_path):
    exe = find_validator()
    ps = _pieces(dialect)
    fd = first_step.Field(states=("s_x",), k0=("k0_x",), trial=("y_x",), k1=("k1_x",), n_err=1)
    first = printer(dialect, {"trial": "k1_x = y_x * u_dt;"}).text(
        first_step.first_step(dialect, fd, 4), 4)
    body = "\n".join("    " + line for piece in (ps["accept"], ps["factor"], ps["next"])
                     for line in piece.splitlines()) + "\n" + first
    src = tmp_path / "k.comp"
    src.write_text(GLSL_SHELL.format(F=dialect.F, body=body))
    run = subprocess.run([exe, "-S", "comp", str(src)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


WGSL_SHELL = """
@group(0) @binding(0) var<storage, read_write> b: array<f32>;
var<private> u_dt: f32; var<private> u_dtmax: f32; var<private> u_t1: f32;
var<private> u_dt0: f32; var<private> u_atol: f32; var<private> u_rtol: f32;
var<private> vg_zero: f32;
fn vg_ad_bad(x: f32) -> bool {{ return (bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u; }}
fn vg_root(x: f32, m: i32) -> f32 {{ return pow(x, 1.0 / f32(m)); }}
@compute @workgroup_size(1)
fn main() {{
    var vg_err: f32 = b[0]; var vg_t: f32 = b[1]; var vg_h: f32 = b[2];
    var vg_again: i32 = 0; var vg_status: i32 = -1; var vg_flux_due: bool = false;
    let s_x: f32 = b[3]; let k0_x: f32 = b[4];
{body}
    b[0] = vg_h + f32(vg_status) + select(0.0, 1.0, vg_ok && vg_flux_due);
}}
"""


def test_the_printed_wgsl_validates(wgpu):
    from vgpu_compiler.backends.wgpu import device
    ps = _pieces(WGSL)
    fd = first_step.Field(states=("s_x",), k0=("k0_x",), trial=("y_x",), k1=("k1_x",), n_err=1)
    first = printer(WGSL, {"trial": "k1_x = y_x * u_dt;"}).text(
        first_step.first_step(WGSL, fd, 4), 4)
    body = "\n".join("    " + line for piece in (ps["accept"], ps["factor"], ps["next"])
                     for line in piece.splitlines()) + "\n" + first
    device.get().device.create_shader_module(code=WGSL_SHELL.format(body=body))


C_PROGRAM = """#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#define VG_W 1
static inline {F} vg_nan(void) {{ return NAN; }}
static inline {F} vg_min({F} a, {F} b) {{ return a < b ? a : b; }}
static inline {F} vg_max({F} a, {F} b) {{ return a > b ? a : b; }}
static inline {F} vg_fabs({F} a) {{ return fabs(a); }}
static inline double vg_pow_libm(double x, double y) {{ return pow(x, y); }}
int main(void) {{
    {F} vg_err[VG_W], vg_prop[VG_W], vg_use[VG_W], vg_t[VG_W], vg_h[VG_W];
    int vg_again[VG_W], vg_status[VG_W], vg_ok[VG_W], vg_flux[VG_W];
    const {F} u_dtmax = 1e30;
    double e;
    while (scanf("%lf", &e) == 1) {{
        {{
            const int l = 0;
            vg_err[l] = ({F})e; vg_use[l] = 1; vg_t[l] = 0; vg_again[l] = 0; vg_status[l] = -1;
            vg_flux[l] = false; vg_h[l] = 0;
{accept}
        }}
        {{
{factor}
            printf("%.17g\\n", (double)vg_prop[0]);
        }}
        {{
            const int l = 0;
{next}
        }}
        printf("%d %d %d %.17g\\n", (int)vg_ok[0], vg_status[0], (int)vg_flux[0], (double)vg_h[0]);
    }}
    return 0;
}}
"""


@pytest.mark.parametrize("dialect", [C_FLOAT32, C_FLOAT64], ids=["float32", "float64"])
@pytest.mark.parametrize("q", [1, 4, 8])
def test_the_printed_c_compiles_and_gives_the_references_factor(dialect, q, cpu, tmp_path):
    """ir/controller.py's factor (what the numpy backend runs), bit for bit, at errors
    across and beyond the guards (0, 1e-8, 1e8, inf, NaN): the select form the C kernel
    runs (the factor's own lane loops; dt = 1, so the proposal is the factor)."""
    from vgpu_compiler.backends.cpu import toolchain
    ps = _pieces(dialect, q)
    ind = lambda s: "\n".join(" " * 12 + x for x in s.splitlines())      # noqa: E731
    src = tmp_path / "ctl.c"
    src.write_text(C_PROGRAM.format(F=dialect.F, accept=ind(ps["accept"]),
                                    factor=ind(ps["factor"]), next=ind(ps["next"])))
    exe = tmp_path / "ctl"
    cc = toolchain.compiler()
    build = subprocess.run([cc, "-O2", "-ffp-contract=off", "-Wall", "-Werror",
                            "-Wno-unused-variable", "-o", str(exe), str(src), "-lm"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    d = np.dtype(dialect.dtype)
    errs = np.concatenate([[0.0, 1e-8, 1e8, np.inf, np.nan, 1.0, 0.5, 2.0],
                           np.logspace(-12, 12, 301)]).astype(d)
    run = subprocess.run([str(exe)], input="\n".join(repr(float(e)) for e in errs),
                         capture_output=True, text=True)
    rows = np.array(run.stdout.split()).reshape(-1, 5)
    fac = rows[:, 0].astype(d)
    want = _factor_with_libm(errs, q)
    assert fac.tobytes() == want.tobytes(), np.flatnonzero(fac != want)
    # numpy's own pow (what the numpy backend runs) may differ from the C library's in
    # the last places: the factor agrees with ir/controller.py's to two ulps
    np.testing.assert_array_max_ulp(fac, C.factor(errs, q, np.zeros(errs.shape, bool)), 2)
    finite = np.isfinite(errs)
    assert (rows[:, 1].astype(int) == (finite & (errs <= 1))).all()       # accepted
    status = rows[:, 2].astype(int)                 # a non-finite error: step underflow
    assert (status == np.where(finite, -1, C.STEP_UNDERFLOW)).all()
    assert (rows[:, 3].astype(int) == ~finite).all()                      # flux due
    h = rows[:, 4].astype(d)                        # the next step: dt * factor (dt = 1)
    assert h[finite].tobytes() == want[finite].tobytes()


def _factor_with_libm(errs, q: int):
    """ir/controller.py's factor, written out here with the C library's pow (the kernel's),
    rounded in the working dtype step by step."""
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    d = errs.dtype.type
    pw = libm.powf if d is np.float32 else libm.pow
    ct = ctypes.c_float if d is np.float32 else ctypes.c_double
    pw.restype, pw.argtypes = ct, [ct, ct]
    out = []
    for e in errs:
        if not np.isfinite(e):
            out.append(d(C.FACTOR_MIN))
            continue
        raw = d(C.SAFETY) * d(pw(float(e), float(d(-1.0 / (q + 1)))))
        out.append(min(d(C.FACTOR_MAX), max(d(C.FACTOR_MIN), raw)))
    return np.array(out, dtype=errs.dtype)


def test_the_carry_rows_are_the_hosts():
    """b_cnt's rows as the host reads them (backends/shader/adaptive.py's COUNTERS), b_ad's
    t, dt then k0; one IR printed for GLSL's and WGSL's buffers."""
    from vgpu_compiler.backends.shader.adaptive import COUNTERS
    from vgpu_compiler.codegen.build import carry
    host = {"rejected": "rej"}
    assert carry.COUNTERS == tuple("vg_" + host.get(c, c) for c in COUNTERS)
    cf = carry.Field(states=("s_x", "s_y"), params=("p_a",), k0=("k0_x", "k0_y"))
    glsl = printer(GLSL_FLOAT32).text(carry.store_all(cf, -1))
    wgsl = printer(WGSL).text(carry.store_all(cf, -1))
    assert "b_ad.v[3 * u_count + lane] = k0_y;" in glsl and "b_ad[3 * u_count + lane] = k0_y;" in wgsl
    assert "b_cnt.v[2 * u_count + lane] = vg_status;" in glsl
    assert "atomicAdd(b_run.v[0], 1u);" in glsl and "atomicAdd(&b_run[0], 1u);" in wgsl
    c = printer(C_FLOAT64).text(lanes.lane_arrays(carry.resume(cf, paused=-2, running=-1),
                                                  ("vg_t", "vg_h", *carry.COUNTERS),
                                                  registers=("s_x", "s_y", "k0_x", "k0_y")))
    assert "A_k0_x[l] = b_ad[2 * u_count + lane];" in c
    assert "vg_status[l] = (vg_status[l] == -2) ? -1 : vg_status[l];" in c


def test_the_lane_loops_pass_keeps_block_level_pieces_outside_the_loops():
    """The C first step is the GLSL one laid out: lane loops between the basin folds and
    the trial stage, the locals that cross them made lane arrays, the uniform if outside."""
    fd = first_step.Field(states=("s_x",), k0=("k0_x",), trial=("y_x",), k1=("k1_x",),
                          n_err=1, basin=True)
    stmts = first_step.first_step(C_FLOAT64, fd, 4)
    out = lanes.lane_loops(stmts, controller.LANE_ARRAYS, registers=("s_x", "k0_x", "k1_x"))
    text = printer(C_FLOAT64, {"trial": "TRIAL;", "fold vg_h0": "FOLD_H0;",
                               "fold vg_h": "FOLD_H;"}).text(out)
    lines = [x.strip() for x in text.splitlines()]
    assert lines[:5] == ["double vg_d1[VG_W];", "double vg_d2[VG_W];", "double vg_h0[VG_W];",
                         "double vg_sc0[VG_W];", "double vg_span[VG_W];"]
    assert lines[5] == "if (u_dt0 > 0.0) {"          # uniform: once, outside the loops
    order = [x for x in lines if x in ("FOLD_H0;", "TRIAL;", "FOLD_H;")
             or x.startswith("for (int l")]
    assert order == ["for (int l = 0; l < VG_W; l++) {"] * 2 + [
        "FOLD_H0;", "TRIAL;", "for (int l = 0; l < VG_W; l++) {", "FOLD_H;",
        "for (int l = 0; l < VG_W; l++) {"]
    assert "vg_h0[l] = vg_min(vg_h0[l], vg_span[l]);" in lines
    assert "double vg_d0 = 0.0;" in lines            # used in one loop only: a scalar


def _run_ir(stmts, env: dict, splices: dict, dt):
    """A small interpreter of the IR the location uses (Let, Assign, If, Loop, Comment,
    Splice; Var, Lit, Bin, Call to_float), in the working dtype ``dt``; a splice is a
    Python function of the environment."""
    ops = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b,
           Op.MUL: lambda a, b: a * b, Op.LT: lambda a, b: a < b, Op.EQ: lambda a, b: a == b,
           Op.AND: lambda a, b: a and b}

    def ev(e):
        if isinstance(e, ir.Var):
            return env[e.name]
        if isinstance(e, ir.Lit):
            return dt(e.value) if e.type == FLOAT else e.value
        if isinstance(e, ir.Bin):
            return ops[e.op](ev(e.a), ev(e.b))
        if isinstance(e, ir.Call) and e.fn == "to_float":
            return dt(ev(e.args[0]))
        raise TypeError(e)

    for s in stmts:
        if isinstance(s, ir.Let):
            env[s.name] = ev(s.value)
        elif isinstance(s, ir.Assign):
            env[s.target.name] = ev(s.value)
        elif isinstance(s, ir.If):
            _run_ir(s.then if ev(s.cond) else s.orelse, env, splices, dt)
        elif isinstance(s, ir.Loop):
            for j in range(ev(s.start), ev(s.stop)):
                env[s.var] = j
                _run_ir(s.body, env, splices, dt)
        elif isinstance(s, ir.Splice):
            splices[s.name](env)
        elif not isinstance(s, ir.Comment):
            raise TypeError(s)
    return env


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_location_brackets_the_crossing(dtype):
    """codegen/build/locate.py's bracket, run: for a condition theta >= r the located theta
    (vg_hi) is the first sample at or after r narrowed by the halvings, r in (vg_lo, vg_hi]
    of width 2^-BISECTIONS; none before the last sample: the last sub-interval. With
    ``up`` the condition sees the extension at theta * up and t_n + theta * (u_dt * up)."""
    from vgpu_compiler.codegen.build import locate
    from vgpu_compiler.ir.events import BISECTIONS, SAMPLE_HALVINGS
    dt = np.dtype(dtype).type
    n = BISECTIONS[dtype]
    for up in (None, dt(0.375)):
        theta = "vg_mid" if up is None else "vg_fx"
        stmts = locate.bracket(n - SAMPLE_HALVINGS, up=None if up is None else Var("vg_up"))
        for r in (0.001, 0.0625, 0.3, 0.5, 0.77, 0.9999, 1.0):
            seen = []

            def hold(env):
                seen.append(env["tt"] == dt(2.0) + env["vg_mid"] * (
                    dt(0.5) if up is None else dt(0.5) * up))
                env["vg_hold"] = env[theta] >= dt(r) * (1 if up is None else up)

            env = _run_ir(stmts, {"t_n": dt(2.0), "u_dt": dt(0.5), "vg_up": up},
                          {"extension": lambda env: None, "hold": hold}, dt)
            lo, hi = env["vg_lo"], env["vg_hi"]
            assert all(seen) and len(seen) == 15 + n - SAMPLE_HALVINGS
            assert isinstance(hi, dt) and hi - lo == dt(2.0 ** -n), (r, lo, hi)
            assert lo < dt(r) <= hi or (r == 1.0 and hi == 1), (r, lo, hi)
    glsl = printer(GLSL_FLOAT64).text(locate.bracket(37))
    wgsl = printer(WGSL).text(locate.bracket(17))
    assert "double vg_lo = double(15) * 0.0625lf;" in glsl
    assert "for (var vg_b: i32 = 0; vg_b < 17; vg_b++) {" in wgsl
    assert "let vg_mid: f32 = (vg_lo + vg_hi) * 0.5;" in wgsl
    assert skeleton(glsl) == skeleton(printer(GLSL_FLOAT32).text(locate.bracket(37)))


def test_functions_and_words_in_each_spelling():
    """ir.Function, a local declared without a value and the word operators (the noise
    generator's, codegen/build/noise.py) print in each language's own form; the product
    of two words is each target's (mathlib.mulhilo): GLSL umulExtended (its halves where
    both words may be constants), WGSL the 16-bit halves, C a 64-bit multiply."""
    from vgpu_compiler.codegen import mathlib as M
    a, b = Var("a"), Var("b")
    fn = ir.Function("vg_f", ((ir.WORD, "a"), (ir.WORD, "b")), ir.WORD, (
        ir.Let("w", ir.WORD, None),
        ir.Assign(Var("w"), ir.bxor(ir.shr(a, 9), ir.band(b, ir.hexu(0xFFFF)), a)),
        ir.Return(Var("w"))), "a note")
    want = {"glsl": ["// a note", "uint vg_f(uint a, uint b) {", "    uint w;",
                     "    w = (a >> 9u) ^ (b & 0x0000FFFFu) ^ a;", "    return w;", "}"],
            "wgsl": ["// a note", "fn vg_f(a: u32, b: u32) -> u32 {", "    var w: u32;",
                     "    w = (a >> 9u) ^ (b & 0x0000FFFFu) ^ a;", "    return w;", "}"],
            "c": ["// a note", "static inline vg_word vg_f(vg_word a, vg_word b) {",
                  "    vg_word w;", "    w = (a >> 9u) ^ (b & 0x0000FFFFu) ^ a;", "    return w;",
                  "}"]}
    for lang, t in DIALECTS.items():
        assert printer(t).lines((fn,)) == want[lang], lang
    glsl, wgsl, c = (printer(t) for t in DIALECTS.values())
    ext = M.mulhilo(GLSL_FLOAT32, a, b, "m")
    assert glsl.lines(ext[0]) == ["umulExtended(a, b, m_hi, m_lo);"]
    assert glsl.lines(M.mulhilo(GLSL_FLOAT32, a, b, "m", constant=True)[0]) == \
        ["m_hi = vg_mulhi(a, b);", "m_lo = a * b;"]
    assert wgsl.lines(M.mulhilo(WGSL, a, b, "m")[0]) == ["m_hi = vg_mulhi(a, b);", "m_lo = a * b;"]
    stmts, hi, lo = M.mulhilo(C_FLOAT32, a, b, "m")
    assert c.lines(stmts) == ["m = ((uint64_t)a) * b;"]
    assert (c.expr(hi), c.expr(lo)) == ("((vg_word)(m >> 32u))", "((vg_word)(m & 0xFFFFFFFFu))")
    assert c.lines((M.word_add(C_FLOAT32, a, ir.hexu(1)),)) == \
        ["a = ((vg_word)((a + 0x00000001u) & 0xFFFFFFFFu));"]
    assert glsl.lines((M.word_add(GLSL_FLOAT32, a, ir.hexu(1)),)) == ["a += 0x00000001u;"]


def _bits_function():
    """A function with a while loop: the number of set bits of a uint (ir.While)."""
    m, c = Var("m"), Var("c")
    return ir.Function("vg_bits", ((ir.UINT, "x"),), INT, (
        ir.Let("m", ir.UINT, Var("x"), mutable=True),
        ir.Let("c", INT, i(0), mutable=True),
        ir.While(ir.ne(m, ir.u(0)), (
            ir.If(ir.ne(ir.band(m, ir.u(1)), ir.u(0)), (ir.Assign(c, i(1), Op.ADD),)),
            ir.Assign(m, ir.shr(m, 1))), comment="one bit a trip"),
        ir.Return(c)))


def test_a_while_loop_in_each_spelling(cpu, tmp_path):
    """ir.While prints as one ``while`` in the three languages (the C-style skeleton is
    one), validates as GLSL and compiles and runs as C: its trip count is the data's."""
    from vgpu_compiler.backends.cpu import toolchain
    fn = _bits_function()
    body = ["    while (m != 0u) {  // one bit a trip",
            "        if ((m & 1u) != 0u) {", "            c += 1;", "        }",
            "        m = m >> 1u;", "    }", "    return c;", "}"]
    want = {"glsl": ["int vg_bits(uint x) {", "    uint m = x;", "    int c = 0;", *body],
            "wgsl": ["fn vg_bits(x: u32) -> i32 {", "    var m: u32 = x;", "    var c: i32 = 0;",
                     *body],
            "c": ["static inline int vg_bits(unsigned x) {", "    unsigned m = x;",
                  "    int c = 0;", *body]}
    for lang, t in DIALECTS.items():
        assert printer(t).lines((fn,)) == want[lang], lang
    assert {"m", "c", "x"} <= ir.names((fn,))
    src = tmp_path / "w.comp"
    src.write_text("#version 450\nlayout(local_size_x = 1) in;\n"
                   "layout(std430, binding = 0) buffer B { int v[]; } b;\n"
                   + printer(GLSL_FLOAT32).text((fn,))
                   + "\nvoid main() { b.v[0] = vg_bits(uint(b.v[1])); }\n")
    run = subprocess.run([find_validator(), "-S", "comp", str(src)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    csrc = tmp_path / "w.c"
    csrc.write_text("#include <stdio.h>\n" + printer(C_FLOAT32).text((fn,)) + "\n"
                    "int main(void) { unsigned x; while (scanf(\"%u\", &x) == 1) "
                    "printf(\"%d\\n\", vg_bits(x)); return 0; }\n")
    exe = tmp_path / "w"
    build = subprocess.run([toolchain.compiler(), "-O2", "-Wall", "-Werror", "-o", str(exe),
                            str(csrc)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    xs = [0, 1, 2, 3, 255, 0x80000000, 0xFFFFFFFF, 12345]
    run = subprocess.run([str(exe)], input=" ".join(map(str, xs)), capture_output=True,
                         text=True)
    assert [int(v) for v in run.stdout.split()] == [bin(x).count("1") for x in xs]


def test_a_while_loop_validates_as_wgsl(wgpu):
    from vgpu_compiler.backends.wgpu import device
    code = (printer(WGSL).text((_bits_function(),))
            + "\n@group(0) @binding(0) var<storage, read_write> b: array<i32>;\n"
            "@compute @workgroup_size(1)\nfn main() { b[0] = vg_bits(u32(b[1])); }\n")
    device.get().device.create_shader_module(code=code)


def test_workgroup_synchronisation_in_each_spelling():
    """A barrier, a uniform load of a shared word (GLSL: its barrier, then the word; WGSL:
    workgroupUniformLoad, which is its own barrier) and a tree reduction's halving loop."""
    stmts = (ir.Barrier(comment="every lane is done"),
             ir.Barrier(load=True),
             ir.Let("done", BOOL, ir.eq(ir.UniformLoad("vg_vote"), i(0)), mutable=True),
             ir.Halve("w", 128, (ir.Let("i", ir.UINT, ir.call("local_index")), ir.Barrier())),
             ir.Blank(), ir.Line("x = y;"))
    glsl = printer(GLSL_FLOAT32).text(stmts).splitlines()
    wgsl = printer(WGSL).text(stmts).splitlines()
    assert glsl == ["barrier();  // every lane is done", "barrier();",
                    "bool done = vg_vote == 0;",
                    "for (uint w = 128u; w > 0u; w >>= 1) {",
                    "    uint i = gl_LocalInvocationIndex;", "    barrier();", "}", "", "x = y;"]
    assert wgsl == ["workgroupBarrier();  // every lane is done",
                    "var done: bool = workgroupUniformLoad(&vg_vote) == 0;",
                    "for (var w: u32 = 128u; w > 0u; w = w >> 1u) {",
                    "    let i: u32 = vg_lidx;", "    workgroupBarrier();", "}", "", "x = y;"]
