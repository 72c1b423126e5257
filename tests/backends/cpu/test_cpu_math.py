"""The cpu backend's math functions: every function of the language runs vectorised in
both dtypes (libmvec's SIMD variants in the lane loops, not one libm call per lane),
a literal power (x^3) does not stop a lane loop from vectorising, and every function is
within its documented error of the exact value (docs/language.md, "cpu backend
arithmetic"), with libmvec and with the scalar fallback (VGPU_CPU_LIBMVEC=0, or a C
library whose libmvec does not load)."""
from __future__ import annotations

import platform
import re
import subprocess

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import kernel, toolchain
from vgpu_compiler.frontend.compile import compile_program

GLIBC = platform.libc_ver()[0] == "glibc"
MVEC = platform.machine() == "x86_64" and GLIBC
NEW = MVEC and tuple(int(p) for p in platform.libc_ver()[1].split(".")[:2]) >= (2, 35)
UNARY = ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "exp", "log",
         "log2", "sqrt", "floor", "ceil", "abs"]
MVEC22 = {"sin", "cos", "exp", "log", "pow"}         # in libmvec since glibc 2.22
ULPS = 4.0          # the documented bound (measured: 3.3 ulp in float64, 3.1 in float32)
EXACT = {"sqrt", "floor", "ceil", "abs"}            # correctly rounded: 0.5 ulp
INLINE = {"exp"}    # helpers.c.j2's own vectorisable code, not libmvec's (nor libm's)
INLINE_SCALAR = INLINE | {"log", "tanh"}    # ... where there is no libmvec (its are faster)


def _inline(fn: str, dtype: str) -> bool:
    """helpers.c.j2's own code where libmvec is used: exp, and tanh in float64 (faster than
    libmvec's tanh; in float32 libmvec's tanhf is the faster)."""
    return fn in INLINE or (fn == "tanh" and dtype == "float64")


def _call(fn: str, a: str = "w[i]", b: str = "v[i]") -> str:
    return {"atan2": f"atan2({a}, {b})", "pow": f"pow({a}, {b})"}.get(fn, f"{fn}({a})")


def _src(fn: str) -> str:
    return f"""field f {{ input w[N], v[N]
        grid i < N
        state y = 0
        dy/dt = {_call(fn)}
        solve euler(dt = 1, steps = 1) }}"""


def _asm_calls(src: str, dtype: str, tmp_path, extra=()) -> list[str]:
    field = compile_program(src, "f.field").select(None)
    c = tmp_path / "k.c"
    c.write_text(kernel.source(field, dtype)[0])
    flags = [f for f in toolchain.FLAGS if f != "-shared"] + list(extra)
    asm = subprocess.run([toolchain.compiler(), *flags, "-S", "-o", "-", str(c)],
                         capture_output=True, text=True, check=True).stdout
    return re.findall(r"(?:call|jmp)\s+(\S+?)(?:@PLT)?\n", asm)


def _names(fn: str, dtype: str) -> set[str]:
    base = {"abs": "fabs"}.get(fn, fn)
    return {base + "f", base} if dtype == "float32" else {base}


@pytest.mark.skipif(not MVEC, reason="libmvec's SIMD functions are glibc's, on x86-64")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", [f for f in UNARY if f not in EXACT] + ["atan2", "pow"])
def test_every_function_is_a_simd_call(fn, dtype, cpu, tmp_path):
    """A lane loop calls the SIMD variant (_ZGV...), never the scalar function: float64
    kernels called libm once per lane for every function before."""
    if fn not in MVEC22 and not NEW:
        pytest.skip("glibc before 2.35 has no SIMD variant of " + fn)
    calls = _asm_calls(_src(fn), dtype, tmp_path)
    scalar = [f for f in calls if f in _names(fn, dtype) | {"sincos", "sincosf"}]
    vector = [f for f in calls if f.startswith("_ZGV")]
    if _inline(fn, dtype):      # arithmetic in the lane loop: no call at all
        assert not vector and not scalar, (vector, scalar)
    else:
        assert vector and not scalar, (vector, scalar)


