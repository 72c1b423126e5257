"""Significant correct digits of the stiff methods beside scipy's, on two problems of the
Test Set for IVP Solvers: ROBER (Robertson's kinetics to t = 1e5) and VDPOL (Van der
Pol, mu = 1000, to t = 2000), float64, one trajectory each.

The truth is scipy's Radau at rtol = 1e-12, atol = 1e-14; "digits" is -log10 of the
largest relative error of a final component; atol = rtol * 1e-4 on ROBER, rtol on
VDPOL. The VGPU columns run on the numpy reference (the compiled backends take the same
steps in float64: tests/test_more_stiff_methods.py).

    python -m benchmarks.stiff_digits [--backend numpy]
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOLS = {"rosenbrock23": (1e-3, 1e-4, 1e-5), "rodas4": (1e-6, 1e-8, 1e-10),
        "rodas5p": (1e-6, 1e-8, 1e-10)}


def _rober(t, y, k1=0.04, k2=3e7, k3=1e4):
    return [-k1 * y[0] + k3 * y[1] * y[2], k1 * y[0] - k3 * y[1] * y[2] - k2 * y[1] ** 2,
            k2 * y[1] ** 2]


def _vdpol(t, y, mu=1000.0):
    return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]


PROBLEMS = {  # name: (example, rhs, span, y0, atol / rtol)
    "ROBER": ("robertson.field", _rober, (0, 1e5), [1, 0, 0], 1e-4),
    "VDPOL": ("vanderpol_stiff.field", _vdpol, (0, 2000), [2, 0], 1.0),
}


def digits(got, want) -> float:
    return float(-np.log10(np.max(np.abs(np.asarray(got) - want) / np.abs(want))))


def main() -> None:
    import vgpu
    from scipy.integrate import solve_ivp
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy")
    args = ap.parse_args()
    print("| problem | rtol | method | VGPU steps | VGPU digits | scipy Radau steps | "
          "Radau digits | scipy BDF digits |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for prob, (example, rhs, span, y0, af) in PROBLEMS.items():
        src = (ROOT / "examples" / example).read_text()
        truth = solve_ivp(rhs, span, y0, method="Radau", rtol=1e-12, atol=1e-14).y[:, -1]
        for name, tols in TOLS.items():
            for rtol in tols:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sol = vgpu.solve(src.replace("rodas4(", f"{name}("), backend=args.backend,
                                     dtype="float64", dims={"N": 1}, rtol=rtol, atol=rtol * af)
                radau = solve_ivp(rhs, span, y0, method="Radau", rtol=rtol, atol=rtol * af)
                bdf = solve_ivp(rhs, span, y0, method="BDF", rtol=rtol, atol=rtol * af)
                print(f"| {prob} | {rtol:.0e} | {name} | {sol.steps_taken[0]} | "
                      f"{digits(sol.states[0], truth):.2f} | {len(radau.t) - 1} | "
                      f"{digits(radau.y[:, -1], truth):.2f} | "
                      f"{digits(bdf.y[:, -1], truth):.2f} |", flush=True)


if __name__ == "__main__":
    main()
