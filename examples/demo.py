"""`make demo`: a real example end to end.

Runs an ensemble of Lorenz trajectories (one rho per trajectory) on the backend
``backend="auto"`` chooses here (GLSL on a real GPU, else the native cpu backend,
else GLSL or wgpu on a CPU renderer, else the numpy reference), says which one
and why, checks it against the numpy reference, and runs it again to show the
kernel cache at work: the second call only writes buffers and dispatches.
"""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

import vgpu
from vgpu_compiler import backends

HERE = pathlib.Path(__file__).resolve().parent


def main(n: int = 65_536, out=None) -> str:
    """Run the demo on ``n`` trajectories, print its report to ``out`` (stdout) and
    return the name of the backend that ran it."""
    out = out or sys.stdout
    src = vgpu.load(HERE / "lorenz.field")
    rho = np.linspace(0.0, 21.0, n, dtype=np.float32)
    h0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    args = dict(params={"rho": rho}, dt=0.001, steps=1000)

    t = time.perf_counter()
    sol = vgpu.solve(src, h0, backend="auto", **args)
    cold = time.perf_counter() - t
    first = sol.states
    t = time.perf_counter()
    again = vgpu.run_field(src, h0 * 1.0, backend="auto", **args)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    ref = vgpu.run_field(src, h0, backend="numpy", **args)
    t_ref = time.perf_counter() - t

    why = backends.why_chosen(backends.get(sol.backend))
    err = float(np.max(np.abs(first - ref) / (1.0 + np.abs(ref))))
    print(f"Lorenz sweep: {n} trajectories x 1000 RK4 steps, rho in [0, 21]", file=out)
    print(f"  backend: {sol.backend}  ({why})", file=out)
    print(f"  first call (compile + run): {cold * 1e3:8.1f} ms", file=out)
    print(f"  second call (cached kernel): {warm * 1e3:8.1f} ms", file=out)
    print(f"  numpy reference:            {t_ref * 1e3:8.1f} ms", file=out)
    print(f"  max relative difference to the reference: {err:.2e}", file=out)
    print(f"  final state of the last trajectory (rho = 21): {np.round(first[-1], 4)}",
          file=out)
    print(f"  cache counters: {vgpu.cache_stats()}", file=out)
    assert np.array_equal(first, again), "the same input gave a different answer"
    assert err < 1e-3, f"backends disagree: {err:.3e}"
    print(f"demo OK (on the {sol.backend} backend)", file=out)
    return sol.backend


if __name__ == "__main__":
    main()
