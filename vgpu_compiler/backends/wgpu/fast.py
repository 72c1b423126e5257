"""The one-dispatch fast path on wgpu: shader/fast.py's OneDispatch (the algorithm),
with its one trip to the device (queue writes, the packed uniforms, one dispatch and
its read-backs: dispatch._dispatch).

runner.run keeps it in the Prepared's ``slots["wgpu_fast"]`` after the first full run
and checks that it still holds before each call; the numbers are the full path's: the
same kernel, buffers and bytes.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound
from . import device as dev
from ..shader import fast as shared
from ..shader.faults import NO_ERROR
from ..shader.plan import Plan
from .dispatch import _dispatch, _pack_uniforms


class OneDispatch(shared.OneDispatch):
    """shader/fast.py's, on the kernel's pipeline and bind group. ``values``: the
    uniforms of the run it was made from, in the kernel's order (runner._uniform_values,
    with the chunk's own); ``made``: the limits and the adapter's limits it was made
    under (runner._still)."""

    def __init__(self, kernel, bound: Bound, plan: Plan, values: list, made: tuple):
        super().__init__(kernel, bound, plan, made)
        self.group = kernel.group
        self.index = index = kernel.uniform_index
        self.values = list(values)
        for name, value in self.fixed.items():
            if name in index:
                self.values[index[name]] = value
        buffers = kernel.buffers
        self.writes = [(buffers[b], name) for b, name in self.inputs]
        self.zeroed = [(buffers[b], bytes(max(16, -(-size // 16) * 16)))
                       for b, _, size, _ in self.outputs]
        self.state = buffers["b_state"]
        self.b_params = buffers.get("b_params")
        reads = [(buffers["b_err"], 16), (self.state, self.state_bytes)]
        if self.collapse:
            reads.append((buffers["b_steps"], 4 * self.n))
        self.reads = reads + [(buffers[b], size) for b, _, size, _ in self.outputs]

    def _trip(self, inputs, state, params, uniforms):
        kernel = self.kernel
        if kernel.group is not self.group:      # its buffers changed: the full path copes
            return None
        values = self.values
        if uniforms is not None:
            values, index = list(values), self.index
            for name, value in uniforms.items():
                values[index[name]] = value
        packed = _pack_uniforms(kernel, values)
        d = dev.get()
        device, queue = d.device, d.device.queue
        with d.lock:
            for buf, name in self.writes:
                queue.write_buffer(buf, 0, np.ascontiguousarray(inputs[name], self.dtype)
                                   .tobytes() or bytes(16))
            for buf, zero in self.zeroed:
                queue.write_buffer(buf, 0, zero)
            if state is not None:
                queue.write_buffer(self.state, 0, state.tobytes())
            if params is not None:
                queue.write_buffer(self.b_params, 0, params.tobytes())
            got = _dispatch(kernel, device, queue, packed, self.group, self.groups,
                            self.reads)
        err = np.frombuffer(got[0], np.uint32)
        if int(err[0]) != NO_ERROR:
            return err, None, None, None
        raw = np.frombuffer(got[1], self.dtype).copy()
        if self.n_states == 1:
            raw = raw.reshape(self.grid)
        steps = np.frombuffer(got[2], np.int32).copy() if self.collapse else None
        first = 2 + self.collapse
        outputs = {name: np.frombuffer(data, self.dtype).reshape(shape).copy()
                   for (_, name, _, shape), data in zip(self.outputs, got[first:])}
        return None, raw, steps, outputs
