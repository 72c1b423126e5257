"""Tight tolerances: an ensemble of Arenstorf orbits at rtol 1e-10, float64 (issue 31).

The restricted three-body problem (Hairer, Norsett & Wanner I, II.0: the Arenstorf
orbit, period T = 17.0652165601579625588917206249), one period, the initial speed
y'(0) varied by up to 1e-6 across trajectories. Columns:
- VGPU cpu with `solve vern9` and with `solve dop853` (warm calls, every trajectory);
- scipy `solve_ivp(method="DOP853")` looped over a sample of trajectories, timed and
  scaled to N (labelled so);
each column's final state against scipy DOP853 at rtol 1e-13 on the sample
(``err``: max |y - truth| / (atol + rtol |truth|)). Target: vern9 and dop853 on cpu
>= 100x the scipy loop; their err within 10x of scipy's own at rtol 1e-10.

    python -m benchmarks.tight [--n 4096] [--sample 16] [--json out.json]
    python -m benchmarks tight            (in the suite; --quick: tiny sizes)
"""
from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from .common import Config, Result, Table, Target, describe_error, log

NAME = "tight"
MU = 0.012277471
PERIOD = 17.0652165601579625588917206249
VY0 = -2.00158510637908252240537862224
RTOL = ATOL = 1e-10
DEFAULT_N, QUICK_N = 4096, 64
DEFAULT_SAMPLE, QUICK_SAMPLE = 16, 4
NEED = 100.0
SRC = """field arenstorf {
    param mu = 0.012277471
    param vy0 = -2.00158510637908252240537862224
    state x = 0.994, y = 0, u = 0, v = vy0
    let nu = 1 - mu
    let r1 = (x + mu) * (x + mu) + y * y
    let r2 = (x - nu) * (x - nu) + y * y
    let d1 = r1 * sqrt(r1)
    let d2 = r2 * sqrt(r2)
    dx/dt = u
    dy/dt = v
    du/dt = x + 2 * v - nu * (x + mu) / d1 - mu * (x - nu) / d2
    dv/dt = y - 2 * u - nu * y / d1 - mu * y / d2
    solve METHOD(t1 = 17.0652165601579625588917206249, rtol = 1e-10, atol = 1e-10)
}"""


def speeds(n: int) -> np.ndarray:
    return VY0 * (1.0 + 1e-6 * np.arange(n) / max(n - 1, 1))


def _f(t, s):
    x, y, u, v = s
    nu = 1 - MU
    d1 = ((x + MU) ** 2 + y ** 2) ** 1.5
    d2 = ((x - nu) ** 2 + y ** 2) ** 1.5
    return [u, v, x + 2 * v - nu * (x + MU) / d1 - MU * (x - nu) / d2,
            y - 2 * u - nu * y / d1 - MU * y / d2]


