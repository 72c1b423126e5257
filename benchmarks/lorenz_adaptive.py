"""Adaptive Lorenz sweep — DiffEqGPU.jl's adaptive benchmark.

sigma = 10, beta = 8/3, rho_i = linspace(0, 21, N), u0 = (1, 0, 0), t in [0, 1],
an adaptive 5(4) pair with rtol = atol = 1e-6, float32, end state only: VGPU's
tsit5 (examples/lorenz_tsit5.field) on GLSL, wgpu and the numpy reference, diffrax
Tsit5 + PIDController under jit(vmap), torchdiffeq dopri5 on the (N, 3) batch,
and scipy's RK45 one trajectory at a time (timed on a sample, scaled to N).
Final states are checked against scipy DOP853 (rtol = atol = 1e-10, float64) on
a subsample; "what float32 achieves" is that error.
"""
from __future__ import annotations

import pathlib

import numpy as np

from .common import (Config, Result, Table, Target, describe_error, loadavg, log,
                     measure_round_robin, optional, ratio_target, vgpu_module)
from .peers import adaptive_peers

NAME = "lorenz_adaptive"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "lorenz_tsit5.field"
SIGMA, BETA, T1, RTOL, ATOL = 10.0, 8.0 / 3.0, 1.0, 1e-6, 1e-6
DEFAULT_N = [4096, 65536, 262144]
QUICK_N = [512]
TARGET_N = 262144
TOL = 1e-3          # float32 at rtol = atol = 1e-6 over t in [0, 1]: ~1e-5 is what it achieves


def _vgpu(backend):
    def make(rho, u0):
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)
        src = SRC_PATH.read_text()

        def run():
            sol = vgpu.solve(src, u0, params={"rho": rho}, backend=backend, dtype="float32",
                             rtol=RTOL, atol=ATOL, t1=T1)
            return np.asarray(sol.states), np.asarray(sol.steps_taken)
        return run
    return make


def _peer(fn):
    return lambda rho, u0: fn(rho, u0, T1, RTOL, ATOL, SIGMA, BETA)


COLUMNS = [
    ("VGPU GLSL", _vgpu("glsl"), "vgpu.solve(backend='glsl'), tsit5, per-trajectory steps"),
    ("VGPU wgpu", _vgpu("wgpu"), "vgpu.solve(backend='wgpu'), tsit5, WGSL (lavapipe here)"),
    ("VGPU cpu", _vgpu("cpu"), "vgpu.solve(backend='cpu'), tsit5, generated C, per-lane steps"),
    ("VGPU numpy ref", _vgpu("numpy"), "vgpu.solve(backend='numpy'), tsit5"),
    ("diffrax", _peer(adaptive_peers.make_diffrax),
     "jit(vmap(diffeqsolve)), Tsit5 + PIDController, CPU"),
    ("torchdiffeq", _peer(adaptive_peers.make_torch),
     "odeint dopri5 on the (N, 3) batch (one step size for the batch), CPU"),
    ("scipy (sampled, scaled)", _peer(adaptive_peers.make_scipy),
     f"solve_ivp RK45 per trajectory, {adaptive_peers.SCIPY_SAMPLE} timed, time x N / sample"),
]
PEERS = {"diffrax", "torchdiffeq", "scipy (sampled, scaled)"}


def problem(n: int):
    rho = np.linspace(0.0, 21.0, n).astype(np.float32)
    u0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    return rho, u0


def _truth(rho, u0, sub):
    integrate, why = optional("scipy.integrate")
    if integrate is None:
        return None
    out = np.zeros((len(sub), 3))
    for k, i in enumerate(sub):
        r = float(rho[i])
        out[k] = integrate.solve_ivp(
            lambda _t, u: [SIGMA * (u[1] - u[0]), u[0] * (r - u[2]) - u[1],
                           u[0] * u[1] - BETA * u[2]],
            (0.0, T1), np.asarray(u0[i], np.float64), method="DOP853",
            rtol=1e-10, atol=1e-10).y[:, -1]
    return out


