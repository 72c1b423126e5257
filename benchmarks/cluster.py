"""The Lorenz sweep on a Dask cluster: what distribution costs.

The sweep of benchmarks/lorenz.py (rho = linspace(0, 21, N), u0 = (1, 0, 0),
dt = 0.001, 1000 RK4 steps, float32) run locally (one process) and on a
LocalCluster of 2 worker processes x 1 thread on this machine, split into 1, 8
and 64 blocks (``vgpu.run_field(..., chunks=N // blocks)``, numpy inputs sent
from the client). Every cluster result is checked bit for bit against the local
one. The overhead of distribution is cluster time / local time; from the blocks
measured, the smallest block size that keeps it under 1.2x, and a per-block cost
measured on a run too short to compute anything (64 blocks of 64 trajectories,
1 step) that says where the 1.2x line falls for other sizes.

On this machine the two workers share the cores the local run has alone (and
other processes' load): the cluster can only lose here. What it measures is the
price of splitting and shipping, which a cluster of GPUs pays too.
"""
from __future__ import annotations

import pathlib

import numpy as np

from .common import Config, Result, Table, Target, log, measure_round_robin, optional

NAME = "cluster"
SRC_PATH = pathlib.Path(__file__).resolve().parent.parent / "examples" / "lorenz.field"
DT, STEPS = 0.001, 1000
DEFAULT_N = [262144, 4194304]
QUICK_N, QUICK_STEPS = [4096], 20
BLOCKS = [1, 8, 64]
QUICK_BLOCKS = [1, 8]
WORKERS = 2
LIMIT = 1.2


def problem(n: int):
    rho = np.linspace(0.0, 21.0, n).astype(np.float32)
    u0 = np.tile(np.array([1.0, 0.0, 0.0], np.float32), (n, 1))
    return rho, u0


def run(cfg: Config) -> Result:
    res = Result(NAME)
    distributed, why = optional("distributed")
    ns = cfg.n or (QUICK_N if cfg.quick else DEFAULT_N)
    steps = cfg.steps or (QUICK_STEPS if cfg.quick else STEPS)
    blocks_list = QUICK_BLOCKS if cfg.quick else BLOCKS
    res.data = {"params": {"rho": "linspace(0, 21, N)", "u0": [1, 0, 0], "dt": DT,
                           "steps": steps, "dtype": "float32", "workers": WORKERS,
                           "threads_per_worker": 1}, "runs": {}}
    if distributed is None:
        res.targets.append(Target("cluster benchmark", None, f"dask.distributed: {why}"))
        return res
    import vgpu
    src = SRC_PATH.read_text()
    cluster = distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1,
                                       processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        per_block = _per_block_cost(vgpu, src, cfg)
        res.data["per_block_s"] = per_block
        for n in ns:
            res.data["runs"][str(n)] = _one_size(vgpu, src, n, steps, blocks_list, cfg, res)
    finally:
        client.close()
        cluster.close()
    res.targets = _targets(res.data, ns, steps)
    return res


