"""Kuramoto populations: basins of 256 coupled oscillators (shared memory + reductions).

N = 262144 oscillators = 1024 populations of 256, 1000 RK4 steps, dt = 0.01,
K = 2. VGPU GLSL runs every step. The other columns (VGPU's reference
backend, a hand-vectorised numpy RK4 with reshape + mean, and two hand-written
GLSL shaders with shared memory and barriers) are run for fewer steps and
their time is scaled linearly to the full step count: the table says so.
Agreement is checked on the short run, where all columns start from the same
state and the dynamics have not yet amplified rounding differences.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from .common import Config, Result, Table, Target, describe_error, log, vgpu_module
from .peers import glsl_hand, numpy_rk4

NAME = "kuramoto"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "kuramoto.field"
BASIN, K, DT = 256, 2.0, 0.01
DEFAULT_N, STEPS, REF_STEPS = 262144, 1000, 20
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

    def hand_glsl(reduction):
        def make(s):
            k = glsl_hand.HandKuramoto(n, reduction)
            return lambda: k(theta0, omega, K, DT, s)
        return make

    # (name, make(steps) -> run(), steps for the timed run)
    cols = [
        ("VGPU GLSL", lambda s: _vgpu("glsl", theta0, omega, s), steps),
        ("VGPU cpu", lambda s: _vgpu("cpu", theta0, omega, s), steps),
        ("VGPU numpy ref", lambda s: _vgpu("numpy", theta0, omega, s), ref_steps),
        ("hand numpy RK4", lambda s: (lambda: numpy_rk4.kuramoto_rk4(theta0, omega, K, DT, s,
                                                                      BASIN)), ref_steps),
        ("hand GLSL (tree reduction)", hand_glsl("tree"), ref_steps),
        ("hand GLSL (lane-0 sum)", hand_glsl("serial"), ref_steps),
    ]
    res = Result(NAME)
    rows = []
    log(f"kuramoto N = {n:,}")
    for name, make, run_steps in cols:
        if not cfg.wants(name):
            continue
        row = {"column": name, "status": "ok"}
        rows.append(row)
        try:
            # the first call runs the short problem (ref_steps): it compiles, and its answer
            # is the one checked against float64; then the timed run(s) at run_steps
            t = time.perf_counter()
            short_out = np.asarray(make(ref_steps)())
            first = time.perf_counter() - t
            fn = make(run_steps)
            reps = 1 if run_steps > ref_steps else (1 if cfg.quick else cfg.repeat)
            best = float("inf")
            for _ in range(reps):
                t = time.perf_counter()
                out = fn()
                best = min(best, time.perf_counter() - t)
        except Exception as exc:
            row["status"] = describe_error(exc, cfg)
            continue
        log(f"  {name}: {run_steps} steps in {best:.3g} s")
        scale = steps / run_steps
        row.update(steps_run=run_steps, first_s=first, best_s=best,
                   full_s=best * scale, rate=n * run_steps / best, scaled=scale != 1,
                   err_short=phase_err(short_out, short_truth))
        if run_steps == steps:
            row["order_parameter_mean"] = float(order_parameter(out).mean())
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
    table.notes = [f"only VGPU GLSL and VGPU cpu run all {steps} steps; the other columns run {ref_steps} "
                   f"steps and their time for {steps} is that time x {steps / ref_steps:g} "
                   "(the per-step cost is constant), marked (scaled)",
                   "first call = the short run (compile + {} steps), whose answer is the one "
                   "checked".format(ref_steps),
                   "hand GLSL: the same model written by hand, one workgroup of 256 per "
                   "population; tree = 8-level shared-memory tree reduction (10 barriers a stage), "
                   "lane-0 sum = one lane adds the 256 values (3 barriers a stage)",
                   f"err: max |theta - theta64| (radians, wrapped) after {ref_steps} steps from "
                   "the same start, against a float64 numpy RK4"]
    r_glsl = next((r.get("order_parameter_mean") for r in rows if "order_parameter_mean" in r), None)
    if r_glsl is not None:
        table.notes.append(f"mean order parameter r after {steps} steps (VGPU GLSL): {r_glsl:.3f}")
    res.tables.append(table)
    res.data = {"n": n, "steps": steps, "ref_steps": ref_steps, "rows": rows}
    ref = next((r.get("rate") for r in rows if r["column"] == "VGPU numpy ref"), None)
    if glsl and ref:
        res.targets.append(Target("VGPU GLSL vs the numpy reference", glsl > ref,
                                  f"VGPU GLSL runs at {glsl / ref:.2f}x the reference's speed",
                                  kind="info"))
    cpu = next((r.get("rate") for r in rows if r["column"] == "VGPU cpu"), None)
    if cpu and ref:
        res.targets.append(Target("VGPU cpu vs the numpy reference (basins)", cpu > ref,
                                  f"VGPU cpu runs at {cpu / ref:.2f}x the reference's speed"))
    if cpu and glsl:
        res.targets.append(Target("VGPU cpu vs VGPU GLSL (basins)", cpu > glsl,
                                  f"VGPU cpu runs at {cpu / glsl:.2f}x VGPU GLSL's speed",
                                  kind="info"))
    hand = next((r.get("rate") for r in rows if r["column"] == "hand GLSL (tree reduction)"), None)
    if glsl and hand:
        res.targets.append(Target("VGPU GLSL vs the hand-written GLSL (tree reduction)",
                                  glsl >= 0.8 * hand, f"VGPU GLSL runs at {glsl / hand:.2f}x its "
                                  "speed", kind="info"))
    bad = [r["column"] for r in rows if r["status"] == "ok" and r["err_short"] > 1e-3]
    res.targets.append(Target(f"every column agrees with float64 after {ref_steps} steps (1e-3)",
                              not bad, "all agree" if not bad else "flagged: " + ", ".join(bad),
                      kind="accuracy"))
    return res
