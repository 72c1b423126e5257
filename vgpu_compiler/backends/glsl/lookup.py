"""The GLSL backend's kernels: finding or making the kernel of a call, and the caches
that keep them (runner.py and adaptive_run.py run them).

A kernel (a compiled program and the buffers it runs on) is kept in memory per
key = hash(compiler version, canonical IR without source positions, dtype, which
params are per-trajectory, GL driver, shapes): a call with the same program and
shapes only writes buffers and dispatches; a new shape compiles once. The lowered
GLSL does not depend on shapes (they are uniforms), so the disk cache keys it
without them: a new process, or a new shape, skips lowering and only compiles.

Positions are left out of the key (comments and spacing do not matter), but the
kernel's run-time error table names lines: a field whose positions differ from
those of the text that built the kernel gets a FieldView of it, whose error
table is its own (made by lowering again, only when an error is reported).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import weakref
from pathlib import Path

import numpy as np

from ...errors import BackendError
from ...ir.nodes import Field
from ...call.bound import Bound
from ...call.lru import LRU
from ...call.counters import COUNTERS
from . import device as gl
from . import REDUCTION_ENV
from .disk_cache import DiskCache
from .kernel_cache import FieldView, GpuKernel, KernelCache

MEMORY = KernelCache()
DISK = DiskCache()
_IDENTITIES = LRU(256)       # (id(field), dtype, pt, VGPU_REDUCTION) -> (weakref, identity)
_DTYPE_NAMES = {np.dtype(n): n for n in ("float32", "float64")}  # np.dtype.name is slow
FIELD_ID_CHARS = 16          # a disk key starts with this much of the field id (evict)


def available() -> bool:
    """True when an OpenGL 4.3 context can be made here (VGPU_NO_GL, read when the
    context is first wanted, says no)."""
    return gl.available()


def kernel_of_call(bound: Bound, history: bool = False) -> GpuKernel | FieldView:
    """The kernel for this call. Calls of one signature share their Prepared call
    (``bound.prepared``): a repeated call finds its kernel in its slot, checking that the
    memory cache still holds it (not evicted or cleared) and that VGPU_REDUCTION did not
    change; the slot also keeps the field's identity (its disk key), digested once.
    ``history``: the field's save_every kernel (history.py), keyed apart (``-h``)."""
    env = os.environ.get(REDUCTION_ENV)
    slots = bound.prepared.slots if bound.prepared is not None else {}
    # a field's dense variant (adaptive_host.kernel_field: save_at, a Simulation), or its
    # history kernel, is another kernel for the same call signature: a slot of its own
    slot = "glsl_hist" if history else "glsl-dense" if bound.field.solver.dense else "glsl"
    hit = slots.get(slot)
    if hit is not None and hit[0] == env and MEMORY.get(hit[2].key) is hit[2]:
        COUNTERS.add("memory_hits")
        return hit[1]
    dtype, pt = _DTYPE_NAMES[bound.dtype], tuple(sorted(bound.per_trajectory))
    if hit is not None and hit[0] == env:
        ident = hit[3]
    else:
        ident = _identity(bound.field, dtype, pt, env)
        if history:
            ident = (ident[0] + "-h",) + tuple(ident[1:])
    kernel = kernel_for(bound.field, dtype, pt, shape_signature(bound), ident, history)
    slots[slot] = (env, kernel, kernel.base, ident)
    return kernel