@pytest.mark.skipif(not MVEC, reason="libmvec's SIMD functions are glibc's, on x86-64")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_literal_power_keeps_the_lane_loop_vectorised(dtype, cpu, tmp_path):
    """x^3 (vg_powi's loop over the exponent's bits) stopped gcc from vectorising the
    lane loop around it: Duffing's sin ran one scalar call per lane."""
    src = """field duffing { state x, v
        dx/dt = v
        dv/dt = 0.3 * sin(x) - 0.2 * v + x - x ^ 3
        solve rk4(dt = 0.01, steps = 10) }"""
    calls = _asm_calls(src, dtype, tmp_path)
    assert any(f.startswith("_ZGV") for f in calls), calls
    assert not [f for f in calls if f in ("sin", "sinf")], calls


@pytest.mark.parametrize("fn", UNARY + ["atan2", "pow"])
def test_a_kernel_without_libmvec_calls_the_scalar_functions(fn, cpu, tmp_path):
    calls = _asm_calls(_src(fn), "float64", tmp_path, extra=[toolchain.NO_LIBMVEC])
    assert not [f for f in calls if f.startswith("_ZGV")], calls
    if fn in INLINE_SCALAR:         # no call
        assert not [f for f in calls if f in _names(fn, "float64")], calls


def _domain(fn: str, n: int, rng):
    u = lambda lo, hi: rng.uniform(lo, hi, n)       # noqa: E731
    if fn in ("asin", "acos"):
        return u(-1, 1), u(0, 1)
    if fn in ("log", "log2", "sqrt"):
        return np.exp(u(-80, 80)), u(0, 1)
    if fn in ("sinh", "cosh", "exp"):
        return u(-85, 85), u(0, 1)
    if fn in ("sin", "cos", "tan"):
        return np.concatenate([u(-10, 10)[: n // 2], u(-1e4, 1e4)[n // 2:]]), u(0, 1)
    if fn == "atan":
        return np.concatenate([u(-10, 10)[: n // 2], np.exp(u(-30, 30))[n // 2:]]), u(0, 1)
    if fn == "pow":
        return u(0, 10), u(-20, 20)
    return u(-10, 10), u(-10, 10)


_EXACT_FN = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "abs": np.abs,
             "atan2": np.arctan2, "pow": np.power}


def max_ulps(fn: str, dtype: str, backend: str = "cpu", n: int = 20000) -> float:
    """The largest error of ``fn`` on ``backend``, in ulps of ``dtype``, against the exact
    value (long double: 11 more bits than float64 on x86-64) of its rounded arguments."""
    rng = np.random.default_rng(1)
    w, v = (x.astype(dtype) for x in _domain(fn, n, rng))
    got = vgpu.run_field(_src(fn), inputs={"w": w, "v": v},
                         backend=backend, dtype=dtype)
    ref = _EXACT_FN.get(fn) or getattr(np, fn)
    L = np.longdouble
    exact = ref(w.astype(L), v.astype(L)) if fn in ("atan2", "pow") else ref(w.astype(L))
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = exact.astype(dtype)
        ok = np.isfinite(rounded) & np.isfinite(got)
        assert np.array_equal(np.isfinite(rounded), np.isfinite(got)), fn
        ulp = np.maximum(np.spacing(np.abs(rounded[ok])).astype(L),
                         L(np.finfo(dtype).smallest_subnormal))
        return float(np.max(np.abs(got[ok].astype(L) - exact[ok]) / ulp))


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="needs an 80-bit long double")
@pytest.mark.filterwarnings("ignore")      # sinh, exp ... overflow in float32: inf, as exact
@pytest.mark.parametrize("libmvec", [True, False], ids=["libmvec", "scalar"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_function_is_within_its_bound(dtype, libmvec, cpu, monkeypatch, tmp_path):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    if not libmvec:
        monkeypatch.setenv(toolchain.LIBMVEC_ENV, "0")
    for fn in UNARY + ["atan2", "pow"]:
        err = max_ulps(fn, dtype)
        assert err <= (0.5 if fn in EXACT else ULPS), (fn, err)


def test_a_c_library_without_libmvec_gets_the_scalar_calls(monkeypatch, tmp_path):
    """The probe's library names a SIMD variant; where that does not load ("undefined
    symbol: _ZGV..."), the kernels are compiled with VG_NO_LIBMVEC (scalar calls)."""
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_no_libmvec", [])
    real, seen = toolchain.build, []

    def build(source, name, **kw):
        seen.append(toolchain.flags(toolchain.compiler()))
        if len(seen) == 1:
            raise OSError("kernel.so: undefined symbol: _ZGVeN8v_exp")
        return real(source, name, **kw)

    monkeypatch.setattr(toolchain, "build", build)
    if toolchain.compiler() is None:
        pytest.skip("no C compiler")
    assert toolchain._probe() == (True, "")
    assert toolchain.NO_LIBMVEC not in seen[0] and toolchain.NO_LIBMVEC in seen[1]
    assert toolchain.NO_LIBMVEC in toolchain.flags(toolchain.compiler())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_c_library_other_than_glibc_compiles_the_scalar_calls(dtype, cpu, tmp_path):
    """Without glibc (musl, macOS) there is no __GLIBC_PREREQ: the helpers' test of the
    glibc version must not be an expression the preprocessor cannot read."""
    field = compile_program(_src("exp"), "f.field").select(None)
    text = kernel.source(field, dtype)[0].replace(
        "#include <math.h>\n", "#include <math.h>\n#undef __GLIBC__\n#undef __GLIBC_PREREQ\n", 1)
    c = tmp_path / "k.c"
    c.write_text(text)
    flags = [f for f in toolchain.FLAGS if f not in ("-shared", "-w")]
    out = subprocess.run([toolchain.compiler(), *flags, "-S", "-o", "-", str(c)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "_ZGV" not in out.stdout


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="needs an 80-bit long double")
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_inline_exp_at_its_edges(dtype, cpu, monkeypatch, tmp_path):
    """helpers.c.j2's exp where its reduction and scaling end: subnormal results (rounded
    once), underflow to 0, overflow to inf, the infinities and NaN, within 1.05 ulp of
    the exact value (measured: 1.02), subnormals within an ulp of the smallest one."""
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    lo, hi = (-110.0, 110.0) if dtype == "float32" else (-760.0, 720.0)
    edge = (-104.0, 88.72, 104.0) if dtype == "float32" else (-745.2, 709.78, 710.0)
    w = np.concatenate([np.linspace(lo, hi, 20001), np.linspace(edge[0] - 2, edge[0] + 2, 4001),
                        np.linspace(edge[1] - 1, edge[1] + 1, 2001), edge,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, -1000.0, 1000.0]]).astype(dtype)
    got = vgpu.run_field(_src("exp"), inputs={"w": w, "v": w}, backend="cpu", dtype=dtype)
    L = np.longdouble
    exact = np.exp(w.astype(L))
    rounded = exact.astype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(w))
    assert np.array_equal(np.isposinf(got), np.isposinf(rounded))
    assert np.all(got[np.isneginf(w)] == 0) and np.all(got[~np.isnan(w)] >= 0)
    ok = np.isfinite(rounded) & ~np.isnan(w)
    ulp = np.maximum(np.spacing(np.abs(rounded[ok])).astype(L),
                     L(np.finfo(dtype).smallest_subnormal))
    err = np.abs(got[ok].astype(L) - exact[ok]) / ulp
    assert float(err.max()) <= 1.05, float(err.max())


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="needs an 80-bit long double")
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_inline_log_at_its_edges(dtype, cpu, monkeypatch, tmp_path):
    """helpers.c.j2's log (where there is no libmvec) on random bit patterns (every
    positive exponent, subnormals too, scaled before the reduction), around 1 and
    sqrt(2)/2 (where the reduction turns), and numpy's log exactly at 0, -0, negatives, inf, -inf and NaN: within
    0.8 ulp of the exact value (measured: 0.77 in float32, 0.76 in float64)."""
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(toolchain.LIBMVEC_ENV, "0")
    rng = np.random.default_rng(3)
    fi, word = np.finfo(dtype), (np.uint32 if dtype == "float32" else np.uint64)
    bits = rng.integers(0, np.iinfo(word).max // 2, 40000, dtype=word).view(dtype)
    w = np.concatenate([bits, 1 + rng.uniform(-1e-3, 1e-3, 4000), np.sqrt(0.5) * (
        1 + rng.uniform(-1e-5, 1e-5, 2000)), np.exp(rng.uniform(-5, 5, 4000)),
        [fi.smallest_subnormal, fi.tiny, fi.tiny * (1 - fi.eps), fi.max, 1.0, 2.0, 0.5,
         0.0, -0.0, -1.0, -fi.smallest_subnormal, np.inf, -np.inf, np.nan]]).astype(dtype)
    got = vgpu.run_field(_src("log"), inputs={"w": w, "v": w}, backend="cpu", dtype=dtype)
    with np.errstate(all="ignore"):
        want = np.log(w)
    special = ~(np.isfinite(w) & (w > 0))
    np.testing.assert_array_equal(got[special], want[special])      # (NaN equals NaN here)
    L = np.longdouble
    exact = np.log(w[~special].astype(L))
    ulp = np.spacing(np.abs(exact.astype(dtype))).astype(L)
    err = np.abs(got[~special].astype(L) - exact) / ulp
    assert float(err.max()) <= 0.8, float(err.max())


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="needs an 80-bit long double")
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_inline_tanh_at_its_edges(dtype, cpu, monkeypatch, tmp_path):
    """helpers.c.j2's tanh (where there is no libmvec; float64 always) around 0.625, where
    it turns from the polynomial to 1 - 2 / (exp(2|x|) + 1), on small, subnormal and huge
    arguments, past exp's overflow (+-1), and at inf and NaN: within 1.5 ulp of the exact
    value (measured: 1.31 in float32, 1.29 in float64)."""
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(toolchain.LIBMVEC_ENV, "0")
    rng = np.random.default_rng(5)
    fi = np.finfo(dtype)
    w = np.concatenate([rng.uniform(-1, 1, 20000), rng.uniform(-25, 25, 10000),
                        np.exp(rng.uniform(-100, 5, 10000)), np.linspace(0.6, 0.65, 4001),
                        -np.linspace(0.6, 0.65, 4001), [fi.smallest_subnormal, -fi.tiny, 400.0,
                        -800.0, fi.max, -fi.max, np.inf, -np.inf, np.nan]]).astype(dtype)
    got = vgpu.run_field(_src("tanh"), inputs={"w": w, "v": w}, backend="cpu", dtype=dtype)
    np.testing.assert_array_equal(got[-3:], [1.0, -1.0, np.nan])
    L = np.longdouble
    exact = np.tanh(w[:-3].astype(L))
    ulp = np.maximum(np.spacing(np.abs(exact.astype(dtype))).astype(L),
                     L(fi.smallest_subnormal))
    err = np.abs(got[:-3].astype(L) - exact) / ulp
    assert float(err.max()) <= 1.5, float(err.max())


@pytest.mark.filterwarnings("ignore")
def test_the_inline_sin_and_cos_at_their_edges(cpu, monkeypatch, tmp_path):
    """helpers.c.j2's float32 sin and cos (where there is no libmvec) on random bit
    patterns (every exponent: the Payne-Hanek reduction from 2^28 up, negatives too),
    near multiples of pi/2, below 2^-12 and at inf and NaN: within 0.6 ulp of numpy's
    float64 value of the float32 argument (measured: 0.501)."""
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(toolchain.LIBMVEC_ENV, "0")
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 60000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (np.arange(-2000, 2000) * (np.pi / 2)).astype(np.float32)
    w = np.concatenate([bits[np.isfinite(bits)], rng.uniform(-10, 10, 20000), near,
                        [2.0**28, -2.0**28, 2.0**28 - 16, 2.0**-12, -2.0**-13, 1e-45, 3.4e38,
                         np.inf, -np.inf, np.nan]]).astype(np.float32)
    for fn in ("sin", "cos"):
        got = vgpu.run_field(_src(fn), inputs={"w": w, "v": w}, backend="cpu", dtype="float32")
        assert np.isnan(got[-3:]).all(), got[-3:]
        want = getattr(np, fn)(w[:-3].astype(np.float64))
        ulp = np.maximum(np.spacing(np.abs(want.astype(np.float32))).astype(np.float64),
                         np.finfo(np.float32).smallest_subnormal)
        err = np.abs(got[:-3].astype(np.float64) - want) / ulp
        assert float(err.max()) <= 0.6, (fn, float(err.max()), w[np.argmax(err)])
