"""The cost of forward sensitivities: a Lorenz sweep with and without d(x,y,z)/d(sigma,rho,beta).

sigma = 10, beta = 8/3, rho_i = linspace(0, 21, N), u0 = (1, 0, 0), float32, end
state only, two methods: rk4 with 1000 fixed steps of dt = 0.001 (examples/lorenz.field)
and tsit5 on t in [0, 10] at rtol = atol = 1e-6 (examples/lorenz_tsit5.field). Each is
run by vgpu.solve on cpu and glsl, plain and with sensitivities=["sigma", "rho", "beta"]
(the joined field: 3 states + 9 sensitivities, the same method on the same steps).
Target (issue 30): with sensitivities at most (1 + n_params) = 4x the plain run's time.
Sanity check: the states (and the adaptive run's steps) with sensitivities are
bit-identical to those without (an AssertionError otherwise: the contract says so).
`--n` sets N (default 65,536), `--steps` rk4's step count.
"""
from __future__ import annotations

import pathlib

import numpy as np

from .common import (Config, Result, Table, Target, as_info, describe_error, loadavg, log,
                     measure_round_robin, vgpu_module)

NAME = "sensitivities"
EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
NAMES = ["sigma", "rho", "beta"]
BOUND = 1 + len(NAMES)              # the cost of n params: at most (1 + n) plain runs
DT, STEPS = 0.001, 1000
T1, RTOL, ATOL = 10.0, 1e-6, 1e-6
DEFAULT_N, QUICK_N, QUICK_STEPS = [65536], [256], 50
BACKENDS = [("cpu", "VGPU cpu"), ("glsl", "VGPU GLSL")]


def methods(steps: int):
    """(label, field file, solve arguments) of the two methods."""
    return [(f"rk4, {steps} steps", "lorenz.field", {"dt": DT, "steps": steps}),
            (f"tsit5, t1 = {T1:g}", "lorenz_tsit5.field",
             {"t1": T1, "rtol": RTOL, "atol": ATOL})]


def problem(n: int):
    rho = np.linspace(0.0, 21.0, n).astype(np.float32)
    u0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    return rho, u0


def _maker(src, u0, rho, backend, kwargs, sens):
    def make():
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)

        def run():
            sol = vgpu.solve(src, u0, params={"rho": rho}, backend=backend, dtype="float32",
                             sensitivities=sens, **kwargs)
            return (np.asarray(sol.states), np.asarray(sol.steps_taken),
                    None if sens is None else np.asarray(sol.sensitivities))
        return run
    return make


def check_identical(label: str, plain, with_sens) -> None:
    """The contract: states and steps with sensitivities bit-identical to those without."""
    (h0, s0, _), (h1, s1, dh) = plain, with_sens
    assert h0.shape == h1.shape and h0.dtype == h1.dtype and h0.tobytes() == h1.tobytes(), \
        f"{label}: the states with sensitivities differ from those without"
    assert np.array_equal(s0, s1), f"{label}: the steps with sensitivities differ"
    assert dh.shape == h0.shape + (len(NAMES),), f"{label}: sensitivities of shape {dh.shape}"


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    steps = cfg.steps or (QUICK_STEPS if cfg.quick else STEPS)
    res = Result(NAME)
    res.data = {"params": {"sigma": 10.0, "beta": 8.0 / 3.0, "rho": "linspace(0, 21, N)",
                           "u0": [1, 0, 0], "dtype": "float32", "sensitivities": NAMES,
                           "rk4": {"dt": DT, "steps": steps},
                           "tsit5": {"t1": T1, "rtol": RTOL, "atol": ATOL}, "bound": BOUND},
                "runs": {}}
    for n in ns:
        rho, u0 = problem(n)
        log(f"sensitivities N = {n:,}")
        rows, makers = {}, {}
        for label, path, kwargs in methods(steps):
            src = (EXAMPLES / path).read_text()
            for backend, col in BACKENDS:
                name = f"{col}, {label}"
                if not cfg.wants(name):
                    continue
                rows[name] = {"column": name, "method": label, "backend": backend,
                              "status": "ok"}
                makers[name + " plain"] = _maker(src, u0, rho, backend, kwargs, None)
                makers[name + " sens"] = _maker(src, u0, rho, backend, kwargs, NAMES)

        def failed(key, exc):
            rows[key.rsplit(" ", 1)[0]]["status"] = describe_error(exc, cfg)

        timings = measure_round_robin(makers, cfg, failed)
        sens_by = {}
        for name, row in rows.items():
            plain, sens = timings.get(name + " plain"), timings.get(name + " sens")
            if row["status"] != "ok" or plain is None or sens is None:
                if row["status"] == "ok":
                    row["status"] = "error: a run failed"
                continue
            check_identical(name, plain.result, sens.result)
            steps_taken = plain.result[1]
            sens_by[name] = sens.result[2]
            row.update(plain_s=plain.best_s, sens_s=sens.best_s, ratio=sens.best_s / plain.best_s,
                       plain_first_s=plain.first_s, sens_first_s=sens.first_s,
                       runs=min(plain.runs, sens.runs), identical=True,
                       steps_mean=float(np.mean(steps_taken)),
                       sens_finite=bool(np.isfinite(sens.result[2]).all()))
        for label, _, _ in methods(steps):     # cpu against glsl: the same equations
            a, b = (sens_by.get(f"{col}, {label}") for _, col in BACKENDS)
            if a is not None and b is not None:
                d = np.linalg.norm((b - a).reshape(n, -1), axis=-1)
                rows[f"VGPU GLSL, {label}"]["sens_vs_cpu"] = float(np.max(
                    d / (1.0 + np.linalg.norm(a.reshape(n, -1), axis=-1))))
        res.data["loadavg_after_" + str(n)] = loadavg()
        res.data["runs"][str(n)] = list(rows.values())
        res.tables.append(_table(n, steps, rows))
        res.targets += _targets(n, rows, cfg)
    return res


