"""IEEE meaning on the GPU backends: what the driver's compiler must not change.

Every test runs on GLSL and on wgpu. WGSL lets an implementation assume that no
NaN or infinity occurs in arithmetic (WGSL spec, floating-point evaluation) and
has no ``precise``: on wgpu, algebra such as ``x - x -> 0`` or ``x + x - x -> x``
may be applied, so the cases in WGPU_ALGEBRA are expected to differ there (xfail,
documented in docs/language.md); the helpers test NaN by its bits, so functions
and ``%``/``//`` keep numpy's meaning on wgpu too.

Mesa's GLSL compiler folds constants with non-IEEE algebra (``x * 0 -> 0``,
``x / 0 -> 0``, ``0 + x -> x``) and traps (SIGFPE) when its folder meets
``INT_MIN / -1``. These tests run both backends on values where that matters
and expect numpy's answers (NaN, infinities and the sign of zero included).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import vgpu

GPU = "glsl"        # the backend under test (set by the gpu fixture)
WGPU_ALGEBRA = {"x + x - x", "(x - x) * 2", "(x - x) / 0.0", "(x - x - 1) ^ 2147483647"}
WGPU_POW_RTOL = 4e-6    # docs/language.md: x ^ y is exp(y log x) in float32 on wgpu


def wgpu_algebra(expr: str) -> bool:
    """On wgpu, is ``expr`` one whose IEEE meaning the driver may fold away?"""
    return GPU == "wgpu" and expr in WGPU_ALGEBRA


def rtol_for(expr: str, rtol: float) -> float:
    return max(rtol, WGPU_POW_RTOL) if GPU == "wgpu" and "^" in expr else rtol


@pytest.fixture(autouse=True, params=["glsl", "wgpu"])
def gpu(request):
    """Each test on each GPU backend (float64 cases are not collected for wgpu: conftest)."""
    global GPU
    request.getfixturevalue(request.param)
    GPU = request.param
    yield request.param
    GPU = "glsl"


def run_both(expr: str, x, y=None, dtype="float32"):
    """``state z = expr`` over inputs ``x`` (and ``y``): (numpy, glsl) values."""
    x = np.asarray(x, dtype)
    inputs, decl = {"a": x}, "input a[N]\n input b[N]"
    inputs["b"] = np.broadcast_to(np.asarray(0 if y is None else y, dtype), x.shape).copy()
    src = (f"field f {{ {decl}\n grid i < N\n let x = a[i]\n let y = b[i]\n"
           f" state z = {expr}\n dz/dt = 0\n solve euler(dt = 1, steps = 0) }}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(vgpu.run_field(src, inputs=inputs, backend=b, dtype=dtype)
                     for b in ("numpy", GPU))


def assert_same(got, want, what=""):
    """Bit equality, any NaN equal to any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    uint = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    same = (got.view(uint) == want.view(uint)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what}: at {np.flatnonzero(~same)} got {got[~same]} want {want[~same]}"


# --- item 2: integer division never traps the driver's constant folder ----------------------
TRAPS = [
    "float((-2147483647 - 1 + j) // (-1 - j))",
    "float((-2147483647 - 1 + j) % (-1 - j))",
    "float(where(j == 0, 1, (-2147483647 - 1 + j) // (j - 1)))",
    "float(where(j != 0, (-2147483647 - 1) % j, 2))",
    "float((-2147483647 - 1) // (j - 1) + (i + j) // (j - 1))",
    "float(where(i >= 0, 3, i // j) + where(i < 0, i % j, 4))",
]
CHILD = textwrap.dedent("""
    import sys, warnings, numpy as np, vgpu
    warnings.simplefilter("ignore")
    src = ("field f {{ grid i < 4\\n let j = i - i\\n state z\\n dz/dt = {expr}\\n"
           " solve euler(dt = 1, steps = 1) }}")
    h0 = np.zeros(4, np.float32)
    ref = vgpu.run_field(src, h0, backend="numpy")
    out = vgpu.run_field(src, h0, backend="glsl")
    np.testing.assert_array_equal(out, ref)
    print("ok", ref.tolist())
""")


