"""``vgpuc compile`` (the GLSL part), ``vgpuc info`` and ``vgpuc cache``: the
subcommands that talk to the GLSL backend and the OpenGL driver."""
from __future__ import annotations

import argparse
import ctypes
import os
from pathlib import Path

from .common import EXIT_OK, UsageError

NO_CONTEXT = "no OpenGL 4.3 context: the {next} backend will be used"

# glGetIntegerv names that moderngl's ctx.info does not report.
GL_MAX_COMPUTE_SHARED_MEMORY_SIZE = 0x8262

EXTENSIONS_OF_NOTE = (
    ("GL_ARB_gpu_shader_fp64", "float64 arithmetic"),
    ("GL_NV_shader_atomic_float", "native float atomicAdd (flux)"),
    ("GL_ARB_gpu_shader_int64", "64-bit integers"),
    ("GL_ARB_get_program_binary", "program binaries"),
)


# --- compile --------------------------------------------------------------------------
def emit_glsl_text(field, *, dtype: str, dims: dict[str, int], per_trajectory=(),
                   source: str | None = None, language: str = "glsl") -> str:
    """The GLSL (or, ``language="wgsl"``, the WGSL; ``"c"``, the cpu backend's C; ``"cuda"``,
    the cuda backend's CUDA C++) of a
    field. Grid extents and dims are uniforms of the kernel, so the text is the same for
    every size: ``dims`` are only checked against the field."""
    from ..backends.glsl import emit_glsl
    if language == "wgsl":
        from ..backends.wgpu import emit_wgsl as emit_glsl
    elif language == "c":
        emit_glsl = _emit_c
    elif language == "cuda":
        emit_glsl = _emit_cuda

    unknown = sorted(set(dims) - set(field.dims))
    if unknown:
        raise UsageError(f"--dim {unknown[0]}: field {field.name!r} has no dim of that name"
                         f" (its dims: {', '.join(field.dims) or 'none'})")
    params = {p.name for p in field.params}
    for name in per_trajectory:
        if name not in params:
            raise UsageError(f"--per-trajectory {name}: field {field.name!r} has no param "
                             f"of that name")
    if field.observers:     # the kernel the backend runs: observers as hidden states
        from .. import backends as registry
        from ..ir import observers
        from ..pipeline import refuse_observers
        field = observers.lower(field).field
        refuse_observers(registry.get(BACKEND_OF[language]), field)
    return emit_glsl(field, dtype=dtype, per_trajectory_params=tuple(sorted(per_trajectory)),
                     source=source)


BACKEND_OF = {"glsl": "glsl", "wgsl": "wgpu", "c": "cpu", "cuda": "cuda"}  # --emit's


def _emit_c(field, *, dtype: str, per_trajectory_params=(), source=None) -> str:
    """The C the cpu backend compiles for ``field`` (what it runs for a call without
    save_at or a history; needs no C compiler to print)."""
    from ..backends.cpu import kernel

    return kernel.source(field, dtype, per_trajectory_params)[0]


def _emit_cuda(field, *, dtype: str, per_trajectory_params=(), source=None) -> str:
    """The CUDA C++ the cuda backend compiles with NVRTC (the C kernel as CUDA; needs no
    GPU and no NVRTC to print)."""
    from ..backends.cuda import source as cuda_source

    return cuda_source.source(field, dtype, per_trajectory_params)[0]


# --- info -------------------------------------------------------------------------------
def info_command(args: argparse.Namespace) -> int:
    for line in device_report() + [""] + backends_report():
        print(line)
    return EXIT_OK


def backends_report() -> list[str]:
    """Every registered backend, in ``auto``'s order: available here or why not, and
    what it is."""
    from .. import backends as registry

    lines = ["backends (backend=auto tries them in this order):"]
    for backend in registry.auto_order():
        ok, why = backend.available()
        state = "available" if ok else f"not available: {why}"
        if ok and backend.software is not None and backend.software():
            state += " (on a software rasteriser here: after the native CPU backends)"
        lines.append(f"  {backend.name:<8} {state}")
        lines.append(f"  {'':<8} {backend.description}")
        lines.append(f"  {'':<8} dtypes: {', '.join(backend.dtypes)}")
        if ok and backend.name == "wgpu":
            lines += [f"  {'':<8} {line}" for line in wgpu_report()]
    return lines


def wgpu_report() -> list[str]:
    """The wgpu adapter and the limits the device was made with."""
    from ..backends.wgpu import device
    d = device.get()
    i, lim = d.info, d.limits
    return [f"adapter: {i.get('device')} ({i.get('vendor')}; {i.get('backend_type')}, "
            f"{i.get('adapter_type')}; driver {i.get('driver')})",
            f"largest storage binding: {_bytes(lim.get('max_storage_buffer_binding_size'))}, "
            f"invocations per workgroup: {lim.get('max_compute_invocations_per_workgroup')}, "
            f"workgroups per dimension: {lim.get('max_compute_workgroups_per_dimension')}, "
            f"workgroup memory: {_bytes(lim.get('max_compute_workgroup_storage_size'))}"]


