"""Fitting N SIR models to their own noisy data: vgpu.fit against a scipy loop.

Each model (examples/sir.field) has its own beta, gamma and starting infected
fraction; its data are 50 noisy observations of I over 60 days. VGPU fits beta,
gamma and init(I) of every model at once (vgpu.fit: Levenberg–Marquardt per
trajectory, one solve with sensitivities per iteration, the cpu backend, float64);
the peer is the usual loop: scipy.optimize.least_squares(method="lm") over
solve_ivp (RK45 at the same tolerances) per model, timed on a sample of models
and scaled to N. Accuracy: on the sampled models, every fitted parameter equals
scipy's within its statistical uncertainty (one standard error, from the fit's
covariance: the two differ by scipy's finite-difference Jacobian and stopping point).
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from .common import Config, Result, Table, Target, as_info, describe_error, log, vgpu_module

NAME = "fit"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "sir.field"
DEFAULT_N, QUICK_N = [10_000], [200]
SAMPLE, QUICK_SAMPLE = 50, 5
POINTS, T1, NOISE = 50, 60.0, 0.005
RTOL, ATOL = 1e-8, 1e-10
NAMES = ["beta", "gamma", "init(I)"]


def outbreaks(n: int, seed: int = 0):
    """Synthetic outbreaks: the true parameters, h0, the times and the noisy data."""
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.3, 0.7, n)
    gamma = rng.uniform(0.07, 0.15, n)
    i0 = rng.uniform(0.002, 0.02, n)
    times = np.linspace(0.0, T1, POINTS)
    vgpu, _ = vgpu_module()
    h0 = np.stack([1 - i0, i0, np.zeros(n)], -1)
    truth = vgpu.solve(SRC_PATH.read_text(), h0, params={"beta": beta, "gamma": gamma},
                       save_at=times, dtype="float64", backend="cpu")
    data = truth.history[..., 1] + rng.normal(0, NOISE, (POINTS, n))
    return beta, gamma, i0, times, data


def scipy_one(times, data_i, s0, start):
    from scipy.integrate import solve_ivp
    from scipy.optimize import least_squares

    def model(th):
        b, g, i0 = th
        f = solve_ivp(lambda t, y: [-b * y[0] * y[1], b * y[0] * y[1] - g * y[1], g * y[1]],
                      (0.0, T1), [s0, i0, 0.0], t_eval=times, rtol=RTOL, atol=ATOL)
        return f.y[1] if f.success else np.full(len(times), 1e3)
    return least_squares(lambda th: model(th) - data_i, start, method="lm")


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    sample = QUICK_SAMPLE if cfg.quick else SAMPLE
    res = Result(NAME)
    res.data = {"params": {"points": POINTS, "t1": T1, "noise": NOISE, "rtol": RTOL,
                           "atol": ATOL, "names": NAMES, "sample": sample}, "runs": {}}
    vgpu, why = vgpu_module()
    for n in ns:
        log(f"fit N = {n:,} SIR models, {len(NAMES)} params, {POINTS} points")
        beta, gamma, i0, times, data = outbreaks(n)
        guess = {"beta": 0.5, "gamma": 0.1}
        h0 = np.stack([1 - i0, np.full(n, 0.01), np.zeros(n)], -1)   # S(0) known; I(0) fitted
        rows = []
        fr = None
        try:
            vgpu.fit(SRC_PATH.read_text(), data[:, :2], times, fit=NAMES, params=guess,
                     h0=h0[:2], observe="I", backend="cpu")          # compile, once
            t = time.perf_counter()
            fr = vgpu.fit(SRC_PATH.read_text(), data, times, fit=NAMES, params=guess, h0=h0,
                          observe="I", backend="cpu")
            vg_s = time.perf_counter() - t
            rows.append({"column": "VGPU cpu (vgpu.fit)", "status": "ok", "seconds": vg_s,
                         "per_model_ms": 1e3 * vg_s / n,
                         "iterations": float(np.mean(fr.iterations)),
                         "converged": float(np.mean(fr.status <= 1))})
        except Exception as exc:            # noqa: BLE001 (reported in the table)
            rows.append({"column": "VGPU cpu (vgpu.fit)", "status": describe_error(exc, cfg)})
        idx = np.linspace(0, n - 1, sample).astype(int)
        t = time.perf_counter()
        refs = [scipy_one(times, data[:, i], 1 - i0[i], [0.5, 0.1, 0.01]) for i in idx]
        sp_s = (time.perf_counter() - t) * n / sample
        rows.append({"column": "scipy loop (least_squares lm + solve_ivp)", "status": "ok",
                     "seconds": sp_s,
                     "per_model_ms": 1e3 * sp_s / n,
                     "iterations": float(np.mean([r.nfev for r in refs])),
                     "converged": float(np.mean([r.status > 0 for r in refs])),
                     "note": f"timed on {sample} models, scaled to {n:,}"})
        worst = None
        if fr is not None:
            got = np.stack([fr.params[k][idx] for k in NAMES], -1)
            ref = np.stack([r.x for r in refs], -1).T
            se = np.sqrt(np.stack([fr.covariance[idx, j, j] for j in range(len(NAMES))], -1))
            worst = float(np.max(np.abs(got - ref) / se))
        res.data["runs"][str(n)] = rows
        res.data.setdefault("worst_in_se", {})[str(n)] = worst
        table = Table(f"Fitting {n:,} SIR models ({len(NAMES)} params, {POINTS} points each)",
                      ["column", "seconds", "ms per model", "solves or fevs", "converged"])
        for row in rows:
            if row["status"] != "ok":
                table.rows.append([row["column"], row["status"], None, None, None])
            else:
                table.rows.append([row["column"], row["seconds"], row["per_model_ms"],
                                   row["iterations"], row["converged"]])
        table.notes = [f"scipy: {rows[-1]['note']}",
                       "VGPU: one solve of all models per iteration (mean solves per model "
                       "shown); scipy: function evaluations (finite-difference Jacobian)"]
        res.tables.append(table)
        vg = rows[0].get("seconds")         # (None when the fit failed: reported above)
        speed = None if vg is None else sp_s / vg
        need = 100.0
        res.targets.append(Target(f"vgpu.fit >= {need:g}x a scipy loop, N = {n:,}",
                                  None if speed is None else speed >= need,
                                  "not measured" if speed is None else f"{speed:.1f}x"))
        if cfg.quick:
            res.targets[-1] = as_info(res.targets[-1])
        res.targets.append(Target(f"fitted params equal scipy's within 1 standard error, "
                                  f"N = {n:,}", None if worst is None else worst < 1.0,
                                  "not measured" if worst is None
                                  else f"worst {worst:.2g} standard errors", kind="accuracy"))
    return res
