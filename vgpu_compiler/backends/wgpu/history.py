"""``save_every`` histories written by the WGSL shader (as glsl/history.py does for GLSL):
the step loop stores every saved step's state into ``b_hist`` inside the dispatch; each
dispatch's saved states are copied into the staging buffer with the dispatch's own
read-backs (one map per dispatch). The kernel is found here and run by runtime/fixed.py's
driver (runner._execute). Fields with ``collapse`` keep the plain kernel (a dispatch ends
at every saved step: a collapsed basin repeats its final state, which the stopped loop
does not write)."""
from __future__ import annotations

import hashlib

from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS
from ...errors import BackendError
from . import build, check_dtype
from . import device as dev
from .disk_cache import DISK
from .runner import MEMORY, Kernel, _execute, _here, _lock, field_id, identity, reduction


def _kernel(bound: Bound) -> Kernel:
    dtype = bound.dtype.name
    check_dtype(dtype, bound.field.span)
    pt = tuple(sorted(bound.per_trajectory))
    red = reduction()
    key = identity(bound.field, dtype, pt, red) + "-h"
    shapes = (bound.grid_shape, tuple(sorted(bound.dims.items())),
              tuple((k, v.shape) for k, v in bound.inputs.items()),
              tuple(bound.output_shapes.items()))
    mkey = hashlib.sha256(f"{key}\x00{shapes!r}".encode()).hexdigest()[:40]
    kernel = MEMORY.get(mkey)
    if kernel is not None:
        COUNTERS.add("memory_hits")
        return kernel
    found = DISK.load(key)
    if found is not None:
        COUNTERS.add("disk_hits")
        source, meta = found
    else:
        source, printed = build(bound.field, dtype=dtype, per_trajectory_params=pt,
                                reduction=red, history=True)
        k = printed.kernel
        shared = 4 * (k.basin_size * (len(k.coupled_arrays) + len(k.reductions))
                      + k.results) if k.has_basin else 0
        meta = dict(printed.meta(), dtype=dtype, pt=list(pt), workgroup_bytes=shared)
        DISK.store(key, source, meta)
    with dev.get().lock:
        try:
            kernel = Kernel(mkey, source, meta)
        except Exception as exc:        # noqa: BLE001 - naga refused the WGSL: a bug
            DISK.evict(key)
            raise BackendError(f"wgpu rejected the history WGSL of field "
                               f"`{bound.field.name}`: {exc}") from None
    kernel.field_id, kernel.dtype, kernel.pt = field_id(bound.field), dtype, pt
    COUNTERS.add("compiles")
    MEMORY.put(mkey, kernel)
    return kernel


def run(bound: Bound, progress) -> Solution:
    if not dev.available():
        raise BackendError(f"no wgpu device here ({dev.get().error})")
    kernel = _kernel(bound)
    if _here.inside(kernel):                        # inside a progress callback of its run
        kernel = kernel.private()
    with _lock:
        sol = _execute(kernel, bound, progress)    # (runtime/fixed.py: its kernel writes b_hist)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol
