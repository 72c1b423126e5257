"""IEEE meaning on the GLSL backend: what the driver's compiler must not change.

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

pytestmark = pytest.mark.usefixtures("glsl")


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
                     for b in ("numpy", "glsl"))


def assert_same(got, want, what=""):
    """Bit equality, any NaN equal to any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    uint = np.uint32 if got.dtype == np.float32 else np.uint64
    same = (got.view(uint) == want.view(uint)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what}: got {got[~same]} want {want[~same]}"


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
    a = np.concatenate([rng.uniform(-10, 10, n), sign() * 2.0 ** rng.uniform(lo, hi, n)])
    b = np.concatenate([rng.uniform(-3, 3, n), sign() * 2.0 ** rng.uniform(lo, hi, n)])
    special = np.array([0.0, -0.0, 1.0, -1.0, 0.1, 6.2831855, np.inf, -np.inf, np.nan,
                        info.smallest_subnormal, info.tiny, info.max], dtype)
    sa, sb = np.meshgrid(special, special)
    a = np.concatenate([a.astype(dtype), sa.ravel(), [1.0, 1.0, 100.0, 1000.0, -7.5]])
    b = np.concatenate([b.astype(dtype), sb.ravel(), [0.1, 0.3, 6.2831855, 6.2831855, 2.0]])
    return a.astype(dtype), b.astype(dtype)


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
