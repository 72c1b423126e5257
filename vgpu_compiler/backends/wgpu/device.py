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


class WgpuDevice:
    """runtime/device.py's Device over the process's wgpu device (``get()``): a program
    is a compute pipeline (its bind group layout "auto"), a buffer a storage buffer
    (copy source and destination); a dispatch binds the buffers in order (binding 0,
    1, ...) and the uniforms, when given, after them; a read copies into a staging
    buffer and maps it. Queue work holds the device's lock."""

    def __init__(self):
        dev = get()
        if dev.device is None:
            raise RuntimeError(dev.error or "no wgpu device")
        self._dev = dev
        self._groups: dict = {}         # (program, buffers) -> bind group, made once

    def compile(self, source: str, entry: str = "main"):
        d = self._dev.device
        return d.create_compute_pipeline(layout="auto", compute={
            "module": d.create_shader_module(code=source), "entry_point": entry})

    def buffer(self, nbytes: int, usage=None):
        import wgpu
        usage = usage or (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                          | wgpu.BufferUsage.COPY_SRC)
        return self._dev.device.create_buffer(size=max(16, -(-nbytes // 16) * 16), usage=usage)

    def write(self, buffer, data) -> None:
        with self._dev.lock:
            self._dev.device.queue.write_buffer(buffer, 0, data)

    def dispatch(self, program, buffers: list, groups: tuple, uniforms: bytes = b"") -> None:
        import wgpu
        d = self._dev.device
        bound = list(buffers)
        if uniforms:
            key = ("ubuf", id(program))
            ubuf = self._groups.get(key)
            if ubuf is None or ubuf.size < len(uniforms):
                ubuf = self._groups[key] = self.buffer(
                    len(uniforms), wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            self.write(ubuf, uniforms)
            bound.append(ubuf)
        key = (id(program),) + tuple(id(b) for b in bound)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = d.create_bind_group(
                layout=program.get_bind_group_layout(0),
                entries=[{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                         for i, b in enumerate(bound)])
        with self._dev.lock:
            enc = d.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(program)
            cp.set_bind_group(0, group)
            cp.dispatch_workgroups(*groups)
            cp.end()
            d.queue.submit([enc.finish()])

    def read(self, buffer, nbytes: int) -> bytes:
        with self._dev.lock:
            return bytes(self._dev.device.queue.read_buffer(buffer, 0, -(-nbytes // 4) * 4))[
                :nbytes]

    def release(self, *objects) -> None:
        gone = {id(o) for o in objects}
        self._groups = {k: v for k, v in self._groups.items() if not gone & set(k)}
        for o in objects:
            destroy = getattr(o, "destroy", None)       # buffers; pipelines are dropped
            if destroy is not None:
                destroy()

    def limits(self) -> dict:
        return dict(self._dev.limits)

    def software(self) -> bool:
        return software()
