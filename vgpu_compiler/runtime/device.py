"""The Device protocol: what a host driver needs of a backend's device, and no more.

A driver (a fixed-step run, an adaptive run, a Simulation session, a history run)
compiles a kernel once, makes its buffers, and then per dispatch writes what changed,
dispatches and reads back what it needs; it asks the device for its limits (how big a
buffer one binding may be, how many workgroups one dispatch may have) and whether it
is a CPU renderer (pacing.target: no watchdog there, fewer syncs). Every operation is
synchronous as seen from the caller: ``read`` returns the bytes after every dispatch
before it has finished.

- ``compile(source, entry)``  a program from the backend's kernel text (GLSL, WGSL, C)
- ``buffer(nbytes)``          a device buffer of at least ``nbytes`` (zeroed)
- ``write(buffer, data)``     host bytes (anything with the buffer protocol) into it
- ``dispatch(program, buffers, groups, uniforms=b"")``  one dispatch: ``buffers``
                              bound in order (binding 0, 1, ...), ``groups`` workgroups
                              (x[, y[, z]]), ``uniforms`` the uniform block's bytes
- ``read(buffer, nbytes)``    the first ``nbytes`` bytes of a buffer
- ``release(*objects)``       programs and buffers freed (each at most once; a
                              released one is not used again)
- ``limits()``                a dict of the device's limits, WebGPU's names
                              (``max_storage_buffer_binding_size``,
                              ``max_compute_workgroups_per_dimension``, ...)
- ``software()``              True on a CPU implementation (llvmpipe, lavapipe, ...)

The implementations: backends/wgpu/device.py (``WgpuDevice``, over wgpu's device
and queue) and backends/glsl/device.py (``GlDevice``, over the GL context, one trip
to it per operation). The drivers do not call these single operations yet: the
adaptive and fixed-step drivers (runtime/adaptive.py, runtime/fixed.py) run on a
backend's ``Target``, whose batched ``trip`` (writes, one dispatch with the kernel's own
uniforms, reads) is one trip to the device (the Simulation sessions run on it too:
fixed_session.py, adaptive_session.py); the cpu backend's Target calls its library on
host arrays (one C call per trip, no device buffers: backends/cpu/target.py).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

OPERATIONS = ("compile", "buffer", "write", "dispatch", "read", "release", "limits",
              "software")


@runtime_checkable
class Device(Protocol):
    """See the module: the eight operations a driver uses."""

    def compile(self, source: str, entry: str = "main") -> Any: ...

    def buffer(self, nbytes: int) -> Any: ...

    def write(self, buffer: Any, data: Any) -> None: ...

    def dispatch(self, program: Any, buffers: list, groups: tuple,
                 uniforms: bytes = b"") -> None: ...

    def read(self, buffer: Any, nbytes: int) -> bytes: ...

    def release(self, *objects: Any) -> None: ...

    def limits(self) -> dict: ...

    def software(self) -> bool: ...


def unavailable(what: str, why) -> Exception:
    """The BackendError of a run on a backend whose device this machine lacks (glsl's
    context, wgpu's adapter): ``auto`` moves on; the user is told numpy runs anywhere."""
    from .. import spelling as S
    from ..errors import BackendError
    return BackendError(f"no {what} here ({why}); use {S.setting('backend', 'numpy')}")
