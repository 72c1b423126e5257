"""Kuramoto populations: basins of 256 coupled oscillators (shared memory + reductions).

N = 262144 oscillators = 1024 populations of 256, 1000 RK4 steps, dt = 0.01,
K = 2. VGPU GLSL runs every step. The numpy columns (VGPU's reference backend
and a hand-vectorised numpy RK4 with reshape + mean) are run for fewer steps
and their time is scaled linearly to the full step count: the table says so.
Agreement is checked on the short run, where all columns start from the same
state and the dynamics have not yet amplified rounding differences.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from .common import Config, Result, Table, Target, describe_error, measure, vgpu_module
from .peers import numpy_rk4

NAME = "kuramoto"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "kuramoto.field"
BASIN, K, DT = 256, 2.0, 0.01
DEFAULT_N, STEPS, REF_STEPS = 262144, 1000, 50
QUICK_N, QUICK_STEPS, QUICK_REF_STEPS = 2048, 50, 10


def _vgpu(backend, theta0, omega, steps):
    vgpu, why = vgpu_module()
    if vgpu is None:
        raise ImportError(why)
    src = SRC_PATH.read_text()
    return lambda: np.asarray(vgpu.run_field(src, theta0, inputs={"omega": omega},
                                             params={"K": K}, backend=backend, dt=DT,
                                             steps=steps))


def phase_err(a, b) -> float:
    """max |a - b| as angles (wrapped into (-pi, pi]), in radians; inf for a wrong shape/NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.max(np.abs(np.angle(np.exp(1j * (a - b))))))


def order_parameter(theta):
    return np.abs(np.exp(1j * np.asarray(theta, np.float64)).reshape(-1, BASIN).mean(axis=1))


def run(cfg: Config) -> Result:
    n = (cfg.n or [QUICK_N if cfg.quick else DEFAULT_N])[0]
    n = max(BASIN, n // BASIN * BASIN)
    steps = cfg.steps or (QUICK_STEPS if cfg.quick else STEPS)
    ref_steps = min(steps, QUICK_REF_STEPS if cfg.quick else REF_STEPS)
    rng = np.random.default_rng(0)
    theta0 = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    omega = rng.standard_normal(n).astype(np.float32)
    short_truth = numpy_rk4.kuramoto_rk4(theta0, omega, K, DT, ref_steps, BASIN, np.float64)

    cols = [
        ("VGPU GLSL", lambda s: _vgpu("glsl", theta0, omega, s), True),
        ("VGPU numpy ref", lambda s: _vgpu("numpy", theta0, omega, s), False),
        ("hand numpy RK4", lambda s: (lambda: numpy_rk4.kuramoto_rk4(theta0, omega, K, DT, s,
                                                                      BASIN)), False),
    ]
    res = Result(NAME)
    rows = []
    for name, make, full in cols:
        if not cfg.wants(name):
            continue
        row = {"column": name, "status": "ok"}
        rows.append(row)
        try:
            run_steps = steps if full else ref_steps
            t = time.perf_counter()
            fn = make(run_steps)
            tm = measure(fn, cfg, time.perf_counter() - t)
            short = fn if not full else make(ref_steps)
            short_out = np.asarray(short())
        except ImportError as exc:
            row["status"] = "not installed" if "not installed" in str(exc) else str(exc)
            continue
        except Exception as exc:
            row["status"] = describe_error(exc, cfg)
            continue
        scale = steps / run_steps
        row.update(steps_run=run_steps, first_s=tm.first_s, best_s=tm.best_s,
                   full_s=tm.best_s * scale, rate=n * run_steps / tm.best_s,
                   scaled=scale != 1,
                   err_short=phase_err(short_out, short_truth))
        if full:
            row["order_parameter_mean"] = float(order_parameter(tm.result).mean())
    glsl = next((r.get("rate") for r in rows if r["column"] == "VGPU GLSL"), None)
    table = Table(f"Kuramoto: N = {n:,} oscillators in basins of {BASIN}, {steps} RK4 steps, "
                  f"K = {K:g}, float32",
                  ["column", "steps run", "first call s", f"time for {steps} steps s",
                   "traj-steps/s", "x VGPU GLSL", f"err after {ref_steps} steps"])
    for r in rows:
        if r["status"] != "ok":
            table.rows.append([r["column"], r["status"]] + [None] * 5)
            continue
        r["x_glsl"] = r["rate"] / glsl if glsl else None
        table.rows.append([r["column"], r["steps_run"], r["first_s"],
                           f"{r['full_s']:.3g}" + (" (scaled)" if r["scaled"] else ""),
                           r["rate"], r.get("x_glsl"), r["err_short"]])
    table.notes = [f"numpy columns run {ref_steps} steps; their time for {steps} steps is that "
                   f"time x {steps / ref_steps:g} (the per-step cost is constant)",
                   f"err: max |theta - theta64| (radians, wrapped) after {ref_steps} steps from "
                   "the same start, against a float64 numpy RK4"]
    r_glsl = next((r.get("order_parameter_mean") for r in rows if "order_parameter_mean" in r), None)
    if r_glsl is not None:
        table.notes.append(f"mean order parameter r after {steps} steps (VGPU GLSL): {r_glsl:.3f}")
    res.tables.append(table)
    res.data = {"n": n, "steps": steps, "ref_steps": ref_steps, "rows": rows}
    ref = next((r.get("rate") for r in rows if r["column"] == "VGPU numpy ref"), None)
    if glsl and ref:
        res.targets.append(Target("VGPU GLSL faster than the numpy reference", glsl > ref,
                                  f"{glsl / ref:.1f}x"))
    bad = [r["column"] for r in rows if r["status"] == "ok" and r["err_short"] > 1e-3]
    res.targets.append(Target(f"every column agrees with float64 after {ref_steps} steps (1e-3)",
                              not bad, "all agree" if not bad else "flagged: " + ", ".join(bad),
                      kind="accuracy"))
    return res
