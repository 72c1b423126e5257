"""Stiff kinetics: 16,384 Robertson trajectories with rodas4, beside scipy and diffrax.

Robertson's three-species kinetics (examples/robertson.field's equations) to
t = 1e5, float64, rtol = 1e-6, atol = 1e-10, k1 swept over two decades, one
value per trajectory (passed per trajectory: GLSL has no double `pow`):
- VGPU GLSL, VGPU cpu, the VGPU reference (numpy): `solve rodas4`, warm calls;
- scipy `solve_ivp(method="BDF")` per trajectory with the analytic Jacobian,
  timed on a sample and scaled to N (labelled so);
- diffrax `Kvaerno5` + PIDController under `jit(vmap)`, if installed.
Every column's final state is checked against scipy Radau (rtol 1e-10) on the
sampled trajectories. Target (issue 14): GLSL >= 50x the scipy loop, and ahead
of diffrax.

    python -m benchmarks.stiff [--n 16384] [--sample 64] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

T1, RTOL, ATOL, K2, K3 = 1e5, 1e-6, 1e-10, 3e7, 1e4
SRC = """field robertson {
    param k1 = 0.04
    param k2 = 3e7
    param k3 = 1e4
    state y1 = 1, y2 = 0, y3 = 0
    dy1/dt = -k1 * y1 + k3 * y2 * y3
    dy2/dt = k1 * y1 - k3 * y2 * y3 - k2 * y2 * y2
    dy3/dt = k2 * y2 * y2
    solve rodas4(t1 = 1e5, rtol = 1e-6, atol = 1e-10)
}"""


def rates(n: int) -> np.ndarray:
    return 0.04 * 10.0 ** (2.0 * np.arange(n) / max(n - 1, 1))


def _f(k1):
    def f(t, y):
        a, b, c = y
        return [-k1 * a + K3 * b * c, k1 * a - K3 * b * c - K2 * b * b, K2 * b * b]

    def jac(t, y):
        a, b, c = y
        return [[-k1, K3 * c, K3 * b], [k1, -K3 * c - 2 * K2 * b, -K3 * b],
                [0.0, 2 * K2 * b, 0.0]]
    return f, jac


def scipy_loop(k, method, rtol, atol):
    from scipy.integrate import solve_ivp
    out, steps = np.empty((len(k), 3)), np.empty(len(k), int)
    for j, k1 in enumerate(k):
        f, jac = _f(k1)
        sol = solve_ivp(f, (0.0, T1), [1.0, 0.0, 0.0], method=method, rtol=rtol, atol=atol,
                        jac=jac)
        out[j], steps[j] = sol.y[:, -1], sol.t.size - 1
    return out, steps


def vgpu_column(backend: str, k):
    import vgpu
    vgpu.solve(SRC, params={"k1": k[:64]}, backend=backend, dtype="float64")     # compile
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = vgpu.solve(SRC, params={"k1": k}, backend=backend, dtype="float64")
    return time.perf_counter() - began, np.asarray(sol.states), np.asarray(sol.steps_taken)


def diffrax_column(k):
    import jax
    jax.config.update("jax_enable_x64", True)
    import diffrax
    import jax.numpy as jnp

    def rhs(t, y, k1):
        a, b, c = y[0], y[1], y[2]
        return jnp.stack([-k1 * a + K3 * b * c, k1 * a - K3 * b * c - K2 * b * b, K2 * b * b])

    def one(k1):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rhs), diffrax.Kvaerno5(), 0.0, T1, 1e-6, jnp.array([1.0, 0.0, 0.0]),
            args=k1, stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL),
            max_steps=100_000)
        return sol.ys[-1], sol.stats["num_accepted_steps"]
    run = jax.jit(jax.vmap(one))
    jax.block_until_ready(run(jnp.asarray(k[:64])))          # compile (another shape: warm)
    ks = jnp.asarray(k)
    jax.block_until_ready(run(ks))                            # compile at N
    began = time.perf_counter()
    ys, steps = jax.block_until_ready(run(ks))
    return time.perf_counter() - began, np.asarray(ys), np.asarray(steps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--sample", type=int, default=64, help="trajectories scipy runs")
    p.add_argument("--columns", default="glsl,cpu,numpy,scipy,diffrax")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n, want = args.n, set(args.columns.split(","))
    k = rates(n)
    pick = np.linspace(0, n - 1, min(args.sample, n)).astype(int)
    truth, _ = scipy_loop(k[pick], "Radau", 1e-10, 1e-14)
    rows = []

    def add(name, seconds, states, steps, scaled=False):
        err = np.max(np.abs(states[pick] - truth) / (ATOL + RTOL * np.abs(truth))) \
            if states is not None else float("nan")
        rows.append(dict(column=name, seconds=seconds, scaled=scaled, err=float(err),
                         steps_min=int(np.min(steps)), steps_max=int(np.max(steps))))

    for backend in ("glsl", "cpu", "numpy"):
        if backend in want:
            try:
                add(f"VGPU {backend}", *vgpu_column(backend, k))
            except Exception as exc:          # noqa: BLE001 - a column that cannot run says why
                rows.append(dict(column=f"VGPU {backend}", error=str(exc)[:200]))
    if "scipy" in want:
        began = time.perf_counter()
        out, steps = scipy_loop(k[pick], "BDF", RTOL, ATOL)
        took = (time.perf_counter() - began) * n / len(pick)
        full = np.full((n, 3), np.nan)
        full[pick] = out
        add(f"scipy BDF (sampled {len(pick)}, scaled)", took, full, steps, scaled=True)
    if "diffrax" in want:
        try:
            add("diffrax Kvaerno5", *diffrax_column(k))
        except Exception as exc:              # noqa: BLE001
            rows.append(dict(column="diffrax Kvaerno5", error=str(exc)[:200]))
    glsl = next((r["seconds"] for r in rows if r["column"] == "VGPU glsl" and "seconds" in r),
                None)
    print(f"Robertson, N = {n:,}, rodas4 to t = 1e5, float64, rtol = {RTOL:g}, "
          f"atol = {ATOL:g}; err: max |y - Radau| / (atol + rtol |y|) on {len(pick)} "
          f"trajectories")
    print(f"{'column':<34} {'seconds':>9} {'x GLSL':>8} {'steps':>11} {'err':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['column']:<34} failed: {r['error']}")
            continue
        ratio = f"{r['seconds'] / glsl:8.2f}" if glsl else "       -"
        print(f"{r['column']:<34} {r['seconds']:9.3f} {ratio} "
              f"{r['steps_min']:>5}..{r['steps_max']:<5} {r['err']:8.3f}")
    result = {"n": n, "rows": rows}
    for peer, need in (("scipy BDF", 50.0), ("diffrax", 1.0)):
        other = next((r["seconds"] for r in rows if r["column"].startswith(peer)
                      and "seconds" in r), None)
        if glsl and other:
            ratio = other / glsl
            result[f"target {peer}"] = {"ratio": ratio, "need": need, "met": ratio >= need}
            print(f"target VGPU GLSL >= {need:g}x {peer}: {ratio:.1f}x "
                  f"({'met' if ratio >= need else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
