"""The GLSL backend's ``run(bound, progress) -> Solution`` and its kernel caches.

Compile once, bind once, dispatch many. A kernel (a compiled program and
the buffers it runs on) is kept in memory per key = hash(compiler version,
canonical IR with spans, dtype, which params are per-trajectory, GL driver,
shapes): a call with the same program and shapes only writes buffers and
dispatches; a new shape compiles once. The lowered GLSL does not depend on
shapes (they are uniforms), so the disk cache keys it without them: a new
process, or a new shape, skips lowering and only compiles.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import threading
import weakref
from pathlib import Path

import numpy as np

from ..errors import BackendError
from ..ir.nodes import Field
from . import gl
from .bound import Bound, Progress, Solution
from .counters import COUNTERS
from .disk_cache import DiskCache
from .glsl_exec import execute, private_if_busy
from .kernel_cache import GpuKernel, KernelCache

MEMORY = KernelCache()
DISK = DiskCache()
_DTYPE_NAMES = {np.dtype(n): n for n in ("float32", "float64")}  # np.dtype.name is slow
_key_lock = threading.Lock()
_key_memo: dict[tuple, tuple[weakref.ref, str]] = {}


def available() -> bool:
    """True when an OpenGL 4.3 context can be made here (VGPU_NO_GL, read when the
    context is first wanted, says no)."""
    return gl.available()


def run(bound: Bound, progress: Progress = None) -> Solution:
    if not available():
        raise BackendError("no OpenGL 4.3 context can be made here; use backend='numpy'")
    if 0 in bound.grid_shape:       # an empty ensemble: nothing to dispatch, zero outputs
        from ..backends import numpy_ref
        return numpy_ref.run(bound, progress)
    kernel = private_if_busy(_kernel(bound))    # a progress callback's call: see glsl_exec
    with kernel.lock:
        sol = execute(kernel, bound, progress)
    if progress is not None:        # outside the lock: the callback may call run_field
        progress(bound.steps, bound.steps)
    return sol


def _kernel(bound: Bound) -> GpuKernel:
    """The kernel for this call. Calls of one signature share ``bound.memo``: a repeated
    call finds its kernel there, checking that the memory cache still holds it (not
    evicted or cleared) and that VGPU_REDUCTION did not change."""
    from ..backends.glsl import REDUCTION_ENV
    env = os.environ.get(REDUCTION_ENV)
    hit = bound.memo.get("glsl")
    if hit is not None and hit[0] == env and MEMORY.get(hit[1].key) is hit[1]:
        COUNTERS.add("memory_hits")
        return hit[1]
    kernel = kernel_for(bound.field, _DTYPE_NAMES[bound.dtype],
                        tuple(sorted(bound.per_trajectory)), shape_signature(bound))
    bound.memo["glsl"] = (env, kernel)
    return kernel


def shape_signature(bound: Bound) -> tuple:
    """The shapes that size a kernel's buffers: part of its memory key. (bind fills
    inputs and outputs in declaration order; dims are sorted: the order they are bound
    in depends on the call.)"""
    return (bound.grid_shape, tuple(sorted(bound.dims.items())),
            tuple((k, v.shape) for k, v in bound.inputs.items()),
            tuple(bound.output_shapes.items()))


# --- finding or making a kernel ------------------------------------------------------
@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the backend's templates and code: a change to either is a new kernel."""
    from ..backends import glsl
    from ..backends.glsl import VERSION
    from ..backends.glsl.template import environment
    h = hashlib.sha256(VERSION.encode())
    folders = [Path(environment().loader.searchpath[0]), Path(glsl.__file__).parent]
    for folder in folders:
        for p in sorted(folder.iterdir()):
            if p.suffix in (".j2", ".py"):
                h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def kernel_key(field: Field, dtype: str, pt: tuple[str, ...]) -> str:
    from ..backends.glsl import REDUCTION_ENV, device_reduction
    memo = (id(field), dtype, pt, os.environ.get(REDUCTION_ENV))   # per call: keep it cheap
    with _key_lock:
        hit = _key_memo.get(memo)
    if hit is not None and hit[0]() is field:
        return hit[1]
    dev = gl.device_info()
    parts = [compiler_fingerprint(), canonical(field), dtype, ",".join(sorted(pt)),
             dev.get("vendor", ""), dev.get("renderer", ""), dev.get("version", ""),
             device_reduction()]
    key = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:40]
    with _key_lock:
        if len(_key_memo) > 256:
            _key_memo.clear()
        _key_memo[memo] = (weakref.ref(field), key)
    return key