def _identity(field: Field, dtype: str, pt: tuple, env) -> tuple[str, str, str]:
    """``identity``, kept per field object too: a call that no signature describes (a
    list, a 0-d array) has a Prepared of its own each time, and digesting the field
    takes about 0.5 ms for Lorenz."""
    memo = (id(field), dtype, pt, env)
    hit = _IDENTITIES.get(memo)
    if hit is not None and hit[0]() is field:
        return hit[1]
    ident = identity(field, dtype, pt)
    _IDENTITIES.put(memo, (weakref.ref(field), ident))
    return ident


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
    """A hash of the backend's templates and code (codegen's too): a change to either is a
    new kernel."""
    from ... import codegen
    from .. import glsl, shader
    from . import VERSION
    from .template import environment
    h = hashlib.sha256(VERSION.encode())
    folders = [Path(environment().loader.searchpath[0]), Path(glsl.__file__).parent,
               Path(shader.__file__).parent]
    for folder in folders:
        for p in sorted(folder.iterdir()):
            if p.suffix in (".j2", ".py"):
                h.update(p.name.encode() + b"\0" + p.read_bytes())
    root = Path(codegen.__file__).parent        # the targets' words and the builders
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def identity(field: Field, dtype: str, pt: tuple[str, ...]) -> tuple[str, str, str]:
    """(key, field id, positions digest). The key holds no source positions (comments and
    spacing do not matter); the field id, a digest of the position-free IR alone, names
    every kernel of the field (evict). Linear in the IR: kernel_of_call keeps it (in the call's
    Prepared, and per field object)."""
    from . import device_reduction
    fid, spans = canonical(field)
    dev = gl.device_info()
    parts = [compiler_fingerprint(), fid, dtype, ",".join(sorted(pt)),
             dev.get("vendor", ""), dev.get("renderer", ""), dev.get("version", ""),
             device_reduction()]
    key = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:40]
    return f"{fid[:FIELD_ID_CHARS]}-{key}", fid, spans


@functools.lru_cache(maxsize=1024)
def memory_key(key: str, shapes: tuple) -> str:
    """A kernel's key in memory: its GLSL's key and the shapes that size its buffers."""
    return hashlib.sha256(f"{key}\x00{shapes!r}".encode()).hexdigest()[:40]


def kernel_for(field: Field, dtype: str, pt: tuple[str, ...], shapes: tuple = (),
               ident: tuple | None = None, history: bool = False) -> GpuKernel | FieldView:
    """The kernel of ``field`` (a GpuKernel, or a FieldView of one built from a text that
    differs only in positions); ``ident``: its ``identity``, if known."""
    key, fid, spans = ident or identity(field, dtype, pt)   # the GLSL text's key (disk)
    kernel = _find_or_build(field, dtype, pt, shapes, key, fid, spans, history=history)
    if kernel.meta.get("spans") != spans:
        return FieldView(kernel, _ErrorTable(field, dtype, pt, kernel.meta))
    return kernel


def _find_or_build(field, dtype, pt, shapes, key, fid, spans, disk=True,
                   history=False) -> GpuKernel:
    mkey = memory_key(key, shapes)
    kernel = MEMORY.get(mkey)
    if kernel is not None:
        COUNTERS.add("memory_hits")
        return kernel
    found = DISK.load(key) if disk else None
    if found is not None:
        COUNTERS.add("disk_hits")
        source, meta = found
    else:
        from . import build, device_reduction, device_software
        source, desc = build(field, dtype=dtype, per_trajectory_params=pt,
                             reduction=device_reduction(), history=history,
                             software=device_software())
        meta = dict(desc.meta(), spans=spans, dtype=dtype, pt=list(pt))
        DISK.store(key, source, meta)
    kernel = GpuKernel(mkey, source, meta)
    kernel.disk_key, kernel.field_id, kernel.dtype, kernel.pt = key, fid, dtype, pt
    try:
        gl.call(kernel.compile)
    except gl.NoContext as exc:
        raise BackendError(f"no OpenGL context: {exc}") from None
    except Exception as exc:       # a driver that rejects the shader: a compiler bug
        if found is not None:       # a stale or foreign disk entry: drop it, rebuild once
            DISK.evict(key)
            return _find_or_build(field, dtype, pt, shapes, key, fid, spans, disk=False,
                                  history=history)
        what = "the history shader" if history else "the shader"
        raise BackendError(f"the OpenGL driver rejected {what} of field "
                           f"`{field.name}`: {exc}") from None
    COUNTERS.add("compiles")
    return MEMORY.put(kernel)