@pytest.mark.parametrize("expr", TRAPS)
def test_integer_division_never_traps_the_driver(expr):
    """A child process compiles and runs the program: a SIGFPE would kill it, not us."""
    run = subprocess.run([sys.executable, "-c", CHILD.format(expr=expr)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, f"rc={run.returncode}\n{run.stdout}\n{run.stderr}"
    assert run.stdout.startswith("ok")


def test_int_min_floordiv_minus_one_wraps_on_both_backends():
    """numpy: INT_MIN // -1 is INT_MIN (wraps), INT_MIN % -1 is 0; at run time too."""
    src = """field f { grid i < 4
        state z
        let m = -2147483647 - 1 + i * 0
        dz/dt = float(m // (i - i - 1)) + float(m % (i - i - 1))
        solve euler(dt = 1, steps = 1) }"""
    h0 = np.zeros(4, np.float32)
    ref = vgpu.run_field(src, h0, backend="numpy")
    np.testing.assert_array_equal(ref, np.float32(-2**31))
    np.testing.assert_array_equal(vgpu.run_field(src, h0, backend="glsl"), ref)


# --- item 5: float % and // are numpy's, bit for bit ---------------------------------------
def _operands(dtype, n=4000, seed=0):
    """Random pairs: ordinary, huge ratios, tiny ratios, subnormals, negatives, specials."""
    rng = np.random.default_rng(seed)
    info = np.finfo(dtype)
    lo, hi = np.log2(info.smallest_subnormal), np.log2(info.max)
    sign = lambda: rng.choice([-1.0, 1.0], n)                            # noqa: E731
    if dtype == "float64":      # subnormal divisors with moderate quotients too
        tiny = info.smallest_subnormal * rng.integers(1, 2**40, n)
        a_sub, b_sub = sign() * tiny * 2.0 ** rng.uniform(0, 250, n), sign() * tiny
    else:
        a_sub = b_sub = np.zeros(0)
    a = np.concatenate([rng.uniform(-10, 10, n), sign() * 2.0 ** rng.uniform(lo, hi, n), a_sub])
    b = np.concatenate([rng.uniform(-3, 3, n), sign() * 2.0 ** rng.uniform(lo, hi, n), b_sub])
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.1, 6.2831855, np.inf, -np.inf, np.nan,
                        info.smallest_subnormal, info.tiny, info.max], dtype)
    sa, sb = np.meshgrid(special, special)
    a = np.concatenate([a.astype(dtype), sa.ravel(), [1.0, 1.0, 100.0, 1000.0, -7.5]])
    b = np.concatenate([b.astype(dtype), sb.ravel(), [0.1, 0.3, 6.2831855, 6.2831855, 2.0]])
    a, b = a.astype(dtype), b.astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["%", "//"])
def test_float_mod_and_floordiv_are_numpys_bit_for_bit(op, dtype):
    a, b = _operands(dtype)
    ref, out = run_both(f"x {op} y", a, b, dtype=dtype)
    with np.errstate(all="ignore"):
        want = np.mod(a, b) if op == "%" else np.floor_divide(a, b)
    assert_same(ref, want, "numpy backend")
    assert_same(out, ref, f"x {op} y on GLSL ({dtype})")


def test_examples_of_the_issue():
    """1.0 // 0.1 is 9 and 1.0 % 0.1 is 0.09999999 (float32), phase wrapping is exact."""
    ref, out = run_both("x // 0.1 + 100 * (x % 0.1)", [1.0])
    assert_same(out, ref)
    ref, out = run_both("x % 6.2831855", [100.0, 1000.0, -1e6, 3e7])
    assert_same(out, ref)


# --- items 3, 4, 17: every float function and operator on special inputs ---------------------
def specials(dtype):
    info = np.finfo(dtype)
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
                     -info.smallest_subnormal, info.tiny / 3, info.tiny, 1e-7, 0.5, 1.0, -1.0,
                     2.0, -2.5, 3.0, 100.0, -100.0, 1e10, info.max, -info.max], dtype)


EXACT_UNARY = ["-x", "abs(x)", "sign(x)", "floor(x)", "ceil(x)", "sqrt(x)", "x ^ 0.5",
               "x ^ 2", "x ^ -1", "x ^ 0", "x * 0", "0 * x", "x / 0", "0 / x",
               "x + 0", "0 + x", "x - 0", "0 - x", "x * -0.0", "x / -0.0", "x // 0", "x % 0",
               "x + x - x", "x * 1", "x / 1", "where(x > 1.0, 0.0, 1.0) * x",
               "x * where(x < 0, -0.0, 0.0)", "(x - x) * 2", "-(0.0 - x)"]
