"""Fields that call math functions: Duffing (cos), Hodgkin-Huxley (exp, a spike-counting
event) and Heston (sqrt, two noises), float32, N trajectories each.

- Duffing: x'' + delta x' + alpha x + beta x^3 = gamma cos(omega t), rk4, dt = 0.01,
  15,000 steps, x0 = linspace(-1.5, 1.5, N), v0 = 0 (a periodic regime: the columns can
  be compared trajectory by trajectory).
- Hodgkin-Huxley (the squid axon, 1952; rates in mV and ms): rk4, dt = 0.01 ms, 10,000
  steps, I = linspace(2, 20, N) uA/cm^2; a counter state counts the spikes (v rising
  through 0 mV between step ends: `when v > 0`).
- Heston (stochastic volatility; log price and full-truncation variance), Euler-Maruyama,
  T = 1, 1000 steps, correlated noises; checked by statistics: E[S_T] = S0 e^(mu T)
  exactly for this scheme, E[v_T] against the closed form.

Columns: VGPU cpu, VGPU GLSL, a hand numpy loop (vectorised over N, float32, one Python
iteration per step).
"""
from __future__ import annotations

import numpy as np

from .common import (Config, Result, Table, Target, describe_error, loadavg, log,
                     measure_round_robin, ratio_target, vgpu_module)

NAME = "functions"

DUFFING = """field duffing {
    param delta = 0.3
    param alpha = -1.0
    param beta = 1.0
    param gamma = 0.1
    param omega = 1.2
    state x, v
    dx/dt = v
    dv/dt = gamma * cos(omega * t) - delta * v - alpha * x - beta * x ^ 3
    solve rk4(dt = 0.01, steps = 15000)
}"""

HH = """field hodgkin_huxley {
    param I = 10.0
    state v, m, h, n, spikes = 0
    let em = exp(-(v + 40) / 10)
    let en = exp(-(v + 55) / 10)
    let am = where(em == 1, 1.0, 0.1 * (v + 40) / (1 - em))     # 0 / 0 at v = -40: its limit
    let bm = 4 * exp(-(v + 65) / 18)
    let ah = 0.07 * exp(-(v + 65) / 20)
    let bh = 1 / (1 + exp(-(v + 35) / 10))
    let an = where(en == 1, 0.1, 0.01 * (v + 55) / (1 - en))
    let bn = 0.125 * exp(-(v + 65) / 80)
    dv/dt = I - 120 * m^3 * h * (v - 50) - 36 * n^4 * (v + 77) - 0.3 * (v + 54.4)
    dm/dt = am * (1 - m) - bm * m
    dh/dt = ah * (1 - h) - bh * h
    dn/dt = an * (1 - n) - bn * n
    dspikes/dt = 0
    when v > 0 { spikes = spikes + 1 }
    solve rk4(dt = 0.01, steps = 10000)
}"""

HESTON = """field heston {
    param mu = 0.05
    param kappa = 2.0
    param theta = 0.04
    param xi = 0.3
    param rho = -0.7
    noise w1, w2
    state ls, var
    let vp = max(var, 0)
    dls/dt = mu - 0.5 * vp + sqrt(vp) * w1
    dvar/dt = kappa * (theta - vp) + xi * sqrt(vp) * (rho * w1 + sqrt(1 - rho * rho) * w2)
    solve euler(dt = 0.001, steps = 1000)
}"""

HH0 = (-65.0, 0.05, 0.6, 0.32)
HESTON_P = dict(mu=0.05, kappa=2.0, theta=0.04, xi=0.3, rho=-0.7, s0=100.0, v0=0.04)
# name: (source, default N, default steps, quick N, quick steps)
PROBLEMS = {
    "duffing": (DUFFING, 10_000, 15_000, 256, 300),
    "hodgkin_huxley": (HH, 10_000, 10_000, 256, 300),
    "heston": (HESTON, 200_000, 1000, 2000, 50),
}


def h0_of(name: str, n: int) -> tuple[np.ndarray, dict]:
    """(h0, params) of problem ``name`` with ``n`` trajectories."""
    if name == "duffing":
        return np.stack([np.linspace(-1.5, 1.5, n), np.zeros(n)], 1).astype(np.float32), {}
    if name == "hodgkin_huxley":
        return (np.tile(np.float32(HH0), (n, 1)),
                {"I": np.linspace(2.0, 20.0, n).astype(np.float32)})
    p = HESTON_P
    return np.tile(np.float32([np.log(p["s0"]), p["v0"]]), (n, 1)), {}


def _vgpu(backend):
    def make(name, n, steps):
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)
        src = PROBLEMS[name][0]
        h0, params = h0_of(name, n)
        seed = {"seed": 1, "dt": 1.0 / steps} if name == "heston" else {}   # T = 1
        return lambda: np.asarray(vgpu.run_field(src, h0, params=params or None,
                                                 backend=backend, dtype="float32",
                                                 steps=steps, **seed))
    return make