def scipy_loop(vy, rtol, atol):
    from scipy.integrate import solve_ivp
    out, steps = np.empty((len(vy), 4)), np.empty(len(vy), int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # scipy: rtol below 100 eps is raised
        for j, v0 in enumerate(vy):
            sol = solve_ivp(_f, (0.0, PERIOD), [0.994, 0.0, 0.0, v0], method="DOP853",
                            rtol=rtol, atol=atol)
            out[j], steps[j] = sol.y[:, -1], sol.t.size - 1
    return out, steps


def vgpu_column(method: str, backend: str, vy):
    import vgpu
    src = SRC.replace("METHOD", method)
    vgpu.solve(src, params={"vy0": vy[:8]}, backend=backend, dtype="float64")   # compile
    began = time.perf_counter()
    sol = vgpu.solve(src, params={"vy0": vy}, backend=backend, dtype="float64")
    took = time.perf_counter() - began
    assert (np.asarray(sol.status) == 0).all(), "a trajectory did not reach t1"
    return took, np.asarray(sol.states), np.asarray(sol.steps_taken)


def measure(n: int, sample: int, want=lambda column: True) -> dict:
    vy = speeds(n)
    pick = np.linspace(0, n - 1, min(sample, n)).astype(int)
    truth, _ = scipy_loop(vy[pick], 1e-13, 1e-13)
    rows = []

    def add(name, seconds, states, steps, scaled=False):
        err = np.max(np.abs(states[pick] - truth) / (ATOL + RTOL * np.abs(truth)))
        rows.append(dict(column=name, status="ok", seconds=seconds, scaled=scaled,
                         err=float(err),
                         steps_min=int(np.min(steps)), steps_max=int(np.max(steps))))

    for method in ("vern9", "dop853"):
        name = f"VGPU cpu {method}"
        if want(name):
            try:
                add(name, *vgpu_column(method, "cpu", vy))
            except Exception as exc:          # noqa: BLE001 - a column that cannot run says why
                why = describe_error(exc, Config())
                rows.append(dict(column=name, status=why, error=why))
            log(f"  {name}: {rows[-1]}")
    name = f"scipy DOP853 (sampled {len(pick)}, scaled)"
    began = time.perf_counter()
    out, steps = scipy_loop(vy[pick], RTOL, ATOL)
    took = (time.perf_counter() - began) * n / len(pick)
    full = np.full((n, 4), np.nan)
    full[pick] = out
    add(name, took, full, steps, scaled=True)
    log(f"  {name}: {rows[-1]}")
    return {"n": n, "sample": len(pick), "rtol": RTOL, "atol": ATOL, "rows": rows}


def _targets(data) -> list[Target]:
    rows = data["rows"]
    scipy = rows[-1]
    out = []
    for r in rows[:-1]:
        if "error" in r:
            out.append(Target(f"{r['column']} >= {NEED:g}x the scipy DOP853 loop", None,
                              r["error"]))
            continue
        ratio = scipy["seconds"] / r["seconds"]
        out.append(Target(f"{r['column']} >= {NEED:g}x the scipy DOP853 loop",
                          ratio >= NEED, f"{ratio:.1f}x (need >= {NEED:g}x)"))
        out.append(Target(f"{r['column']} error within 10x scipy DOP853's",
                          r["err"] <= 10 * max(scipy["err"], 1.0),
                          f"err {r['err']:.3g} against scipy's {scipy['err']:.3g}",
                          kind="accuracy"))
    return out


def run(cfg: Config) -> Result:
    n = (cfg.n or [QUICK_N if cfg.quick else DEFAULT_N])[0]
    data = measure(n, QUICK_SAMPLE if cfg.quick else DEFAULT_SAMPLE, cfg.wants)
    res = Result(NAME)
    table = Table(f"Arenstorf orbits, N = {n:,}, one period, float64, rtol = atol = "
                  f"{RTOL:g}; err: max |y - DOP853 at 1e-13| / (atol + rtol |y|) on "
                  f"{data['sample']} trajectories",
                  ["column", "seconds", "x scipy loop", "steps", "err"])
    scipy = data["rows"][-1]
    for r in data["rows"]:
        if "error" in r:
            table.rows.append([r["column"], r["error"], None, None, None])
            continue
        table.rows.append([r["column"], r["seconds"], scipy["seconds"] / r["seconds"],
                           f"{r['steps_min']}..{r['steps_max']}", r["err"]])
    res.tables.append(table)
    res.data = data
    res.targets = _targets(data)
    if cfg.quick:       # tiny sizes time the call overhead, not the methods
        for t in res.targets:
            if t.kind == "speed":
                t.kind = "info"
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=DEFAULT_N)
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help="trajectories scipy runs")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    data = measure(args.n, args.sample)
    scipy = data["rows"][-1]
    print(f"Arenstorf orbits, N = {args.n:,}, one period, float64, rtol = atol = {RTOL:g}; "
          f"err on {data['sample']} trajectories against DOP853 at 1e-13")
    print(f"{'column':<34} {'seconds':>9} {'x scipy':>9} {'steps':>11} {'err':>8}")
    for r in data["rows"]:
        if "error" in r:
            print(f"{r['column']:<34} failed: {r['error']}")
            continue
        print(f"{r['column']:<34} {r['seconds']:9.3f} {scipy['seconds'] / r['seconds']:9.1f} "
              f"{r['steps_min']:>5}..{r['steps_max']:<5} {r['err']:8.3f}")
    targets = _targets(data)
    for t in targets:
        print(t.render())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(data, targets=[dict(name=t.name, passed=t.passed, detail=t.detail,
                                                kind=t.kind) for t in targets]), fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