def mixed_err(a: np.ndarray, ref: np.ndarray) -> float:
    """max over trajectories of |a - ref| / (1 + |ref|) (vector norms): relative where the
    state is large, absolute where it decays to ~0 (rho < 1: the tolerance is then
    atol's, and a relative measure would be meaningless). NaN gives inf."""
    a = np.asarray(a, np.float64)
    d = np.linalg.norm(a - ref, axis=-1) / (1.0 + np.linalg.norm(ref, axis=-1))
    return float(np.max(d)) if np.isfinite(d).all() else float("inf")


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    res = Result(NAME)
    res.data = {"params": {"sigma": SIGMA, "beta": BETA, "rho": "linspace(0, 21, N)",
                           "u0": [1, 0, 0], "t": [0, T1], "rtol": RTOL, "atol": ATOL,
                           "dtype": "float32"}, "runs": {}}
    for n in ns:
        rho, u0 = problem(n)
        sub = np.unique(np.linspace(0, n - 1, min(n, 16 if cfg.quick else 128)).astype(np.int64))
        truth = _truth(rho, u0, sub)
        rows, makers = {}, {}
        log(f"lorenz_adaptive N = {n:,}")
        for name, make, note in COLUMNS:
            if not cfg.wants(name):
                continue
            rows[name] = {"column": name, "note": note, "status": "ok"}
            if name in PEERS and not cfg.peers:
                rows[name]["status"] = "skipped (--no-peers)"
                continue
            makers[name] = (lambda make=make: make(rho, u0))

        def failed(name, exc):
            rows[name]["status"] = describe_error(exc, cfg)

        timings = measure_round_robin(makers, cfg, failed)
        for name, tm in timings.items():
            row = rows[name]
            out, steps = tm.result
            out = np.asarray(out)
            best = tm.best_s
            picked = np.arange(n)
            if name.startswith("scipy"):
                picked = np.nonzero(steps >= 0)[0]
                best = tm.best_s * n / max(1, len(picked))
                row["sample"] = int(len(picked))
            row.update(first_s=tm.first_s, best_s=best, runs=tm.runs, rate=n / best,
                       err_f64=(mixed_err(out[np.intersect1d(sub, picked)],
                                          truth[np.isin(sub, picked)])
                                if truth is not None else None))
            if steps is not None:
                s = np.asarray(steps)[picked]
                row.update(steps_min=int(s.min()), steps_max=int(s.max()),
                           steps_mean=float(s.mean()))
        res.data["loadavg_after_" + str(n)] = loadavg()
        glsl_rate = rows.get("VGPU GLSL", {}).get("rate")
        for row in rows.values():
            if "rate" in row and glsl_rate:
                row["x_glsl"] = row["rate"] / glsl_rate
        res.data["runs"][str(n)] = list(rows.values())
        table = Table(f"Adaptive Lorenz sweep, N = {n:,}, t in [0, {T1:g}], rtol = atol = "
                      f"{RTOL:g}, float32",
                      ["column", "first call s", "steady s", "traj/s", "x VGPU GLSL",
                       "steps min..max", "err vs f64", "ok"])
        for row in rows.values():
            if row["status"] != "ok":
                table.rows.append([row["column"], row["status"], None, None, None, None, None,
                                   None])
                continue
            steps = (f"{row['steps_min']}..{row['steps_max']}" if "steps_min" in row else "-")
            err = row.get("err_f64")
            ok = err is None or err <= TOL
            table.rows.append([row["column"], row["first_s"], row["best_s"], row["rate"],
                               row.get("x_glsl"), steps, err, "ok" if ok else f"FLAG > {TOL:g}"])
        table.notes = [f"{name}: {note}" for name, _, note in COLUMNS] + [
            "scipy (sampled, scaled): the steady time is that of the sample times N / sample",
            "err vs f64: max over a subsample of |u - u64| / (1 + |u64|) against scipy DOP853 "
            "(rtol = atol = 1e-10) in float64: what float32 at rtol = atol = 1e-6 achieves"]
        res.tables.append(table)
    res.targets = _targets(res.data["runs"], ns)
    return res


def _rate(runs, n, col):
    for row in runs.get(str(n), []):
        if row["column"] == col:
            return row.get("rate")
    return None


def _targets(runs, ns) -> list[Target]:
    tn = TARGET_N if TARGET_N in ns else max(ns)
    at = f"N = {tn:,}" + ("" if tn == TARGET_N else f" (not the target N = {TARGET_N:,})")
    g = _rate(runs, tn, "VGPU GLSL")
    out = [ratio_target(f"VGPU GLSL >= 5x VGPU numpy ref, {at}", g,
                        _rate(runs, tn, "VGPU numpy ref"), 5),
           ratio_target(f"VGPU GLSL >= 20x diffrax, {at}", g, _rate(runs, tn, "diffrax"), 20),
           ratio_target(f"VGPU GLSL >= 20x torchdiffeq, {at}", g,
                        _rate(runs, tn, "torchdiffeq"), 20)]
    bad = [f"{row['column']} at N = {n}" for n, rows in runs.items() for row in rows
           if row.get("status") == "ok" and (row.get("err_f64") or 0) > TOL]
    out.append(Target(f"every column's final state within {TOL:g} of float64 DOP853",
                      not bad, "all agree" if not bad else "flagged: " + ", ".join(bad),
                      kind="accuracy"))
    return out
