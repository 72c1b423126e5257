"""Accuracy of every float32 math function on GLSL over the float range.

Each function is evaluated on ~60,000 float32 points: magnitudes spread
geometrically from the smallest subnormal to the largest float of its domain
(both signs), plus a dense linear sweep of [-10, 10]. The error of a value is
``|value - exact| / max(|exact|, FLT_MIN)`` with ``exact`` the float64 numpy
value (subnormal results are measured against FLT_MIN: an absolute error
there). ``python tests/backends/glsl/test_glsl_accuracy.py`` prints the table of
docs/reliability.md.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu

F32 = np.finfo(np.float32)
# function -> (largest |x| swept, only x > 0); sin/cos/tan: see docs/reliability.md
DOMAINS = {"sin": (1e5, False), "cos": (1e5, False), "tan": (1e5, False),
           "asin": (1.0, False), "acos": (1.0, False), "atan": (F32.max, False),
           "sinh": (100.0, False), "cosh": (100.0, False), "tanh": (F32.max, False),
           "exp": (104.0, False), "log": (F32.max, True), "log2": (F32.max, True),
           "sqrt": (F32.max, True)}
NUMPY = {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}
# the bar every function meets: 4 ulp-ish relative (numpy's own float32 functions: <= 3e-7)
BAR = 5e-7


def points(fn: str) -> np.ndarray:
    hi, positive = DOMAINS[fn]
    mags = np.geomspace(F32.smallest_subnormal, hi, 20001)
    parts = [mags, np.linspace(-min(hi, 10), min(hi, 10), 20001)]
    if not positive:
        parts.append(-mags)
    x = np.concatenate(parts).astype(np.float32)
    return x[x > 0] if positive else x


def run(fn: str, x: np.ndarray, backend: str) -> np.ndarray:
    src = (f"field f {{ input w[N]\n grid i < N\n state y = {fn}(w[i])\n dy/dt = 0\n"
           f" solve euler(dt = 1, steps = 0) }}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vgpu.run_field(src, inputs={"w": x}, backend=backend)


def errors(fn: str) -> dict:
    """Max relative error of GLSL and numpy (float32) against exact, and GLSL vs numpy."""
    x = points(fn)
    with np.errstate(all="ignore"):
        exact = getattr(np, NUMPY.get(fn, fn))(x.astype(np.float64))
    finite = np.abs(exact) <= F32.max
    out = {}
    values = {b: run(fn, x, b).astype(np.float64) for b in ("glsl", "numpy")}
    for name, v, ref in [("glsl", values["glsl"], exact), ("numpy", values["numpy"], exact),
                         ("glsl_vs_numpy", values["glsl"], values["numpy"])]:
        with np.errstate(invalid="ignore"):
            err = np.abs(v - ref) / np.maximum(np.abs(ref), F32.tiny)
        assert (np.isinf(v[~finite]) | np.isnan(exact[~finite])).all(), f"{fn}: overflow"
        err = np.where(finite & (v != ref), err, 0.0)
        out[name] = float(err.max())
        out[name + "_at"] = float(x[np.argmax(err)])
    return out


pytestmark = pytest.mark.usefixtures("glsl")


@pytest.mark.parametrize("fn", list(DOMAINS))
def test_float32_function_accuracy_over_the_float_range(fn):
    e = errors(fn)
    assert e["numpy"] <= BAR, e                  # the oracle itself
    assert e["glsl"] <= BAR, e


if __name__ == "__main__":
    print("| function | range of |x| | GLSL vs exact | numpy vs exact | GLSL vs numpy |")
    print("|---|---|---|---|---|")
    for fn in DOMAINS:
        e = errors(fn)
        hi, positive = DOMAINS[fn]
        rng = f"(0, {hi:.3g}]" if positive else f"[0, {hi:.3g}]"
        print(f"| `{fn}` | {rng} | {e['glsl']:.2e} | {e['numpy']:.2e} | "
              f"{e['glsl_vs_numpy']:.2e} |")
