"""Ornstein–Uhlenbeck Monte Carlo: N paths x S Euler–Maruyama steps, float32.

dx = theta (mu - x) dt + sigma dW, theta = 1.5, mu = 0.5, sigma = 0.4, x0 = 2,
dt = 1 / S (t in [0, 1]); end states only. VGPU runs examples/ou.field (its
normals from Philox4x32-10, reproducible per trajectory); the peers draw their
own, so every column is checked by statistics: the mean and variance of its
final states against the closed form, within 6 standard errors plus the
scheme's own O(dt) bias.
"""
from __future__ import annotations

import pathlib

import numpy as np

from .common import (Config, Result, Table, Target, describe_error, loadavg, log,
                     measure_round_robin, ratio_target, vgpu_module)
from .peers import ou_em

NAME = "ou"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "ou.field"
THETA, MU, SIGMA, X0, T = 1.5, 0.5, 0.4, 2.0, 1.0
DEFAULT_N = [100_000, 1_000_000]
STEPS = 1000
QUICK_N, QUICK_STEPS = [2000], 50
TARGET_N = 1_000_000


def _vgpu(backend):
    def make(x0, theta, mu, sigma, dt, steps, seed):
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)
        src = SRC_PATH.read_text()
        params = {"theta": theta, "mu": mu, "sigma": sigma}
        return lambda: np.asarray(vgpu.run_field(src, x0, params=params, backend=backend,
                                                 dtype="float32", dt=dt, steps=steps, seed=seed))
    return make


COLUMNS = [
    ("VGPU GLSL", _vgpu("glsl"), "vgpu.run_field(backend='glsl'), examples/ou.field, Philox"),
    ("VGPU cpu", _vgpu("cpu"), "vgpu.run_field(backend='cpu'): generated C, C Philox"),
    ("VGPU numpy ref", _vgpu("numpy"), "vgpu.run_field(backend='numpy'), numpy Philox"),
    ("hand numpy EM", ou_em.numpy_em, "numpy.random.Generator (PCG64) normals, in place"),
    ("torch EM", ou_em.torch_em, "batched CPU tensors, normal_ per step"),
    ("diffrax", ou_em.diffrax_em, "jit(vmap(diffeqsolve)), Euler, UnsafeBrownianPath"),
]
PEERS = {"torch EM", "diffrax"}
REF_MAX_N = 200_000     # the reference runs its Philox in numpy: sizes above are skipped


def closed_form(dt: float, steps: int) -> tuple[float, float, float, float]:
    """(mean, variance) at T of the SDE, and the same of the Euler–Maruyama recurrence."""
    t = dt * steps
    mean = MU + (X0 - MU) * np.exp(-THETA * t)
    var = SIGMA**2 / (2 * THETA) * (1 - np.exp(-2 * THETA * t))
    a = 1 - THETA * dt
    em_mean = MU + (X0 - MU) * a**steps
    em_var = SIGMA**2 * dt * (1 - a**(2 * steps)) / (1 - a * a)
    return mean, var, em_mean, em_var


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    steps = cfg.steps or (QUICK_STEPS if cfg.quick else STEPS)
    dt = T / steps
    mean, var, em_mean, em_var = closed_form(dt, steps)
    res = Result(NAME)
    res.data = {"params": {"theta": THETA, "mu": MU, "sigma": SIGMA, "x0": X0, "dt": dt,
                           "steps": steps, "dtype": "float32"}, "runs": {}}
    for n in ns:
        x0 = np.full(n, X0, np.float32)
        rows, makers = {}, {}
        log(f"ou N = {n:,} x {steps} steps")
        for name, make, note in COLUMNS:
            if not cfg.wants(name):
                continue
            rows[name] = {"column": name, "note": note, "status": "ok"}
            if name in PEERS and not cfg.peers:
                rows[name]["status"] = "skipped (--no-peers)"
                continue
            if name == "VGPU numpy ref" and n > REF_MAX_N and not cfg.quick:
                rows[name]["status"] = f"skipped (N > {REF_MAX_N:,}: numpy Philox is slow)"
                continue
            makers[name] = (lambda make=make: make(x0, THETA, MU, SIGMA, dt, steps, 1))

        def failed(name, exc):
            rows[name]["status"] = describe_error(exc, cfg)

        for name, tm in measure_round_robin(makers, cfg, failed).items():
            out = np.asarray(tm.result, np.float64)
            m, v = out.mean(), out.var(ddof=1)
            se_m, se_v = np.sqrt(var / n), var * np.sqrt(2 / (n - 1))
            ok = (abs(m - mean) < 6 * se_m + abs(em_mean - mean)
                  and abs(v - var) < 6 * se_v + abs(em_var - var))
            rows[name].update(first_s=tm.first_s, best_s=tm.best_s, runs=tm.runs,
                              rate=n * steps / tm.best_s, mean=m, var=v, stats_ok=bool(ok))
        res.data["loadavg_after_" + str(n)] = loadavg()
        glsl_rate = rows.get("VGPU GLSL", {}).get("rate")
        for row in rows.values():
            if "rate" in row and glsl_rate:
                row["x_glsl"] = row["rate"] / glsl_rate
        res.data["runs"][str(n)] = list(rows.values())
        table = Table(f"OU Monte Carlo, N = {n:,}, {steps} Euler–Maruyama steps, float32",
                      ["column", "first call s", "steady s", "path-steps/s", "x VGPU GLSL",
                       "mean", "var", "stats"])
        for row in rows.values():
            if row["status"] != "ok":
                table.rows.append([row["column"], row["status"], None, None, None, None, None,
                                   None])
                continue
            table.rows.append([row["column"], row["first_s"], row["best_s"], row["rate"],
                               row.get("x_glsl"), row["mean"], row["var"],
                               "ok" if row["stats_ok"] else "FLAG"])
        table.notes = [f"closed form at T: mean {mean:.5f}, var {var:.5f} (Euler–Maruyama's "
                       f"own: {em_mean:.5f}, {em_var:.5f})",
                       "stats: mean and variance within 6 standard errors + the O(dt) bias"]
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
    out = [ratio_target(f"VGPU GLSL >= 5x hand numpy EM, {at}", g,
                        _rate(runs, tn, "hand numpy EM"), 5),
           ratio_target(f"VGPU GLSL >= 10x diffrax, {at}", g, _rate(runs, tn, "diffrax"), 10),
           ratio_target(f"VGPU cpu >= 10x hand numpy EM, {at}", _rate(runs, tn, "VGPU cpu"),
                        _rate(runs, tn, "hand numpy EM"), 10),
           ratio_target(f"VGPU cpu >= 25x diffrax, {at}", _rate(runs, tn, "VGPU cpu"),
                        _rate(runs, tn, "diffrax"), 25)]
    bad = [f"{row['column']} at N = {n}" for n, rows in runs.items() for row in rows
           if row.get("status") == "ok" and not row.get("stats_ok")]
    out.append(Target("every column's mean and variance match the closed form", not bad,
                      "all agree" if not bad else "flagged: " + ", ".join(bad), kind="accuracy"))
    return out