# float32 only on GLSL (OpenGL has no double version); |x| <= 1e5 for sin, cos and tan
TRANSCENDENTAL = ["sin(x)", "cos(x)", "tan(x)", "asin(x)", "acos(x)", "atan(x)", "sinh(x)",
                  "cosh(x)", "tanh(x)", "exp(x)", "log(x)", "log2(x)", "0 * exp(x)",
                  "atan2(x, 1.0)", "atan2(1.0, x)", "atan2(x, -0.0)", "atan2(-0.0, x)",
                  "atan2(0.0, x)", "x ^ 0.3", "x ^ -1.5", "2 ^ x", "(-2) ^ x", "x ^ 3", "x ^ -7"]
EXACT_BINARY = ["x + y", "x - y", "x * y", "x / y", "x // y", "x % y", "min(x, y)", "max(x, y)",
                "clamp(x, y, 1.0)", "clamp(0.5, x, y)",
                "where(x < y, 1.0, 0.0) + where(x == y, 2.0, 0.0) + where(x >= y, 4.0, 0.0)"]


def assert_ieee_close(got, want, rtol, what):
    """NaN where numpy has NaN; infinities and zeros (with their sign) exact; else within rtol
    (and a few subnormals)."""
    got, want = np.asarray(got), np.asarray(want)
    if rtol == 0:
        return assert_same(got, want, what)
    assert (np.isnan(got) == np.isnan(want)).all(), f"{what} (NaN): got {got} want {want}"
    special = np.isinf(want) | (want == 0)
    assert_same(got[special], want[special], what + " (inf, zero)")
    with np.errstate(invalid="ignore"):
        tiny = 4 * np.finfo(want.dtype).smallest_subnormal
        near = np.abs(got - want) <= rtol * np.abs(want) + tiny
    ok = near | np.isnan(want) | special
    assert ok.all(), f"{what}: at {np.flatnonzero(~ok)} got {got[~ok]} want {want[~ok]}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expr", EXACT_UNARY)
def test_exact_operations_on_special_inputs(expr, dtype):
    if wgpu_algebra(expr):
        pytest.xfail("WGSL may assume no NaN/inf in arithmetic (x - x -> 0)")
    x = specials(dtype)
    ref, out = run_both(expr, x, dtype=dtype)
    assert_same(out, ref, f"{expr} ({dtype}) at {x}")


@pytest.mark.parametrize("expr", TRANSCENDENTAL)
def test_functions_on_special_inputs(expr):
    x = specials("float32")
    if expr[:3] in ("sin", "cos", "tan"):
        x = x[~(np.abs(x) > 1e5)]
    ref, out = run_both(expr, x)
    assert_ieee_close(out, ref, rtol_for(expr, 6e-7), f"{expr} at {x}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expr", EXACT_BINARY)
def test_exact_binary_operations_on_special_pairs(expr, dtype):
    s = specials(dtype)
    x, y = (v.ravel() for v in np.meshgrid(s, s))
    ref, out = run_both(expr, x, y, dtype=dtype)
    assert_same(out, ref, f"{expr} ({dtype})")


INT_POWER = "x ^ float(int(clamp(y, -5, 5)))"


@pytest.mark.parametrize("expr, dtype, rtol", [
    ("atan2(x, y)", "float32", 6e-7), ("x ^ y", "float32", 6e-7),
    (INT_POWER, "float32", 1.2e-7), (INT_POWER, "float64", 4.5e-16)])
def test_binary_functions_on_special_pairs(expr, dtype, rtol):
    """Powers are within an ulp of numpy's (whose float32 pow is itself not always
    correctly rounded: numpy gives 3^-3 = 0.037037034, the float nearest is 0.037037037)."""
    s = specials(dtype)
    x, y = (v.ravel() for v in np.meshgrid(s, s))
    ref, out = run_both(expr, x, y, dtype=dtype)
    assert_ieee_close(out, ref, rtol_for(expr, rtol), expr)


