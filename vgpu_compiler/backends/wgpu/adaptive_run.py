"""An adaptive method's call on wgpu (templates/adaptive.wgsl.j2), or a fixed-step
method's with ``save_at`` or events (its field's ``solver.dense`` variant, a kernel of
its own): the kernel found and runtime/adaptive.py's driver run on it through
``_Target`` (wgpu's part: a dispatch and its read-backs are one command buffer and one
mapping, dispatch.py; the uniforms packed into the kernel's uniform buffer). Chunks
(runner._chunks) are sized for the history too; on a CPU adapter a dispatch never runs
more attempts than the loop limiter of lavapipe's code generator allows.
"""
from __future__ import annotations

import numpy as np

from ... import spelling as S
from ...call.bound import Bound, Solution
from ...errors import BackendError
from ...ir.step import step_program
from ...runtime import adaptive as driver, pacing
from ..shader import adaptive_host as host
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import check_dtype
from . import device as dev
from . import runner as R
from .dispatch import _dispatch, _pack, _pack_uniforms, _raise_error, _read


def run(prepared, data, progress=None) -> Solution:
    """An adaptive method's call, or a fixed-step method's with save_at or events."""
    bound = host.kernel_field(prepared.bound(data))
    if not R.available():
        raise BackendError(f"no wgpu device here ({dev.get().error}); "
                           f"use {S.setting('backend', 'numpy')}")
    check_dtype(bound.dtype.name, bound.field.span)
    kernel = R.kernel_for(bound)
    if R._here.inside(kernel):                      # inside a progress callback of its run
        kernel = kernel.private()
    with R._lock:
        done = driver.run(_Target(kernel, bound), progress)
        return host.finish(bound, kernel.meta, done, lambda rows: _pack(rows, bound))


def _attempt_cap(meta: dict, bound: Bound) -> int | None:
    """The most attempts per dispatch: on a CPU adapter, what the loop limiter allows;
    ``runner.limits(max_steps=...)`` lowers it (tests split runs with it)."""
    cap = host.attempt_cap(meta, bound, R.LOOP_LIMIT) if dev.software() else None
    forced = R.LIMITS["max_steps"]
    return (min(cap, forced) if cap else forced) if forced else cap


class _Target:
    """runtime/adaptive.py's Target on a wgpu kernel."""

    nesting = R._here

    def __init__(self, kernel: R.Kernel, bound: Bound):
        self.kernel, self.bound, meta = kernel, bound, kernel.meta
        self.layout = L = host.layout(bound, meta)
        f, n_save = bound.field, len(L.times)
        self.state = R._initial(bound)
        self.values, self.put = R._setup(kernel, bound)
        for name, value in host.controller_uniforms(bound).items():
            self.put(name, value)
        self.cap, self.aim = _attempt_cap(meta, bound), pacing.target(dev.software())
        self.stages = len(step_program(f.solver.tableau).stages)   # (the first dispatch)
        self.chunks = R._chunks(kernel, bound, max(2 + L.n_states, L.counters,
                                                   n_save * L.n_states))
        self.block = dev.get().limits.get("max_storage_buffer_binding_size", 1 << 27)
        host.check_history(bound, L.n_states, max((b - a for a, b in self.chunks), default=0),
                           4, self.block)
        self.outputs = [(x["name"], x["array"], 4 * int(np.prod(bound.output_shapes[x["array"]])))
                        for x in meta["buffers"] if x["role"] == "output"]
        self.pt = [p.name for p in f.params if p.name in bound.per_trajectory]
        self.row = int(np.prod(bound.grid_shape[1:])) if meta["has_basin"] else 1
        self.groups = None

    def first(self, ci: int) -> int:
        a, b = self.chunks[ci]
        return host.first_attempts(R._first_steps(b - a, self.stages, None), FIRST_ATTEMPTS)

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        (a, b), kernel, bound, meta = self.chunks[ci], self.kernel, self.bound, self.kernel.meta
        count, n_states, queue = b - a, self.layout.n_states, dev.get().device.queue
        self.put("u_count", count)
        self.put("u_origin", a // self.row + bound.origin if meta["has_basin"]
                 else a + bound.first_trajectory)
        buf = kernel.ensure("b_state", n_states * count * 4)
        if self.state is not None:
            queue.write_buffer(buf, 0, np.ascontiguousarray(self.state[:, a:b]).tobytes())
        if meta["uses_init"]:
            kernel.ensure("b_init", n_states * count * 4)
        if self.pt:
            p = np.stack([np.asarray(bound.params[name], np.float32).reshape(-1)[a:b]
                          for name in self.pt])
            queue.write_buffer(kernel.ensure("b_params", p.nbytes), 0, p.tobytes())
        for name, size in sizes.items():
            kernel.ensure(name, size)
        for name, data in writes:
            queue.write_buffer(kernel.ensure(name, len(data)), 0, data)
        self.groups = R._groups(kernel, bound, a, b)

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        kernel, d = self.kernel, dev.get()
        for name, value in uniforms.items():
            self.put(name, value)
        for name, size in sizes.items():
            kernel.ensure(name, size)
        bufs = [(kernel.ensure(name, len(data)), data) for name, data in writes]
        group = kernel.bind_group()     # (the one of begin, unless a buffer grew)
        packed = _pack_uniforms(kernel, self.values)
        with d.lock:
            for buf, data in bufs:
                d.device.queue.write_buffer(buf, 0, data)
            return _dispatch(kernel, d.device, d.device.queue, packed, group, self.groups,
                             [(kernel.buffers["b_err"], 16)]
                             + [(kernel.buffers[name], size) for name, size in reads])

    def check(self, err: bytes) -> None:
        _raise_error(np.frombuffer(err, np.uint32), self.kernel.meta, self.bound)

    def read(self, reads: list) -> list:
        d = dev.get()
        with d.lock:
            return _read(self.kernel, d.device.queue, d.device.create_command_encoder(),
                         [(self.kernel.buffers[name], size) for name, size in reads])
