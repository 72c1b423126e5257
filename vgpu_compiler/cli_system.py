"""``vgpuc compile`` (the GLSL part), ``vgpuc info`` and ``vgpuc cache``: the
subcommands that talk to the GLSL backend and the OpenGL driver."""
from __future__ import annotations

import argparse
import ctypes
import inspect
import os

from .cli_common import EXIT_OK

NO_CONTEXT = "no OpenGL 4.3 context: the numpy backend will be used"

# glGetIntegerv names that moderngl's ctx.info does not report.
GL_MAX_COMPUTE_SHARED_MEMORY_SIZE = 0x8262

EXTENSIONS_OF_NOTE = (
    ("GL_ARB_gpu_shader_fp64", "float64 arithmetic"),
    ("GL_NV_shader_atomic_float", "native float atomicAdd (flux)"),
    ("GL_ARB_gpu_shader_int64", "64-bit integers"),
    ("GL_ARB_get_program_binary", "program binaries"),
)


# --- compile --------------------------------------------------------------------------
def emit_glsl_text(field, *, dtype: str, dims: dict[str, int]) -> str:
    """The GLSL of a field; dims are passed on when the backend can specialise them."""
    from .backends.glsl import emit_glsl

    kwargs = {"dtype": dtype}
    if dims:
        accepted = inspect.signature(emit_glsl).parameters
        if "dims" not in accepted:
            from .cli_common import UsageError

            raise UsageError("--dim: this GLSL backend emits dims as runtime values only")
        kwargs["dims"] = dims
    return emit_glsl(field, **kwargs)


# --- info -------------------------------------------------------------------------------
def info_command(args: argparse.Namespace) -> int:
    for line in device_report():
        print(line)
    return EXIT_OK


def device_report() -> list[str]:
    """Lines describing the OpenGL device VGPU would use, or why there is none."""
    reason = _unavailable_reason()
    if reason:
        return [f"{NO_CONTEXT} ({reason})" if reason != "unavailable" else NO_CONTEXT]
    try:
        import moderngl

        ctx = moderngl.create_standalone_context(require=430, backend="egl")
    except Exception as exc:        # no EGL, no GL 4.3: the same answer as the runtime's
        return [f"{NO_CONTEXT} ({_first_line(exc)})"]
    try:
        return _describe(ctx)
    finally:
        ctx.release()


def _unavailable_reason() -> str | None:
    if os.environ.get("VGPU_NO_GL", "") not in ("", "0"):
        return "VGPU_NO_GL is set"
    try:
        from .runtime import glsl_runner
    except ImportError:
        return None
    return None if glsl_runner.available() else "unavailable"


def _describe(ctx) -> list[str]:
    info = ctx.info
    ext = set(ctx.extensions)
    wg = info.get("GL_MAX_COMPUTE_WORK_GROUP_SIZE")
    shared = _get_integer(GL_MAX_COMPUTE_SHARED_MEMORY_SIZE)
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- cache ------------------------------------------------------------------------------
def cache_command(args: argparse.Namespace) -> int:
    from .runtime import glsl_runner

    if args.action == "clear":
        result = glsl_runner.clear_cache()
        print(_cleared_text(result))
        return EXIT_OK
    info = glsl_runner.cache_info()
    for key, value in (info.items() if isinstance(info, dict) else vars(info).items()):
        print(f"{key.replace('_', ' ')}: {value}")
    return EXIT_OK


def _cleared_text(result) -> str:
    if isinstance(result, int):
        return f"cache cleared: {result} entr{'y' if result == 1 else 'ies'} removed"
    if isinstance(result, dict):
        return "cache cleared: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                             for k, v in result.items())
    return "cache cleared"