# --- the hand numpy loops (float32, vectorised over N, one iteration per step) -----------

def _duffing_numpy(n, steps, dt=0.01, delta=0.3, alpha=-1.0, beta=1.0, gamma=0.1, omega=1.2,
                   dtype=np.float32):
    h0, _ = h0_of("duffing", n)
    x, v = h0[:, 0].astype(dtype), h0[:, 1].astype(dtype)
    f = lambda t, x, v: (v, gamma * np.cos(omega * t) - delta * v - alpha * x - beta * x**3)  # noqa: E731
    dt = dtype(dt)
    for k in range(steps):
        t = dtype(k) * dt
        k1 = f(t, x, v)
        k2 = f(t + dt / 2, x + dt / 2 * k1[0], v + dt / 2 * k1[1])
        k3 = f(t + dt / 2, x + dt / 2 * k2[0], v + dt / 2 * k2[1])
        k4 = f(t + dt, x + dt * k3[0], v + dt * k3[1])
        x = x + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        v = v + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return np.stack([x, v], 1)


def _hh_f(y, current):
    v, m, h, n = y
    em, en = np.exp(-(v + 40) / 10), np.exp(-(v + 55) / 10)
    with np.errstate(invalid="ignore", divide="ignore"):
        am = np.where(em == 1, 1.0, 0.1 * (v + 40) / (1 - em))     # 0 / 0 at v = -40
        an = np.where(en == 1, 0.1, 0.01 * (v + 55) / (1 - en))
    bm = 4 * np.exp(-(v + 65) / 18)
    ah = 0.07 * np.exp(-(v + 65) / 20)
    bh = 1 / (1 + np.exp(-(v + 35) / 10))
    bn = 0.125 * np.exp(-(v + 65) / 80)
    return np.stack([current - 120 * m**3 * h * (v - 50) - 36 * n**4 * (v + 77)
                     - 0.3 * (v + 54.4),
                     am * (1 - m) - bm * m, ah * (1 - h) - bh * h, an * (1 - n) - bn * n])


def _hh_numpy(n, steps, dt=0.01, dtype=np.float32):
    h0, params = h0_of("hodgkin_huxley", n)
    y = h0.T.astype(dtype).copy()
    current = params["I"].astype(dtype)
    y, spikes = _hh_rk4(y, current, steps, dtype(dt))
    return np.concatenate([y.T, spikes[:, None]], 1)


def _hh_rk4(y, current, steps, dt):
    """The hand rk4 loop of Hodgkin-Huxley in y's dtype: the end state and each neuron's
    upward crossings of 0 mV."""
    spikes = np.zeros(y.shape[1], y.dtype)
    for _ in range(steps):
        k1 = _hh_f(y, current)
        k2 = _hh_f(y + dt / 2 * k1, current)
        k3 = _hh_f(y + dt / 2 * k2, current)
        k4 = _hh_f(y + dt * k3, current)
        new = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        spikes += (y[0] <= 0) & (new[0] > 0)
        y = new
    return y, spikes


def _heston_numpy(n, steps, seed=1):
    p = HESTON_P
    dt = np.float32(1.0 / steps)
    rng = np.random.default_rng(seed)
    ls = np.full(n, np.log(p["s0"]), np.float32)
    var = np.full(n, p["v0"], np.float32)
    c = np.float32(np.sqrt(1 - p["rho"] ** 2))
    sq = np.sqrt(dt)
    for _ in range(steps):
        z1 = rng.standard_normal(n, np.float32)
        z2 = rng.standard_normal(n, np.float32)
        vp = np.maximum(var, 0)
        sv = np.sqrt(vp)
        ls = ls + (p["mu"] - 0.5 * vp) * dt + sv * sq * z1
        var = var + p["kappa"] * (p["theta"] - vp) * dt + p["xi"] * sv * sq * (p["rho"] * z1 + c * z2)
    return np.stack([ls, var], 1).astype(np.float32)


def _hand(name, n, steps):
    fn = {"duffing": _duffing_numpy, "hodgkin_huxley": _hh_numpy, "heston": _heston_numpy}[name]
    return lambda: fn(n, steps)


COLUMNS = [
    ("VGPU cpu", _vgpu("cpu"), "vgpu.run_field(backend='cpu'): generated C, OpenMP + SIMD"),
    ("VGPU GLSL", _vgpu("glsl"), "vgpu.run_field(backend='glsl')"),
    ("hand numpy", _hand, "vectorised over N, float32, a Python loop over the steps"),
]


# --- checks --------------------------------------------------------------------------------

