"""Matmul through the field language (examples/matmul.field) against numpy's BLAS.

One trajectory per C[i, j], K euler steps each: this is the naive triple loop
on the GPU model, with no tiling and no shared-memory blocking, against a
tuned, multithreaded BLAS. BLAS is expected to win, by a lot at large sizes;
the point of the table is to say by how much. The hand GLSL column runs the
same naive algorithm written by hand, which separates the cost of VGPU's code
from the cost of the algorithm.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from .common import (Config, Result, Table, Target, describe_error, measure, vgpu_module)
from .peers import glsl_hand

NAME = "matmul"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "matmul.field"
DEFAULT_N, QUICK_N = [64, 256, 1024], [16, 48]
REF_MAX_N = 256          # the numpy reference backend is skipped above this side


def _vgpu(backend):
    def make(n):
        vgpu, why = vgpu_module()
        if vgpu is None:
            raise ImportError(why)
        src = SRC_PATH.read_text()
        return lambda A, B: np.asarray(vgpu.run_field(src, inputs={"A": A, "B": B},
                                                      backend=backend))
    return make


def _hand(n):
    k = glsl_hand.HandMatmul(n, n, n)
    return k


COLUMNS = [
    ("VGPU GLSL", _vgpu("glsl")),
    ("numpy BLAS A @ B", lambda n: (lambda A, B: A @ B)),
    ("hand GLSL (naive)", _hand),
    ("VGPU numpy ref", _vgpu("numpy")),
]


def run(cfg: Config) -> Result:
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    res = Result(NAME)
    table = Table("Matmul C = A @ B, float32, square",
                  ["n", "column", "first call s", "steady s", "GFLOP/s", "x BLAS speed",
                   "max err / max abs C"])
    rows = []
    for n in ns:
        rng = np.random.default_rng(n)
        A = rng.standard_normal((n, n)).astype(np.float32)
        B = rng.standard_normal((n, n)).astype(np.float32)
        truth = A.astype(np.float64) @ B.astype(np.float64)
        scale = float(np.max(np.abs(truth)))
        here = []
        for name, make in COLUMNS:
            if not cfg.wants(name):
                continue
            row = {"n": n, "column": name, "status": "ok"}
            here.append(row)
            if name == "VGPU numpy ref" and n > REF_MAX_N and not cfg.quick:
                row["status"] = f"skipped (n > {REF_MAX_N}: slow)"
                continue
            try:
                t = time.perf_counter()
                fn = make(n)
                setup = time.perf_counter() - t
                tm = measure(lambda: fn(A, B), cfg, setup)
            except Exception as exc:
                row["status"] = describe_error(exc, cfg)
                continue
            out = np.asarray(tm.result)
            row.update(first_s=tm.first_s, best_s=tm.best_s, gflops=2 * n ** 3 / tm.best_s / 1e9,
                       err=float(np.max(np.abs(out - truth))) / scale
                       if out.shape == truth.shape else float("inf"))
        blas = next((r.get("gflops") for r in here if r["column"].startswith("numpy BLAS")), None)
        for r in here:
            if r["status"] != "ok":
                table.rows.append([n, r["column"], r["status"], None, None, None, None])
                continue
            r["x_blas"] = r["gflops"] / blas if blas else None
            table.rows.append([n, r["column"], r["first_s"], r["best_s"], r["gflops"],
                               r.get("x_blas"), r["err"]])
        rows += here
    table.notes = ["x BLAS speed: this column's GFLOP/s / numpy BLAS's (< 1: BLAS is faster)",
                   f"the numpy reference backend is run only up to n = {REF_MAX_N} "
                   "(it takes K vectorised steps over n^2 trajectories)"]
    res.tables.append(table)
    res.data = {"rows": rows}
    bad = [f"{r['column']} n={r['n']}" for r in rows if r["status"] == "ok" and r["err"] > 1e-4]
    res.targets.append(Target("every column computes A @ B (max err / max abs C <= 1e-4)",
                              not bad, "all agree" if not bad else "wrong: " + ", ".join(bad),
                              kind="accuracy"))
    return res
