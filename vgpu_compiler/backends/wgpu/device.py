"""The wgpu device: one adapter and one device per process, made when first wanted.

The adapter is the most powerful wgpu offers (``high-performance``): a real GPU
through Vulkan, Metal or Direct3D 12 where there is one, else a CPU implementation
such as Mesa lavapipe. The device is requested with the adapter's own limits (not
WebGPU's defaults, which cap storage buffers at 128 MiB and workgroups at 256
invocations). ``VGPU_NO_WGPU=1`` turns the backend off.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading

NO_WGPU_ENV = "VGPU_NO_WGPU"
# Adapters that are CPU implementations (adapter_type says so on most platforms).
SOFTWARE = re.compile(r"llvmpipe|lavapipe|softpipe|swiftshader|basic render|warp", re.I)
LIMITS = ("max_storage_buffer_binding_size", "max_buffer_size",
          "max_compute_invocations_per_workgroup", "max_compute_workgroup_size_x",
          "max_compute_workgroup_size_y", "max_compute_workgroup_size_z",
          "max_compute_workgroups_per_dimension", "max_compute_workgroup_storage_size",
          "max_storage_buffers_per_shader_stage", "max_uniform_buffer_binding_size")


class _Device:
    def __init__(self):
        self.lock = threading.RLock()       # queue submissions and read-backs
        self.made = False
        self.device = None
        self.adapter = None
        self.error = ""
        self.info: dict = {}
        self.limits: dict = {}


DEV = _Device()
_make_lock = threading.Lock()


def get() -> _Device:
    """The process's device (made at the first call; ``DEV.error`` says why not)."""
    if DEV.made:
        return DEV
    with _make_lock:
        if not DEV.made:
            _make()
            DEV.made = True
    return DEV


def _make() -> None:
    if os.environ.get(NO_WGPU_ENV, "") not in ("", "0"):
        DEV.error = f"{NO_WGPU_ENV} is set"
        return
    try:
        os.environ.setdefault("RUST_LOG", "error")
        import wgpu
    except ImportError as exc:
        DEV.error = f"cannot import wgpu ({exc}); pip install wgpu"
        return
    try:
        with _quiet_stderr():
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as exc:            # no Vulkan / Metal / D3D12 driver at all
        DEV.error = f"no wgpu adapter: {exc}"
        return
    if adapter is None:
        DEV.error = "no wgpu adapter (install a Vulkan driver, e.g. mesa-vulkan-drivers)"
        return
    have = {k.replace("-", "_"): v for k, v in dict(adapter.limits).items()}
    wanted = {k.replace("_", "-"): have[k] for k in LIMITS if k in have}
    try:
        with _quiet_stderr():
            device = adapter.request_device_sync(required_limits=wanted)
    except Exception as exc:
        DEV.error = f"the wgpu adapter gave no device: {exc}"
        return
    info = dict(adapter.info)
    DEV.adapter, DEV.device = adapter, device
    DEV.limits = {k.replace("-", "_"): v for k, v in dict(device.limits).items()}
    DEV.info = {"vendor": str(info.get("vendor", "")), "device": str(info.get("device", "")),
                "driver": str(info.get("description", "")),
                "backend_type": str(info.get("backend_type", "")),
                "adapter_type": str(info.get("adapter_type", ""))}


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 on /dev/null while the driver starts: Mesa's Vulkan loader
    prints lines such as "error: XDG_RUNTIME_DIR is invalid" that are no error of ours
    (a failure is reported through the exception). VGPU_DEBUG=1 keeps them."""
    if os.environ.get("VGPU_DEBUG", "") not in ("", "0"):
        yield
        return
    try:
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def available() -> bool:
    return get().device is not None


def software() -> bool:
    """Is the adapter a CPU implementation (lavapipe, SwiftShader, WARP)?"""
    info = get().info
    return info.get("adapter_type", "").upper() == "CPU" or bool(
        SOFTWARE.search(info.get("device", "") + " " + info.get("vendor", "")))


def identity() -> str:
    """The adapter, as the kernel caches key it: vendor, device, driver, backend type."""
    i = get().info
    return "\x00".join(i.get(k, "") for k in ("vendor", "device", "driver", "backend_type"))
