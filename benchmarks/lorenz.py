"""Lorenz parameter sweep — the benchmark of DiffEqGPU.jl.

sigma = 10, beta = 8/3, rho_i = linspace(0, 21, N), u0 = (1, 0, 0),
t in [0, 1] with dt = 0.001: 1000 fixed RK4 steps, float32, end state only.
Every column integrates the same N trajectories; its final states are checked
against a float64 RK4 on a subsample of trajectories (and against VGPU's numpy
reference where that ran).
"""
from __future__ import annotations

import pathlib

import numpy as np

from .common import (Config, Result, Table, Target, as_info, describe_error, loadavg, log,
                     max_rel_err,
                     measure_round_robin, ratio_target, vgpu_module)
from .peers import cuda_hand, diffrax_rk4, glsl_hand, numba_rk4, numpy_rk4, torch_rk4, wgsl_hand

NAME = "lorenz"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "lorenz.field"
SIGMA, BETA, DT, STEPS = 10.0, 8.0 / 3.0, 0.001, 1000
DEFAULT_N = [4096, 65536, 262144]
QUICK_N = [512]
QUICK_STEPS = 100
TARGET_N, REF_TARGET_N = 262144, 65536
WGPU_TARGET_N = 65536           # issue 15: wgpu >= 0.8x the hand WGSL kernel at this N
TOL = 1e-3


def _vgpu(backend):
    def make(rho, u0, dt, steps, sigma, beta):
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)
        src = SRC_PATH.read_text()
        return lambda: np.asarray(vgpu.run_field(src, u0, params={"rho": rho}, backend=backend,
                                                 dtype="float32", dt=dt, steps=steps))
    return make


def _cuda(rho, u0, dt, steps, sigma, beta):
    """The cuda backend's column: skipped, saying why, where it is not available."""
    from vgpu_compiler import backends
    ok, why = backends.get("cuda").available()
    if not ok:
        raise ImportError(f"skipped (no CUDA GPU here: {why[:60]})")
    return _vgpu("cuda")(rho, u0, dt, steps, sigma, beta)


# (column name, factory, note); the first column is the one every ratio is taken to.
COLUMNS = [
    ("VGPU GLSL", _vgpu("glsl"), "vgpu.run_field(backend='glsl'), examples/lorenz.field"),
    ("VGPU cpu", _vgpu("cpu"), "vgpu.run_field(backend='cpu'): generated C, OpenMP + SIMD"),
    ("VGPU numpy ref", _vgpu("numpy"), "vgpu.run_field(backend='numpy')"),
    ("hand numpy RK4", numpy_rk4.make, "vectorised over N, float32"),
    ("hand GLSL", glsl_hand.make, "raw moderngl, cached program, 1 dispatch"),
    ("VGPU wgpu", _vgpu("wgpu"), "vgpu.run_field(backend='wgpu'): WGSL through wgpu (Vulkan)"),
    ("hand WGSL", wgsl_hand.make, "raw wgpu, cached pipeline and bind group, 1 dispatch"),
    ("VGPU cuda", _cuda, "vgpu.run_field(backend='cuda'): the C kernel as CUDA C++ (NVRTC)"),
    ("hand CUDA", cuda_hand.make, "NVRTC + driver API, one thread per trajectory, 1 launch"),
    ("numba", numba_rk4.make, "parallel=True prange, float32"),
    ("numba blocked (SIMD)", numba_rk4.make_blocked,
     "prange over blocks of 64, lanes innermost: LLVM vectorises across trajectories"),
    ("torchdiffeq", torch_rk4.make, "odeint rk4 (3/8 rule), step_size=dt, (N,3) tensor"),
    ("diffrax", diffrax_rk4.make, "jit(vmap(diffeqsolve)), RK4 tableau, ConstantStepSize"),
]
PEERS = {"numba", "numba blocked (SIMD)", "torchdiffeq", "diffrax"}