def _table(n, steps, rows) -> Table:
    headers = ["method", "mean steps"]
    for _, col in BACKENDS:
        headers += [f"{col} plain s", f"{col} with sens s", f"{col} ratio"]
    table = Table(f"Lorenz, N = {n:,}, float32: plain against sensitivities to "
                  f"{', '.join(NAMES)} (bound {BOUND}x)", headers)
    for label, _, _ in methods(steps):
        cells, mean_steps = [label], None
        for _, col in BACKENDS:
            row = rows.get(f"{col}, {label}")
            if row is None:
                cells += ["not run", None, None]
            elif row["status"] != "ok":
                cells += [row["status"], None, None]
            else:
                cells += [row["plain_s"], row["sens_s"], row["ratio"]]
                mean_steps = row["steps_mean"]
        table.rows.append(cells[:1] + [mean_steps] + cells[1:])
    table.notes = [
        "vgpu.solve(..., dtype='float32'), plain and with sensitivities=" + repr(NAMES) +
        ": best of the timed runs after a warm-up call (compile excluded), round-robin",
        "ratio = with sens / plain; the joined field integrates 3 + 9 states",
        "states and steps with sensitivities bit-identical to those without (asserted)"]
    errs = {r["column"]: r["sens_vs_cpu"] for r in rows.values() if "sens_vs_cpu" in r}
    if errs:
        table.notes.append("sensitivities, GLSL against cpu, max over trajectories of "
                           "|S_glsl - S_cpu| / (1 + |S_cpu|): " +
                           ", ".join(f"{k.split(', ', 1)[1]} {v:.2g}" for k, v in errs.items()) +
                           " (tsit5 in float32: rounding moves a trajectory's steps between "
                           "backends, and at a stable equilibrium the states' error norm lets "
                           "the step grow to the stability limit, where S, not the states, "
                           "is amplified)")
    return table


def _targets(n, rows, cfg) -> list[Target]:
    out = []
    for row in rows.values():
        name = f"{row['column']}: with sensitivities <= {BOUND}x plain, N = {n:,}"
        if "ratio" not in row:
            out.append(Target(name, None, f"not measured ({row['status']})"))
            continue
        t = Target(name, row["ratio"] <= BOUND,
                   f"{row['ratio']:.2f}x ({row['sens_s']:.3g} s against {row['plain_s']:.3g} s)")
        out.append(as_info(t) if cfg.quick else t)
    ok = [r for r in rows.values() if "ratio" in r]
    out.append(Target(f"states and steps with sensitivities bit-identical, N = {n:,}",
                      all(r["identical"] and r["sens_finite"] for r in ok) if ok else None,
                      f"{len(ok)} of {len(rows)} columns compared, sensitivities finite"
                      if ok else "nothing compared", kind="accuracy"))
    return out
