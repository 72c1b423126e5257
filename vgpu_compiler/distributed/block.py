"""What a Dask worker runs: one block (a window of rows of the first grid axis).

The block calls the API's ``solve_window`` in the worker process: the program is parsed
once per process (the API's parse cache), the kernel compiled once per process and shape
(the GLSL backend's memory cache) and lowered once per machine (its disk cache, under
the worker's ``VGPU_CACHE_DIR``). ``backend="auto"`` is the worker's own choice: a worker
with a GPU runs GLSL on it, one without falls back as a local run would; the Solution
names it (``backend``) and a log line on the worker says it.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ..call.window import Window

log = logging.getLogger("vgpu.distributed")


def run(spec: dict, start: int, stop: int, h0, *pt):
    """The Solution of rows [start, stop) of the call that ``spec`` describes (the
    per-trajectory params ``pt`` in the order of ``spec["pt"]``), as numpy arrays."""
    from ..api import solve_window
    params = dict(spec["params"])
    params.update(zip(spec["pt"], pt))
    sol = solve_window(spec["source"], Window(int(start), int(stop), spec["rows"]),
                       h0, params=params, inputs=spec["inputs"], dims=spec["dims"],
                       field=spec["field"], backend=spec["backend"], dtype=spec["dtype"],
                       dt=spec["dt"], steps=spec["steps"], t0=spec["t0"],
                       save_every=spec["save_every"])
    log.info("vgpu: rows [%d, %d) of %d ran on the %s backend (pid %d)", start, stop,
             spec["rows"], sol.backend, os.getpid())
    return sol


def part(sol, name: str):
    """One array of a block's Solution (an output: ``outputs/<name>``)."""
    if name.startswith("outputs/"):
        return sol.outputs[name[len("outputs/"):]]
    return getattr(sol, name)


def label(sol, name: str) -> np.ndarray:
    """A block's value of a non-array attribute (its backend), as a 1-element array."""
    out = np.empty(1, object)
    out[0] = getattr(sol, name)
    return out