def problem(n: int):
    rho = np.linspace(0.0, 21.0, n).astype(np.float32)
    u0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    return rho, u0


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    steps = cfg.steps or (QUICK_STEPS if cfg.quick else STEPS)
    dt = DT
    res = Result(NAME)
    res.data = {"params": {"sigma": SIGMA, "beta": BETA, "rho": "linspace(0, 21, N)",
                           "u0": [1, 0, 0], "dt": dt, "steps": steps, "dtype": "float32"},
                "runs": {}}
    for n in ns:
        rho, u0 = problem(n)
        sub = np.unique(np.linspace(0, n - 1, min(n, 2048)).astype(np.int64))
        truth = numpy_rk4.lorenz_rk4(rho[sub], u0[sub], dt, steps, SIGMA, BETA, np.float64)
        rows, makers = {}, {}
        log(f"lorenz N = {n:,}")
        for name, make, note in COLUMNS:
            if not cfg.wants(name):
                continue
            rows[name] = {"column": name, "note": note, "status": "ok"}
            if name in PEERS and not cfg.peers:
                rows[name]["status"] = "skipped (--no-peers)"
                continue
            makers[name] = (lambda make=make: make(rho, u0, dt, steps, SIGMA, BETA))

        def failed(name, exc):
            rows[name]["status"] = describe_error(exc, cfg)

        timings = measure_round_robin(makers, cfg, failed)
        for name, tm in timings.items():
            row = rows[name]
            if name == "diffrax":
                row["note"] = "jit(vmap(diffeqsolve)), " + diffrax_rk4.SOLVER_NOTE
            out = np.asarray(tm.result)
            row.update(first_s=tm.first_s, best_s=tm.best_s, runs=tm.runs,
                       rate=n * steps / tm.best_s,
                       compile_s=max(0.0, tm.first_s - tm.best_s),
                       err_f64=max_rel_err(out[sub], truth) if out.shape == u0.shape else float("inf"),
                       _out=out)
        res.data["loadavg_after_" + str(n)] = loadavg()
        ref_out = rows.get("VGPU numpy ref", {}).get("_out")
        glsl_rate = rows.get("VGPU GLSL", {}).get("rate")
        for row in rows.values():
            out = row.pop("_out", None)
            if out is not None and ref_out is not None:
                row["diff_vs_ref"] = max_rel_err(out, ref_out)
            if "rate" in row and glsl_rate:
                row["x_glsl"] = row["rate"] / glsl_rate
        res.data["runs"][str(n)] = list(rows.values())

        table = Table(f"Lorenz sweep, N = {n:,}, {steps} RK4 steps, float32",
                      ["column", "first call s", "steady s", "traj-steps/s", "x VGPU GLSL",
                       "err vs f64", "vs VGPU ref", "ok"])
        for row in rows.values():
            if row["status"] != "ok":
                table.rows.append([row["column"], row["status"], None, None, None, None, None, None])
                continue
            errs = [row.get("err_f64"), row.get("diff_vs_ref")]
            ok = all(e is None or e <= TOL for e in errs)
            table.rows.append([row["column"], row["first_s"], row["best_s"], row["rate"],
                               row.get("x_glsl"), row.get("err_f64"), row.get("diff_vs_ref"),
                               "ok" if ok else f"FLAG > {TOL:g}"])
        res.tables.append(table)

    notes = [f"{name}: {note}" for name, _, note in COLUMNS
             if name not in ("diffrax",)] + [
        "diffrax: jit(vmap(diffeqsolve)), " + (diffrax_rk4.SOLVER_NOTE or "RK4 tableau")]
    notes += ["first call = build + first run (JIT / shader compile / cache fill); "
              "steady = best of the timed runs after it",
              "err vs f64: max over a subsample of <= 2048 trajectories of |u - u64| / |u64| "
              "against a float64 classic RK4; vs VGPU ref: same measure against VGPU's numpy "
              "reference on all N"]
    if numba_rk4.threads():
        notes.append(f"numba threads: {numba_rk4.threads()}")
    if torch_rk4.torch is not None:
        notes.append(f"torch threads: {torch_rk4.threads()}")
    res.tables[-1].notes = notes

    res.targets = _targets(res.data["runs"], ns, steps)
    return res


