"""``save_every`` histories written by the shader: the step loop stores every saved
step's state into a history buffer (``b_hist``) inside the dispatch, so a history costs
no dispatch per saved state; each dispatch's saved steps are read back after it.

The history kernel is the field's kernel built with ``history=True`` (shader/lower.py),
cached beside it under its own key (the plain kernel's key plus ``-h``), and run by
runtime/fixed.py's driver (execute.execute: each dispatch ends where the history buffer
is full, and reads back its saved steps). Fields with ``collapse`` keep the plain
kernel (a dispatch ends at every saved step): a collapsed basin repeats its final state
in the history, which the loop, stopped, does not write.
"""
from __future__ import annotations

import os

from ...call.bound import Bound, Progress, Solution
from ...call.counters import COUNTERS
from ...errors import BackendError
from . import REDUCTION_ENV, build, device_reduction
from . import device as gl
from .execute import execute, private_if_busy
from .kernel_cache import FieldView, GpuKernel, holding
from . import lookup


def run(bound: Bound, progress: Progress) -> Solution:
    if not lookup.available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    found = _kernel(bound)
    kernel = private_if_busy(found)
    with holding(kernel):
        sol = execute(kernel, bound, progress)     # (runtime/fixed.py: its kernel writes b_hist)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol


def _kernel(bound: Bound):
    """The field's history kernel for this call's shapes (memory, then disk, then built)."""
    env = os.environ.get(REDUCTION_ENV)
    slots = bound.prepared.slots if bound.prepared is not None else {}
    hit = slots.get("glsl_hist")
    if hit is not None and hit[0] == env and lookup.MEMORY.get(hit[1].base.key) is hit[1].base:
        COUNTERS.add("memory_hits")
        return hit[1]
    dtype, pt = bound.dtype.name, tuple(sorted(bound.per_trajectory))
    key, fid, spans = lookup._identity(bound.field, dtype, pt, env)
    key += "-h"
    mkey = lookup.memory_key(key, lookup.shape_signature(bound))
    kernel = lookup.MEMORY.get(mkey)
    if kernel is None:
        found = lookup.DISK.load(key)
        if found is not None:
            COUNTERS.add("disk_hits")
            source, meta = found
        else:
            from . import device_software      # (looked up now: tests replace it)
            source, desc = build(bound.field, dtype=dtype, per_trajectory_params=pt,
                                 reduction=device_reduction(), history=True,
                                 software=device_software())
            meta = dict(desc.meta(), spans=spans, dtype=dtype, pt=list(pt))
            lookup.DISK.store(key, source, meta)
        kernel = GpuKernel(mkey, source, meta)
        kernel.disk_key, kernel.field_id, kernel.dtype, kernel.pt = key, fid, dtype, pt
        try:
            gl.call(kernel.compile)
        except gl.NoContext as exc:
            raise BackendError(f"no OpenGL context: {exc}") from None
        except Exception as exc:        # noqa: BLE001 - a driver that rejects the shader
            lookup.DISK.evict(key)
            raise BackendError(f"the OpenGL driver rejected the history shader of field "
                               f"`{bound.field.name}`: {exc}") from None
        COUNTERS.add("compiles")
        kernel = lookup.MEMORY.put(kernel)
    else:
        COUNTERS.add("memory_hits")
    if kernel.meta.get("spans") != spans:
        kernel = FieldView(kernel, lookup._ErrorTable(bound.field, dtype, pt, kernel.meta))
    slots["glsl_hist"] = (env, kernel)
    return kernel
