"""`make demo`: a real example end to end.

Runs an ensemble of Lorenz trajectories (one rho per trajectory) on the best
backend available (GLSL through OpenGL compute, else the numpy reference),
checks it against the numpy reference, and runs it again to show the kernel
cache at work: the second call only writes buffers and dispatches.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

import vgpu

HERE = pathlib.Path(__file__).resolve().parent


def main() -> None:
    src = vgpu.load(HERE / "lorenz.field")
    n = 65_536
    rho = np.linspace(0.0, 21.0, n, dtype=np.float32)
    h0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    args = dict(params={"rho": rho}, dt=0.001, steps=1000)

    t = time.perf_counter()
    first = vgpu.run_field(src, h0, backend="auto", **args)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    again = vgpu.run_field(src, h0 * 1.0, backend="auto", **args)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    ref = vgpu.run_field(src, h0, backend="numpy", **args)
    t_ref = time.perf_counter() - t

    err = float(np.max(np.abs(first - ref) / (1.0 + np.abs(ref))))
    print(f"Lorenz sweep: {n} trajectories x 1000 RK4 steps, rho in [0, 21]")
    print(f"  first call (compile + run): {cold * 1e3:8.1f} ms")
    print(f"  second call (cached kernel): {warm * 1e3:8.1f} ms")
    print(f"  numpy reference:            {t_ref * 1e3:8.1f} ms")
    print(f"  max relative difference to the reference: {err:.2e}")
    print(f"  final state of the last trajectory (rho = 21): {np.round(first[-1], 4)}")
    print(f"  cache counters: {vgpu.cache_stats()}")
    assert np.array_equal(first, again), "the same input gave a different answer"
    assert err < 1e-3, f"backends disagree: {err:.3e}"
    print("demo OK")


if __name__ == "__main__":
    main()
