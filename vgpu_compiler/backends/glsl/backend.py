"""The GLSL backend as the registry sees it: OpenGL 4.3 compute shaders.

Its runner (and with it moderngl) is imported when the backend is first asked
whether it is available; an import failure makes it unavailable, saying why.
"""
from __future__ import annotations

import importlib
import sys

from .. import Backend, kernel_caches

RUNNER = "vgpu_compiler.backends.glsl.runner"


def _runner():
    """The runner module; per call, the import system only when it changed (a module in
    sys.modules may be one another thread is still importing: import_module waits)."""
    module = sys.modules.get(RUNNER)
    if module is None or module is not _imported[0]:
        module = _imported[0] = importlib.import_module(RUNNER)
    return module


_imported: list = [None]


def _available() -> tuple[bool, str]:
    try:
        runner = _runner()
    except ImportError as e:
        return False, f"cannot import it: {e}"
    if runner.available():
        return True, ""
    return False, _no_context_reason()


def _no_context_reason() -> str:
    """Why no OpenGL 4.3 context could be made (VGPU_NO_GL, or the driver's own words)."""
    from . import device as gl
    why = gl.GL.error
    if why and "VGPU_NO_GL" in why:
        why += " (unset VGPU_NO_GL to use OpenGL)"
    return f"no OpenGL 4.3 context could be made: {why}" if why else \
        "no OpenGL 4.3 context could be made"


def _run(prepared, data, progress=None):
    from ..shader.adaptive_host import runs_adaptive    # (the kind of run, as wgpu's)
    runner = _runner()
    if runs_adaptive(prepared.template):            # bs3, dopri5, tsit5; save_at; events
        return runner.run_adaptive(prepared, data, progress)
    return runner.run(prepared, data, progress)     # (a history the shader writes too)


def _software() -> bool:
    """Is the OpenGL renderer a CPU one (llvmpipe, SwiftShader, WARP ...)?"""
    from . import SOFTWARE_RENDERERS, device as gl
    return bool(SOFTWARE_RENDERERS.search(gl.device_info().get("renderer", "")))


def _open(prepared, data):
    from ...runtime.session import open_session
    return open_session(__package__, prepared, data)


BACKEND = Backend(
    name="glsl",
    description="OpenGL 4.3 compute shaders (moderngl; a GPU, or Mesa llvmpipe on the CPU)",
    available=_available,
    run=_run,
    open=_open,
    dtypes=("float32", "float64"),
    features=frozenset({"observe_peak", "observe_first", "gpu", "history", "flux", "reductions", "progress", "events", "stiff",
                        "stiff_events",
                        "adaptive", "noise", "save_at"}),
    software=_software,
    caches=kernel_caches(f"{__package__}.lookup", disk=("glsl",)),
)
