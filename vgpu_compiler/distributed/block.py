"""What a Dask worker runs: one block (a window of rows of the first grid axis).

The block calls the pipeline's ``solve_window`` in the worker process: the program is
parsed once per process (the pipeline's parse cache), the kernel compiled once per
process and shape (the GLSL backend's memory cache) and lowered once per machine (its
disk cache, under the worker's ``VGPU_CACHE_DIR``). ``backend="auto"`` is the worker's own choice: a worker
with a GPU runs GLSL on it, one without falls back as a local run would; the Solution
names it (``backend``) and a log line on the worker says it.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ..call.window import Window
from ..pipeline import solve_window

log = logging.getLogger("vgpu.distributed")


def run_blocks(*columns, spec: dict, has_h0: bool, block_id=None) -> np.ndarray:
    """``dask.array.map_blocks``' function: the block ``block_id`` of the call, from its
    rows of h0 and the per-trajectory params (each as (rows, everything else)), as a
    1-element object array holding its Solution."""
    k = block_id[0]
    start, stop = spec["bounds"][k], spec["bounds"][k + 1]
    columns = list(columns)
    h0 = None
    if has_h0:
        h0 = columns.pop(0).reshape((stop - start,) + spec["h0_shape"])
    pt = [c.reshape((stop - start,) + shape) for c, shape in zip(columns, spec["pt_shapes"])]
    out = np.empty(1, object)
    out[0] = run(spec, start, stop, h0, *pt)
    return out


def run(spec: dict, start: int, stop: int, h0, *pt):
    """The Solution of rows [start, stop) of the call that ``spec`` describes (the
    per-trajectory params ``pt`` in the order of ``spec["pt"]``), as numpy arrays."""
    params = dict(spec["params"])
    params.update(zip(spec["pt"], pt))
    sol = solve_window(spec["source"], Window(int(start), int(stop), spec["rows"]),
                       h0, params=params, inputs=spec["inputs"], dims=spec["dims"],
                       field=spec["field"], backend=spec["backend"], dtype=spec["dtype"],
                       dt=spec["dt"], steps=spec["steps"], t0=spec["t0"],
                       save_every=spec["save_every"], extra=spec["extra"], seed=spec["seed"])
    log.info("vgpu: rows [%d, %d) of %d ran on the %s backend (pid %d)", start, stop,
             spec["rows"], sol.backend, os.getpid())
    return sol


def _solution(block):
    """The Solution in a block of the object array run_blocks makes."""
    return block.reshape(-1)[0]


def part(block, name: str) -> np.ndarray:
    """One array of a block's Solution (an output: ``outputs/<name>``; an observer:
    ``observed/<name>``)."""
    sol = _solution(block)
    if name.startswith("outputs/"):
        return sol.outputs[name[len("outputs/"):]]
    if name.startswith("observed/"):
        return sol.observed[name[len("observed/"):]]
    return getattr(sol, name)


def piece(block, name: str) -> np.ndarray:
    """An array of a block's Solution with a leading axis of 1 (to be summed)."""
    return part(block, name)[np.newaxis]


def label(block, name: str) -> np.ndarray:
    """A block's value of a non-array attribute (its backend), as a 1-element array."""
    out = np.empty(1, object)
    out[0] = getattr(_solution(block), name)
    return out
