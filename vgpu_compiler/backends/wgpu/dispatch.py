"""One wgpu dispatch and its read-backs, and what the host makes of them: the uniform
buffer's bytes, the states in the grid's layout, the error slot as an exception.
runner.Target (the fixed-step and adaptive drivers'), fast.py (a signature's
one-dispatch call) and the sessions dispatch through here."""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound
from ...call.session import pack_states
from ...call.interrupt import held
from ..shader.faults import NO_ERROR, raise_error as _raise_error

_NO_ERROR_BYTES = np.full(4, NO_ERROR, np.uint32).tobytes()


def _pack_uniforms(kernel, values: list) -> bytes:
    """The uniform buffer's bytes: f32 or i32 per uniform, in declaration order, then
    vg_zero (0), padded to 16 bytes."""
    f = np.array(values[:-1], np.float64)
    out = np.zeros(kernel.uniform_bytes // 4, np.uint32)
    floats = np.asarray(kernel.uniform_float, bool)
    k = len(f)
    out[:k][floats] = f[floats].astype(np.float32).view(np.uint32)
    out[:k][~floats] = f[~floats].astype(np.int64).astype(np.uint32)    # i32 or u32 bits
    return out.tobytes()


def _dispatch(kernel, device, queue, uniforms: bytes, group, groups, reads) -> list:
    """One dispatch and its read-backs: the uniforms and a cleared error slot are
    written, the pass runs, each (buffer, size) of ``reads`` is copied into the kernel's
    staging buffer in the same command buffer, which is then mapped once. The uniform
    buffer is written only when its bytes differ from the last ones written to it, and
    the error slot only when it may hold an error (a new slot, or one that reported):
    a repeated call with the same uniforms writes just its data."""
    if kernel.written.get("ubuf") != (kernel.ubuf, uniforms):
        queue.write_buffer(kernel.ubuf, 0, uniforms)
        kernel.written["ubuf"] = (kernel.ubuf, uniforms)
    err = reads[0][0]
    if kernel.written.get("err") is not err:
        queue.write_buffer(err, 0, _NO_ERROR_BYTES)
    enc = device.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(kernel.pipeline)
    cp.set_bind_group(0, group)
    cp.dispatch_workgroups(*groups)
    cp.end()
    got = _read(kernel, queue, enc, reads)
    kernel.written["err"] = err if got[0][:4] == _NO_ERROR_BYTES[:4] else None
    return got


def _read(kernel, queue, enc, reads) -> list:
    """The bytes of each (buffer, size) of ``reads``: copied into the kernel's staging
    buffer by the command encoder ``enc`` (after what it already holds), submitted,
    mapped once."""
    offsets, at = [], 0
    for _, size in reads:
        offsets.append(at)
        at += -(-size // 4) * 4
    staging = kernel.staging(at)
    for (buf, size), off in zip(reads, offsets):
        if size:
            enc.copy_buffer_to_buffer(buf, 0, staging, off, -(-size // 4) * 4)
    queue.submit([enc.finish()])
    raw = _mapped(staging, max(16, -(-at // 16) * 16))
    return [raw[off:off + size] for (_, size), off in zip(reads, offsets)]


def _pack(state: np.ndarray, bound: Bound) -> np.ndarray:
    """(n_states, N) -> the grid's layout (call/session.pack_states)."""
    return pack_states(state, bound.grid_shape)


def _mapped(staging, size: int) -> bytes:
    """The first ``size`` bytes of ``staging``, mapped for reading and unmapped again,
    whatever interrupts the wait: a buffer left mapped, or with its mapping still
    pending, makes wgpu-native abort the process ("Buffer ... is still mapped") at the
    next submission that copies into it. A first Ctrl-C waits for the end (held); a
    second one is let through, and the mapping is still waited for and undone."""
    promise = None
    with held():
        try:
            promise = _map_read(staging)
            if promise is not None:
                promise.sync_wait()
            return bytes(staging.read_mapped(0, size))
        finally:
            _unmap(staging, promise)


def _map_read(staging):
    """Start mapping ``staging`` for reading, just submitted work included: the promise
    (None: mapped already). wgpu-py's map_sync submits an empty command buffer first on
    every read mapping (for a buffer no submitted copy wrote: wgpu-native issue 305);
    our copy into it was just submitted, so the mode its own ``queue.read_buffer`` uses,
    "READ_NOSYNC", skips that extra submission (a wgpu-py without that mode: map_sync)."""
    try:
        return staging.map_async("READ_NOSYNC")
    except (KeyError, ValueError, AttributeError):
        staging.map_sync(1)     # wgpu.MapMode.READ
        return None


def _unmap(staging, promise) -> None:
    """Unmap ``staging``; a mapping still pending (its wait interrupted) is waited for
    first, through further interrupts (the first one is on its way already)."""
    while True:
        try:
            state = getattr(staging, "map_state", "mapped")
            if state == "pending" and promise is not None:
                try:
                    promise.sync_wait()
                except Exception:   # noqa: BLE001 (the mapping failed: nothing to unmap)
                    return
                state = staging.map_state
            if state == "mapped":
                staging.unmap()
            return
        except KeyboardInterrupt:
            continue