def device_report() -> list[str]:
    """Lines describing the OpenGL context VGPU uses (the runtime's own), or why there is none."""
    from ..backends.glsl import device as gl
    from ..backends.glsl import runner as glsl_runner

    if not glsl_runner.available():
        why = gl.GL.error or ("VGPU_NO_GL is set" if os.environ.get("VGPU_NO_GL") else "")
        text = NO_CONTEXT.format(next=_next_backend())
        return [f"{text} ({why})" if why else text]
    info, extensions, shared = gl.call(_query)
    return _describe(info, extensions, shared)


def _next_backend() -> str:
    """The backend ``auto`` runs on when GL is unavailable: the first available other one."""
    from .. import backends as registry
    return next((b.name for b in registry.auto_order()
                 if b.name != "glsl" and b.available()[0]), "numpy")


def _query(ctx):
    """Runs on the GL thread, where the context is current."""
    return dict(ctx.info), set(ctx.extensions), _get_integer(GL_MAX_COMPUTE_SHARED_MEMORY_SIZE)


def _describe(info: dict, ext: set, shared: int | None) -> list[str]:
    wg = info.get("GL_MAX_COMPUTE_WORK_GROUP_SIZE")
    block = info.get("GL_MAX_SHADER_STORAGE_BLOCK_SIZE")
    atomics = _yes("GL_NV_shader_atomic_float" in ext)
    if "GL_NV_shader_atomic_float" not in ext:
        atomics += " (flux uses a compare-and-swap loop)"
    rows = [
        ("renderer", info.get("GL_RENDERER", "?")),
        ("vendor", info.get("GL_VENDOR", "?")),
        ("version", info.get("GL_VERSION", "?")),
        ("max shared memory", _bytes(shared)),
        ("max workgroup size", _tuple(wg)),
        ("max workgroup invocations", info.get("GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS", "?")),
        ("max workgroup count", _tuple(info.get("GL_MAX_COMPUTE_WORK_GROUP_COUNT"))),
        ("max storage block size", _bytes(block)),
        ("fp64", _yes("GL_ARB_gpu_shader_fp64" in ext)),
        ("float atomics", atomics),
    ]
    lines = [f"{label + ':':<27} {value}" for label, value in rows]
    lines.append("extensions of note:")
    for name, what in EXTENSIONS_OF_NOTE:
        lines.append(f"  {'+' if name in ext else '-'} {name} ({what})")
    return lines


def _get_integer(name: int) -> int | None:
    """glGetIntegerv through ctypes, for limits moderngl does not report (needs the
    context current on this thread, which a fresh standalone context is)."""
    for lib in ("libOpenGL.so.0", "libGL.so.1", "libGL.so", "opengl32"):
        try:
            gl = ctypes.CDLL(lib)
            value = ctypes.c_int(-1)
            gl.glGetIntegerv(name, ctypes.byref(value))
        except (OSError, AttributeError):
            continue
        return value.value if value.value >= 0 else None
    return None


def _bytes(n) -> str:
    if n is None:
        return "unknown"
    n = int(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit} ({n} bytes)"
    return f"{n} bytes"


def _tuple(value) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, (tuple, list)):
        return " x ".join(str(v) for v in value)
    return str(value)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --- cache ------------------------------------------------------------------------------
def cache_command(args: argparse.Namespace) -> int:
    from .. import api
    from .. import disk_cache as dc

    if args.action == "clear":      # every backend's entries, the parser's tables, templates
        removed = api.clear_cache(memory=False, disk=True)["disk"]
        print(f"cache cleared: {removed} kernel{'' if removed == 1 else 's'} removed from "
              f"{dc.root()}")
        return EXIT_OK
    for line in cache_report(api.cache_info()):
        print(line)
    return EXIT_OK


def cache_report(info: dict) -> list[str]:
    """The disk cache (shared by processes; one row per kind of entry, ``info["disk"]``)
    and each backend's memory cache (per process): ``info`` is vgpu.cache_info()."""
    disk, top = info["disk"], info["disk_folder"]
    offs = [row["off"] for row in disk if row["off"]]
    state = "on" if not offs else f"off: {offs[0]}" if len(offs) == len(disk) else \
        "on in part"
    lines = [f"disk cache:    {top} ({state})",
             f"  kernels:     {info['disk_entries']}, {_size(info['disk_bytes'])}"]
    if len(disk) > 1:
        for row in disk:
            line = f"    {row['kind'] + ':':<10} {row['entries']}, {_size(row['bytes'])}"
            where = Path(row["folder"])
            if where != Path(top):
                line += f" ({where.name}/)" if where.parent == Path(top) else f" ({where})"
            if row["off"] and len(offs) < len(disk):
                line += f" (off: {row['off']})"
            lines.append(line)
    bound = info.get("disk_max_bytes")
    capacities = ", ".join(f"{name} {info[name]['memory_capacity']}" for name in info
                           if isinstance(info[name], dict)
                           and info[name].get("memory_capacity") is not None)
    lines += [
        f"  at most:     {_size(bound) if bound is not None else '?'} (VGPU_CACHE_MAX_BYTES; "
        "least recently used go first)",
        f"memory cache:  up to {capacities or '?'} compiled kernels per process (LRU)",
        "counters:      per process, from Python: vgpu.cache_stats()",
    ]
    return lines


def _size(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
