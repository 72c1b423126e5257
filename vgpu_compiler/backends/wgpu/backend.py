"""The wgpu backend as the registry sees it: WGSL compute shaders through wgpu
(Vulkan, Metal, Direct3D 12; Mesa lavapipe on a Linux machine without a GPU).

Its runner (and with it wgpu) is imported when the backend is first asked whether it
is available; an import failure makes it unavailable, saying why.
"""
from __future__ import annotations

from .. import Backend, kernel_caches


def _available() -> tuple[bool, str]:
    from .. import forked_after_gpu
    used = forked_after_gpu()
    if used:
        return False, (f"this process was forked from one that had used the "
                       f"{' and '.join(used)} backend (GPU drivers do not survive a fork: "
                       f"start workers with multiprocessing's \"spawn\" method)")
    try:
        from . import runner
    except ImportError as e:
        return False, f"cannot import it: {e}"
    if runner.available():
        return True, ""
    from . import device
    return False, device.get().error or "no wgpu device"


def _run(prepared, data, progress=None):
    from . import adaptive_run, runner
    from ..shader.adaptive_host import runs_adaptive    # (the kind of run, as glsl's)
    if runs_adaptive(prepared.template):
        return adaptive_run.run(prepared, data, progress)   # bs3, dopri5, tsit5; save_at; events
    return runner.run(prepared, data, progress)     # (a history the shader writes too)


def _software() -> bool:
    from . import device
    return device.available() and device.software()


def _open(prepared, data):
    from ...runtime.session import open_session
    return open_session(__package__, prepared, data)


BACKEND = Backend(
    name="wgpu",
    description="WGSL compute shaders through wgpu (Vulkan, Metal, Direct3D 12; float32)",
    available=_available,
    run=_run,
    open=_open,
    dtypes=("float32",),
    features=frozenset({"observe_peak", "observe_first", "gpu", "history", "flux", "reductions", "progress", "events", "stiff",
                        "stiff_events",
                        "adaptive", "noise", "save_at"}),
    software=_software,
    caches=kernel_caches(f"{__package__}.disk_cache", disk=("wgsl",)),
)