@functools.lru_cache(maxsize=1024)
def memory_key(key: str, shapes: tuple) -> str:
    """A kernel's key in memory: its GLSL's key and the shapes that size its buffers."""
    return hashlib.sha256(f"{key}\x00{shapes!r}".encode()).hexdigest()[:40]


def kernel_for(field: Field, dtype: str, pt: tuple[str, ...], shapes: tuple = ()) -> GpuKernel:
    key = kernel_key(field, dtype, pt)                  # the GLSL text's key (disk)
    mkey = memory_key(key, shapes)
    kernel = MEMORY.get(mkey)
    if kernel is not None:
        COUNTERS.add("memory_hits")
        return kernel
    found = DISK.load(key)
    if found is not None:
        COUNTERS.add("disk_hits")
        source, meta = found
    else:
        from ..backends.glsl import build, device_reduction
        source, desc = build(field, dtype=dtype, per_trajectory_params=pt,
                             reduction=device_reduction())
        meta = desc.meta()
        DISK.store(key, source, meta)
    kernel = GpuKernel(mkey, source, meta)
    kernel.disk_key = key
    try:
        gl.call(kernel.compile)
    except gl.NoContext as exc:
        raise BackendError(f"no OpenGL context: {exc}") from None
    except Exception as exc:       # a driver that rejects the shader: a compiler bug
        if found is not None:       # a stale or foreign disk entry: drop it, rebuild once
            DISK.evict(key)
            return kernel_for(field, dtype, pt, shapes)
        raise BackendError(f"the OpenGL driver rejected the shader of field "
                           f"`{field.name}`: {exc}") from None
    COUNTERS.add("compiles")
    return MEMORY.put(kernel)


def canonical(field: Field) -> str:
    """A digest of the field's IR, spans included (they are in the error table).
    kernel_key memoises it per field object, so it is computed once per program."""
    return _canon(field, {})


def _canon(obj, memo: dict) -> str:
    """A digest of every field of every node, spans included. Shared subtrees (an
    inlined let used twice) are digested once, so the cost is linear in the DAG."""
    if isinstance(obj, (tuple, list)):
        return "(" + ",".join(_canon(x, memo) for x in obj) + ")"
    if not (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return repr(obj)
    hit = memo.get(id(obj))
    if hit is None:
        inner = ",".join(f"{f.name}={_canon(getattr(obj, f.name), memo)}"
                         for f in dataclasses.fields(obj))
        hit = hashlib.sha256(f"{type(obj).__name__}({inner})".encode()).hexdigest()[:32]
        memo[id(obj)] = hit
    return hit


# --- cache management --------------------------------------------------------------------
def cache_info() -> dict:
    info = {"memory_entries": len(MEMORY), "memory_capacity": MEMORY.capacity,
            "memory_bytes": MEMORY.nbytes()}
    info.update(DISK.info())
    info.update(COUNTERS.snapshot())
    return info


def clear_cache(memory: bool = True, disk: bool = True) -> dict:
    out = {}
    if memory:
        out["memory"] = MEMORY.clear()
    if disk:
        out["disk"] = DISK.clear()
    return out


def evict(field: Field, dtype: str = "float32", per_trajectory_params=()) -> bool:
    """Drop a field's kernels (every shape) from memory, and its GLSL from disk."""
    key = kernel_key(field, dtype, tuple(per_trajectory_params))
    dropped = [MEMORY.evict(k.key) for k in MEMORY.values() if k.disk_key == key]
    return any(dropped) | DISK.evict(key)


def set_cache_dir(folder) -> None:
    """Use ``folder`` for the disk cache (None: VGPU_CACHE_DIR or the user cache folder)."""
    DISK.set_folder(folder)


def set_memory_capacity(n: int) -> None:
    MEMORY.resize(n)