class _ErrorTable:
    """The run-time error table of ``field`` (id -> kind, array, line, column), made by
    lowering the field again, only when an error is reported: error ids are given in
    the order the printer meets the sites, which positions do not change."""

    def __init__(self, field: Field, dtype: str, pt: tuple, meta: dict):
        self._args = (field, dtype, pt, meta.get("reduction"))
        self._fallback, self._rows = meta.get("errors", []), None

    def __getitem__(self, i: int):
        if self._rows is None:
            from . import build     # (maybe on the GL thread: no gl.call here)
            field, dtype, pt, reduction = self._args
            _, desc = build(field, dtype=dtype, per_trajectory_params=pt,
                            reduction=reduction or "tree", software=False)  # (it ran)
            self._rows = desc.meta()["errors"]
        rows = self._rows if len(self._rows) == len(self._fallback) else self._fallback
        return rows[i]

    def __len__(self) -> int:
        return len(self._fallback)


def canonical(field: Field) -> tuple[str, str]:
    """(a digest of the field's IR without source positions, a digest of the positions).
    Iterative over the IR DAG (deep expressions do not recurse), each shared node
    digested once: linear in the DAG. Fields that take no part in equality (spans)
    go to the second digest. A call's Prepared keeps it (kernel_of_call)."""
    memo: dict[int, str] = {}
    spans = hashlib.sha256()
    stack = [field]
    while stack:
        obj = stack[-1]
        if id(obj) in memo:
            stack.pop()
            continue
        kids = _kids(obj)
        todo = [k for k in kids if id(k) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[id(obj)] = _digest(obj, kids, memo, spans)
    return memo[id(field)], spans.hexdigest()[:32]


def _kids(obj) -> list:
    if isinstance(obj, (tuple, list)):
        return list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare]
    return []


def _digest(obj, kids: list, memo: dict, spans) -> str:
    if isinstance(obj, (tuple, list)):
        return "(" + ",".join(memo[id(k)] for k in kids) + ")"
    if not (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return repr(obj)
    names = [f.name for f in dataclasses.fields(obj) if f.compare]
    inner = ",".join(f"{n}={memo[id(k)]}" for n, k in zip(names, kids))
    others = [repr(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.compare]
    if others:
        spans.update("\x00".join(others).encode("utf-8") + b"\x01")
    return hashlib.sha256(f"{type(obj).__name__}({inner})".encode()).hexdigest()[:32]


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


def evict(field: Field, dtype: str | None = None, per_trajectory_params=None) -> bool:
    """Drop a field's kernels (every shape, dtype, per-trajectory params, driver and
    compiler version) from memory, and their GLSL from disk; ``dtype`` and
    ``per_trajectory_params`` (None: any) narrow it. True if anything was dropped."""
    from ..shader.adaptive_host import dense_variant
    fids = {canonical(f)[0] for f in (field, dense_variant(field))}   # (save_at's kernels)
    pt = None if per_trajectory_params is None else tuple(sorted(per_trajectory_params))

    def chosen(d, p) -> bool:
        return (dtype is None or d == dtype) and (pt is None or tuple(p) == pt)

    dropped = [MEMORY.evict(k.key) for k in MEMORY.values()
               if k.field_id in fids and chosen(k.dtype, k.pt)]
    on_disk = sum(DISK.evict_where(fid[:FIELD_ID_CHARS] + "-",
                                   lambda meta: chosen(meta.get("dtype"), meta.get("pt", ())))
                  for fid in fids)
    return any(dropped) or on_disk > 0


def set_cache_dir(folder) -> None:
    """Use ``folder`` for the disk cache (None: VGPU_CACHE_DIR or the user cache folder)."""
    DISK.set_folder(folder)


def set_memory_capacity(n: int) -> None:
    MEMORY.resize(n)