def _columns(vgpu, src, rho, u0, steps, blocks_list):
    """The whole call in this process; per block count, the same blocks run one after
    another in this process (dask's synchronous scheduler: the split without the
    cluster) and on the cluster."""
    n = len(rho)
    out = [(LOCAL, lambda: lambda: np.asarray(vgpu.run_field(
        src, u0, params={"rho": rho}, dt=DT, steps=steps)))]
    for b in blocks_list:
        if n % b:
            continue
        call = (lambda b=b: vgpu.run_field(src, u0, params={"rho": rho}, dt=DT, steps=steps,
                                           chunks=n // b))
        if b > 1:
            out.append((f"in-process, {b} blocks",
                        lambda call=call: lambda: call().compute(scheduler="sync")))
        out.append((f"cluster, {b} block{'s' if b > 1 else ''}",
                    lambda call=call: lambda: call().compute()))
    return out


LOCAL = "local, one call"


def _one_size(vgpu, src, n, steps, blocks_list, cfg, res) -> list[dict]:
    rho, u0 = problem(n)
    log(f"cluster: Lorenz N = {n:,}, {steps} steps")
    rows, makers = {}, {}
    for name, make in _columns(vgpu, src, rho, u0, steps, blocks_list):
        rows[name] = {"column": name, "status": "ok"}
        makers[name] = make

    def failed(name, exc):
        rows[name]["status"] = f"{type(exc).__name__}: {exc}"

    timings = measure_round_robin(makers, cfg, failed)
    local = timings.get(LOCAL)
    for name, tm in timings.items():
        row = rows[name]
        blocks = 1 if name == LOCAL else int(name.split(", ")[1].split()[0])
        row.update(blocks=blocks, block_size=n // blocks, first_s=tm.first_s, best_s=tm.best_s,
                   runs=tm.runs, rate=n * steps / tm.best_s)
        if local is not None:
            row["ratio"] = tm.best_s / local.best_s
            row["identical"] = bool(np.array_equal(np.asarray(tm.result), local.result))
        split = timings.get(f"in-process, {blocks} blocks")
        if name.startswith("cluster") and split is not None:
            row["ratio_split"] = tm.best_s / split.best_s
    table = Table(f"Lorenz sweep on a {WORKERS}-worker LocalCluster, N = {n:,}, {steps} RK4 "
                  f"steps, float32",
                  ["column", "block size", "first s", "steady s", "traj-steps/s",
                   "/ one call", "/ in-process blocks", "bit-identical"])
    for row in rows.values():
        if row["status"] != "ok":
            table.rows.append([row["column"], row["status"]] + [None] * 6)
            continue
        table.rows.append([row["column"], row["block_size"], row["first_s"], row["best_s"],
                           row["rate"], row.get("ratio"), row.get("ratio_split"),
                           row.get("identical")])
    table.notes = [f"{WORKERS} worker processes x 1 thread on this machine's "
                   f"{_cores()} cores, which an in-process run has alone; other processes "
                   f"load the machine too",
                   "first = with each worker's compile of the block's shape; steady = best "
                   "of the timed runs after it (round-robin over the columns)",
                   "in-process blocks: the same blocks run one after another here (dask's "
                   "synchronous scheduler): the split without the cluster",
                   "numpy inputs go from the client with the graph (chunks=)"]
    res.tables.append(table)
    return list(rows.values())


def _per_block_cost(vgpu, src, cfg) -> float | None:
    """Seconds a block costs beyond its computing: 64 blocks of 64 trajectories, 1 step,
    against the same run locally, per block."""
    rho, u0 = problem(64 * 64)
    timings = measure_round_robin({
        "local": lambda: lambda: vgpu.run_field(src, u0, params={"rho": rho}, steps=1),
        "cluster": lambda: lambda: vgpu.run_field(src, u0, params={"rho": rho}, steps=1,
                                                  chunks=64).compute(),
    }, cfg, lambda name, exc: log(f"  per-block cost: {name} failed: {exc}"))
    if len(timings) < 2:
        return None
    return max(0.0, (timings["cluster"].best_s - timings["local"].best_s) / 64)


def _cores() -> int:
    import os
    return os.cpu_count() or 1


def _targets(data: dict, ns: list[int], steps: int) -> list[Target]:
    out = []
    bad = [f"{r['column']} at N = {n}" for n, rows in data["runs"].items() for r in rows
           if r.get("identical") is False]
    measured = any(r.get("identical") is not None for rows in data["runs"].values()
                   for r in rows)
    out.append(Target("every cluster result bit-identical to the local run",
                      (not bad) if measured else None,
                      "all identical" if not bad else "differ: " + ", ".join(bad),
                      kind="accuracy"))
    for n, rows in data["runs"].items():
        ok = [r for r in rows if r.get("ratio") is not None and r["column"].startswith("cluster")]
        # against the same blocks in-process where measured (the split's own cost is not
        # distribution's), else against the one call
        for r in ok:
            r["overhead"] = r.get("ratio_split") or r["ratio"]
        under = [r["block_size"] for r in ok if r["overhead"] <= LIMIT]
        detail = ", ".join(f"{r['blocks']} blocks: {r['overhead']:.2f}x" for r in ok)
        if under:
            detail += f"; smallest block measured under {LIMIT}x: {min(under):,} trajectories"
        else:
            detail += f"; no block size measured stays under {LIMIT}x"
        out.append(Target(f"overhead of distribution (cluster / in-process, same blocks), "
                          f"N = {int(n):,}",
                          None, detail or "not measured", kind="info"))
    cost = data.get("per_block_s")
    local_rate = _local_rate(data)
    if cost is not None and local_rate:
        # a block of b trajectories computes for b * steps / rate seconds (a worker at the
        # local rate); its fixed cost stays under 20% of that when b >= 5 * cost * rate / steps
        b = 5 * cost * local_rate / steps
        out.append(Target(f"per-block cost, and the block size for <= {LIMIT}x", None,
                          f"{cost * 1e3:.1f} ms per block; at {local_rate:.3g} traj-steps/s "
                          f"and {steps} steps: blocks of >= {b:,.0f} trajectories",
                          kind="info"))
    return out


def _local_rate(data: dict) -> float | None:
    best = None
    for rows in data["runs"].values():
        for r in rows:
            if r["column"] == LOCAL and r.get("rate"):
                best = max(best or 0.0, r["rate"])
    return best
