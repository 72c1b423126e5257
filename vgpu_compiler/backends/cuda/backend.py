"""The cuda backend as the registry sees it: the cpu backend's C kernel compiled as CUDA
C++ by NVRTC (source.py, nvrtc.py; its cubins kept by cubin_cache.py) and run through
the CUDA driver (device.py).
Unavailable, saying why, without cuda-bindings, NVRTC, a driver or a GPU, or with
VGPU_NO_CUDA set."""
from __future__ import annotations

from .. import Backend, Caches


def _available() -> tuple[bool, str]:
    import os
    if os.environ.get("VGPU_NO_CUDA", "") not in ("", "0"):
        return False, "VGPU_NO_CUDA is set (unset it to use the cuda backend)"
    try:
        from . import device
    except ImportError as e:       # cuda-bindings is not installed
        return False, f"cuda-bindings is not installed ({e})"
    return device.available()


def _run(prepared, data, progress=None):
    from ..cpu import dispatch          # save_every: the runner's calls end at saved steps
    from . import device
    return dispatch.run(prepared, data, progress, build=device.kernel, calls=device.CALLS)


def _clear(memory: bool, disk: bool) -> dict:
    from . import cubin_cache       # (never cuda-bindings: clearing starts no driver)
    return cubin_cache.clear(memory, disk)


def _info() -> dict:
    from . import cubin_cache
    return cubin_cache.info()


BACKEND = Backend(
    name="cuda",
    description="NVIDIA GPUs: the cpu backend's C kernel as CUDA C++, compiled by NVRTC, "
                "one trajectory per thread (needs cuda-bindings, NVRTC and a CUDA driver)",
    available=_available,
    run=_run,
    dtypes=("float32", "float64"),
    # observers: the cpu backend's (its kernels' hidden states and located `first`,
    # dispatch.run's choice of kernel and its runners), the kernel printed as CUDA
    features=frozenset({"gpu", "history", "flux", "reductions", "progress", "events",
                        "stiff", "stiff_events", "adaptive", "noise", "save_at", "float64_functions",
                        "observe_peak", "observe_first"}),
    absent_quietly=True,
    caches=Caches(clear=_clear, info=_info, disk=("cuda",)),   # (no evict: keyed by text)
)