def test_issue_examples_keep_ieee_meaning():
    """x / 0.0, x / zero (a let folded to 0), 0 * exp(x), atan2(-0.0, x < 0), atan2(NaN, 0),
    tanh(NaN), (-inf) ^ 0.5 and (-1) ^ 2147483647 (float32: the exponent rounds to 2^31)."""
    x = np.array([1.0, -1.0, 0.0, np.nan, 1000.0, -2.0], np.float32)
    with np.errstate(all="ignore"):
        cases = [
            ("x / 0.0", x / np.float32(0)), ("x / (1.5 - 1.5)", x / np.float32(0)),
            ("0 * exp(x)", np.float32(0) * np.exp(x)),
            ("atan2(-0.0, x)", np.arctan2(np.float32(-0.0), x)),
            ("atan2(x, 0.0)", np.arctan2(x, np.float32(0))), ("tanh(x)", np.tanh(x)),
            ("(x - 1000 - 1 / 0.0) ^ 0.5", np.full(6, np.nan, np.float32)),
            ("(x - x - 1) ^ 2147483647", np.where(np.isnan(x), np.nan, 1).astype(np.float32))]
    for expr, want in cases:
        ref, out = run_both(expr, x)
        assert_same(ref, want, f"{expr} (numpy backend)")
        if not wgpu_algebra(expr):
            assert_ieee_close(out, ref, rtol_for(expr, 6e-7), expr)


J = "int(x - x)"      # 0, unknown to the folder


@pytest.mark.parametrize("folded, unfolded", [
    ("float((-2147483647 - 1) // -1)", f"float(({J} - 2147483647 - 1) // ({J} - 1))"),
    ("float((-2147483647 - 1) % -1)", f"float(({J} - 2147483647 - 1) % ({J} - 1))"),
    ("1.0 / 0.0", "x / 0.0"), ("-1.0 / 0.0", "-x / 0.0"), ("0.0 / 0.0", "(x - x) / 0.0"),
    ("(-1.0 / 0.0) ^ 0.5", "(-x / 0.0) ^ 0.5"), ("0.0 * (1.0 / 0.0)", "0.0 * (x / 0.0)"),
    ("atan2(-0.0, -1.0)", "atan2(-0.0, -x)"), ("(1.0 / 0.0) % 2.0", "(x / 0.0) % 2.0"),
    ("3.0 // (1.0 / 0.0)", "3.0 // (x / 0.0)"), ("-3.0 % (1.0 / 0.0)", "-3.0 % (x / 0.0)")])
def test_folded_and_unfolded_constants_agree(folded, unfolded):
    """The folding pass (numpy in float64) gives the IEEE answer the backends compute (x = 1)."""
    if wgpu_algebra(unfolded):
        pytest.xfail("WGSL may assume no NaN/inf in arithmetic (x - x -> 0)")
    x = np.ones(2, np.float32)
    ref_f, out_f = run_both(folded, x)
    ref_u, out_u = run_both(unfolded, x)
    assert_same(ref_f, ref_u, f"{folded} folded vs unfolded (numpy)")
    assert_same(out_f, ref_u, f"{folded} folded (GLSL)")
    assert_same(out_u, ref_u, f"{unfolded} (GLSL)")


# --- the helpers run no loops: llvmpipe's limiter ends every loop after 65535 iterations
# in a dispatch, silently, and the planner counts only the loops it knows of -----------------
LONG = """field f {{ grid i < 4
    state z, w, v
    dz/dt = 1
    dw/dt = z % 3.0
    dv/dt = (z - 3.0 * (z // 3.0) - z % 3.0) + 0 * ({terms})
    solve euler(dt = 1, steps = 66000) }}"""


@pytest.mark.parametrize("dtype, terms", [
    ("float32", "(z + 1) ^ 0.37 + tanh(z) + sinh(-1e-4 * z) + cosh(1e-4 * z) + atan2(z, 2.0)"
                " + asin(0.5) + acos(0.5) + log(z + 1) + log2(z + 1) + exp(-z) + atan(z)"),
    ("float64", "(z % 1e-300) + ceil(-z)")])
def test_helpers_take_no_loop_iterations(dtype, terms):
    """66,000 steps, 65,534 in the first dispatch (the planner's cap): a loop in vg_cfmod
    would be cut by the limiter and leave later remainders unreduced."""
    h0 = np.zeros((4, 3), dtype)
    out = vgpu.run_field(LONG.format(terms=terms), h0, backend="glsl", dtype=dtype)
    np.testing.assert_array_equal(out, np.tile(np.array([66000, 66000, 0], dtype), (4, 1)))