def _rate(runs, n, col):
    for row in runs.get(str(n), []):
        if row["column"] == col:
            return row.get("rate")
    return None


def _targets(runs, ns, steps) -> list[Target]:
    tn = TARGET_N if TARGET_N in ns else max(ns)
    rn = REF_TARGET_N if REF_TARGET_N in ns else max(ns)
    at = f"N = {tn:,}" + ("" if tn == TARGET_N else f" (not the target N = {TARGET_N:,})")
    g = _rate(runs, tn, "VGPU GLSL")
    wn = WGPU_TARGET_N if WGPU_TARGET_N in ns else max(ns)
    wat = f"N = {wn:,}" + ("" if wn == WGPU_TARGET_N else f" (not the target N = {WGPU_TARGET_N:,})")
    out = [
        ratio_target(f"VGPU GLSL >= 5x VGPU numpy ref, {at}", g, _rate(runs, tn, "VGPU numpy ref"), 5),
        ratio_target(f"VGPU GLSL >= 0.8x hand GLSL, {at}", g, _rate(runs, tn, "hand GLSL"), 0.8),
        ratio_target(f"VGPU GLSL >= 3x numba, {at}", g, _rate(runs, tn, "numba"), 3),
        ratio_target(f"VGPU wgpu >= 0.8x hand WGSL, {wat}", _rate(runs, wn, "VGPU wgpu"),
                     _rate(runs, wn, "hand WGSL"), 0.8),
        as_info(ratio_target(f"VGPU GLSL vs numba blocked (SIMD), {at}", g,
                           _rate(runs, tn, "numba blocked (SIMD)"), 1)),
        ratio_target(f"VGPU GLSL >= 5x torchdiffeq, {at}", g, _rate(runs, tn, "torchdiffeq"), 5),
        ratio_target(f"VGPU GLSL >= 5x diffrax, {at}", g, _rate(runs, tn, "diffrax"), 5),
    ]
    for n in (65536, 262144):           # issue 20: the cpu backend
        if str(n) not in runs:
            continue
        c = _rate(runs, n, "VGPU cpu")
        out += [
            ratio_target(f"VGPU cpu >= 2.5x VGPU GLSL, N = {n:,}", c, _rate(runs, n, "VGPU GLSL"),
                         2.5),
            ratio_target(f"VGPU cpu >= 0.8x numba blocked (SIMD), N = {n:,}", c,
                         _rate(runs, n, "numba blocked (SIMD)"), 0.8),
        ]
        if c is not None:
            out.append(as_info(Target(f"VGPU cpu >= 1e9 trajectory-steps/s, N = {n:,}", c >= 1e9,
                                    f"{c:.3g} trajectory-steps/s (on a loaded machine: "
                                    "see loadavg)")))
    ref, hand = _rate(runs, rn, "VGPU numpy ref"), _rate(runs, rn, "hand numpy RK4")
    t = ratio_target(f"VGPU numpy ref within 1.5x of hand numpy, N = {rn:,}",
                     ref, None if hand is None else hand / 1.5, 1.0)
    if t.passed is not None:
        t.detail = f"ref runs at {ref / hand:.2f}x hand numpy's speed (need >= {1 / 1.5:.2f}x)"
    out.append(t)
    bad = [f"{row['column']} at N = {n}" for n, rows in runs.items() for row in rows
           if row.get("status") == "ok" and max(row.get("err_f64") or 0, row.get("diff_vs_ref") or 0) > TOL]
    out.append(Target(f"every column's final state within {TOL:g} of the reference",
                      not bad, "all agree" if not bad else "flagged: " + ", ".join(bad),
                      kind="accuracy"))
    return out