def check(name: str, out: np.ndarray, n: int, steps: int) -> tuple[bool, str]:
    """Does a column's answer agree with the independent one (closed form or float64)?"""
    out = np.asarray(out, np.float64)
    idx = np.linspace(0, n - 1, min(n, 256)).astype(int)     # a subsample, in float64
    if name == "duffing":
        h0, _ = h0_of("duffing", n)
        err = float(np.max(np.abs(out[idx] - _duffing_from(h0[idx], steps))))
        return err < 1e-2, f"max |x - x_f64| = {err:.1e}"
    if name == "hodgkin_huxley":
        counts, ref = out[idx, 4], _hh_sub(idx, n, steps)
        off = int(np.sum(np.abs(counts - ref) > 1))
        return off == 0, f"spikes {int(counts.sum())} (float64: {int(ref.sum())}), " \
                         f"{off} neurons off by more than 1"
    p = HESTON_P
    s = np.exp(out[:, 0])
    want_s = p["s0"] * np.exp(p["mu"])
    want_v = p["theta"] + (p["v0"] - p["theta"]) * np.exp(-p["kappa"])
    se_s, se_v = s.std() / np.sqrt(n), out[:, 1].std() / np.sqrt(n)
    ok = abs(s.mean() - want_s) < 6 * se_s and abs(out[:, 1].mean() - want_v) < 6 * se_v + 1e-3
    return bool(ok), f"E[S_T] {s.mean():.3f} (exact {want_s:.3f}), E[v_T] {out[:, 1].mean():.4f}"


def _duffing_from(h0, steps, dt=0.01):
    x, v = h0[:, 0].astype(np.float64), h0[:, 1].astype(np.float64)
    f = lambda t, x, v: (v, 0.1 * np.cos(1.2 * t) - 0.3 * v + x - x**3)  # noqa: E731
    for k in range(steps):
        t = k * dt
        k1 = f(t, x, v)
        k2 = f(t + dt / 2, x + dt / 2 * k1[0], v + dt / 2 * k1[1])
        k3 = f(t + dt / 2, x + dt / 2 * k2[0], v + dt / 2 * k2[1])
        k4 = f(t + dt, x + dt * k3[0], v + dt * k3[1])
        x = x + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        v = v + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return np.stack([x, v], 1)


def _hh_sub(idx, n, steps, dt=0.01):
    h0, params = h0_of("hodgkin_huxley", n)
    y = h0[idx].T.astype(np.float64).copy()
    current = params["I"][idx].astype(np.float64)
    return _hh_rk4(y, current, steps, dt)[1]


# --- the run -------------------------------------------------------------------------------

def run(cfg: Config) -> Result:
    res = Result(NAME)
    res.data = {"problems": {}, "rows": []}
    targets, bad = [], []
    for name, (_, n_default, steps_default, n_quick, steps_quick) in PROBLEMS.items():
        n = (cfg.n[0] if cfg.n else (n_quick if cfg.quick else n_default))
        steps = cfg.steps or (steps_quick if cfg.quick else steps_default)
        log(f"{name}: N = {n:,} x {steps:,} steps")
        rows, makers = {}, {}
        for col, make, note in COLUMNS:
            if not cfg.wants(col):
                continue
            rows[col] = {"column": col, "problem": name, "note": note, "status": "ok"}
            makers[col] = (lambda make=make: make(name, n, steps))

        def failed(col, exc):
            rows[col]["status"] = describe_error(exc, cfg)

        for col, tm in measure_round_robin(makers, cfg, failed).items():
            ok, detail = check(name, tm.result, n, steps)
            rows[col].update(first_s=tm.first_s, best_s=tm.best_s, runs=tm.runs,
                             rate=n * steps / tm.best_s, ok=ok, check=detail)
            if not ok:
                bad.append(f"{col} on {name}: {detail}")
        load = loadavg()
        res.data["problems"][name] = {"n": n, "steps": steps, "loadavg_after": load,
                                  "rows": list(rows.values())}
        res.data["rows"].extend(rows.values())
        rate = {c: r.get("rate") for c, r in rows.items()}
        table = Table(f"{name}, N = {n:,} x {steps:,} steps, float32",
                      ["column", "first call s", "steady s", "trajectory-steps/s",
                       "x hand numpy", "x VGPU GLSL", "check"])
        for col, r in rows.items():
            if r["status"] != "ok":
                table.rows.append([col, r["status"], None, None, None, None, None])
                continue
            table.rows.append([col, r["first_s"], r["best_s"], r["rate"],
                               r["rate"] / rate["hand numpy"] if rate.get("hand numpy") else None,
                               r["rate"] / rate["VGPU GLSL"] if rate.get("VGPU GLSL") else None,
                               r["check"]])
        table.notes = [f"load average after the runs: {load}"]
        res.tables.append(table)
        targets += [ratio_target(f"{name}: VGPU cpu >= 2x VGPU GLSL, N = {n:,}",
                                 rate.get("VGPU cpu"), rate.get("VGPU GLSL"), 2),
                    ratio_target(f"{name}: VGPU cpu >= 5x hand numpy, N = {n:,}",
                                 rate.get("VGPU cpu"), rate.get("hand numpy"), 5)]
    targets.append(Target("every column agrees with the independent check", not bad,
                          "all agree" if not bad else "; ".join(bad), kind="accuracy"))
    res.targets = targets
    return res
