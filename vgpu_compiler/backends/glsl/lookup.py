"""The GLSL backend's kernels: finding or making the kernel of a call (runner.py and
adaptive_run.py run them), in the kernel cache every backend shares
(runtime/kernel_cache.py: ``MEMORY``, over this backend's disk cache ``DISK``).

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

import os
from pathlib import Path

import numpy as np

from ...errors import BackendError
from ...ir.nodes import Field
from ...call.bound import Bound
from ...runtime import kernel_cache as kc
from ...runtime.device import unavailable
from ...runtime.kernel_cache import canonical, shape_signature  # noqa: F401 (the face)
from . import device as gl
from . import REDUCTION_ENV
from .disk_cache import DiskCache
from .kernel_cache import DEFAULT_CAPACITY, FieldView, GpuKernel, release


def _variants(field: Field) -> tuple:
    from ..shader.adaptive_host import kernel_fields
    return kernel_fields(field)


DISK = DiskCache()
MEMORY = kc.KernelCache(DEFAULT_CAPACITY, release=release, disk=DISK, variants=_variants,
                        nbytes=GpuKernel.nbytes, forget_after_fork=True)
_DTYPE_NAMES = {np.dtype(n): n for n in ("float32", "float64")}  # np.dtype.name is slow


def available() -> bool:
    """True when an OpenGL 4.3 context can be made here (VGPU_NO_GL, read when the
    context is first wanted, says no)."""
    return gl.available()


def need() -> None:
    """A BackendError (``auto`` moves on) when no OpenGL 4.3 context can be made here."""
    if not gl.available():
        raise unavailable("OpenGL 4.3 context can be made", gl.GL.error)


def kernel_of_call(bound: Bound, history: bool = False) -> GpuKernel | FieldView:
    """The kernel for this call. Calls of one signature share their Prepared call
    (``bound.prepared``): a repeated call finds its kernel in its slot (MEMORY.for_call:
    still in the memory cache, VGPU_REDUCTION unchanged); the slot also keeps the
    field's identity (its disk key), digested once.
    ``history``: the field's save_every kernel (runner.run's), keyed apart (``-h``)."""
    env = os.environ.get(REDUCTION_ENV)
    slots = bound.prepared.slots if bound.prepared is not None else {}
    # a field's dense variant (adaptive_host.kernel_field: save_at, a Simulation), or its
    # history kernel, is another kernel for the same call signature: a slot of its own
    slot = "glsl_hist" if history else "glsl-dense" if bound.field.solver.dense else "glsl"
    hit = MEMORY.remembered(slots, slot, env)
    if hit is not None:
        return hit
    dtype, pt = _DTYPE_NAMES[bound.dtype], tuple(sorted(bound.per_trajectory))

    def identify():
        ident = _identity(bound.field, dtype, pt, env)
        return (ident[0] + "-h",) + tuple(ident[1:]) if history else ident
    return MEMORY.for_call(slots, slot, env, identify, lambda ident: kernel_for(
        bound.field, dtype, pt, shape_signature(bound), ident, history))


def _identity(field: Field, dtype: str, pt: tuple, env) -> tuple[str, str, str]:
    return MEMORY.identity(field, (dtype, pt, env), lambda: _parts(dtype, pt))


def compiler_fingerprint() -> str:
    """A hash of the backend's templates and code (codegen's too): a change to either is a
    new kernel."""
    from . import VERSION
    from ..shader.template import fingerprint
    return fingerprint(VERSION, Path(__file__).parent)


def _parts(dtype: str, pt: tuple) -> list[str]:
    from . import device_reduction
    dev = gl.device_info()
    return [compiler_fingerprint(), dtype, ",".join(sorted(pt)), dev.get("vendor", ""),
            dev.get("renderer", ""), dev.get("version", ""), device_reduction()]


def identity(field: Field, dtype: str, pt: tuple[str, ...]) -> tuple[str, str, str]:
    """(key, field id, positions digest): runtime/kernel_cache.identity of the field
    with this compiler, dtype, per-trajectory params, GL driver and reduction; no
    positions (a text that differs in them gets a FieldView)."""
    return kc.identity(field, *_parts(dtype, pt))


def kernel_for(field: Field, dtype: str, pt: tuple[str, ...], shapes: tuple = (),
               ident: tuple | None = None, history: bool = False) -> GpuKernel | FieldView:
    """The kernel of ``field`` (a GpuKernel, or a FieldView of one built from a text that
    differs only in positions); ``ident``: its ``identity``, if known."""
    key, fid, spans = ident or identity(field, dtype, pt)   # the GLSL text's key (disk)

    def build():
        from . import build, device_reduction, device_software
        source, desc = build(field, dtype=dtype, per_trajectory_params=pt,
                             reduction=device_reduction(), history=history,
                             software=device_software())
        return source, dict(desc.meta(), spans=spans, dtype=dtype, pt=list(pt))

    def make(mkey, source, meta):
        kernel = GpuKernel(mkey, source, meta)
        kernel.disk_key, kernel.field_id, kernel.dtype, kernel.pt = key, fid, dtype, pt
        try:
            gl.call(kernel.compile)
        except gl.NoContext as exc:
            raise BackendError(f"no OpenGL context: {exc}") from None
        return kernel

    def rejected(exc):              # a driver that rejects the shader: a compiler bug
        what = "the history shader" if history else "the shader"
        return BackendError(f"the OpenGL driver rejected {what} of field "
                            f"`{field.name}`: {exc}")
    kernel = MEMORY.find_or_build(kc.memory_key(key, shapes), key, build, make, rejected)
    if kernel.meta.get("spans") != spans:
        return FieldView(kernel, _ErrorTable(field, dtype, pt, kernel.meta))
    return kernel


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


# --- cache management (the registry's Caches: MEMORY's info, clear_caches, evict_field) --
def cache_info() -> dict:
    from ...call.counters import COUNTERS
    return {**MEMORY.info(), **COUNTERS.snapshot()}


def clear_cache(memory: bool = True, disk: bool = True) -> dict:
    return MEMORY.clear_caches(memory, disk)


def evict(field: Field, dtype: str | None = None, per_trajectory_params=None) -> bool:
    return MEMORY.evict_field(field, dtype, per_trajectory_params)


def set_cache_dir(folder) -> None:
    """Use ``folder`` for the disk cache (None: VGPU_CACHE_DIR or the user cache folder)."""
    DISK.set_folder(folder)


def set_memory_capacity(n: int) -> None:
    MEMORY.resize(n)
