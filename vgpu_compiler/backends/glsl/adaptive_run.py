"""An adaptive method's call on GLSL (templates/adaptive.glsl.j2), or a fixed-step
method's with save_at or events (its ``solver.dense`` variant, a kernel of its own): the
kernel found, held and compiled, and runtime/adaptive.py's driver run on it through
``_Target`` (GL's part: one trip to the GL context per dispatch, the kernel's buffers
made and written on the GL thread, its uniforms set only where they changed). Chunks
(plan.py) are sized so that a chunk's history fits one storage block.
"""
from __future__ import annotations

import math

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...errors import BackendError
from ...runtime import adaptive as driver
from ...runtime import pacing
from ..shader import adaptive_host as host
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import device as gl
from .execute import (_call_uniforms, _chunk_writes, _dispatch, _here, _prepare, _raise_error,
                      _shared_writes, _pack, private_if_busy)
from .kernel_cache import holding
from .lookup import available, kernel_of_call
from .plan import LOOP_LIMIT, _in_force, plan_for


def run(prepared, data, progress: Progress = None) -> Solution:
    bound = host.kernel_field(prepared.bound(data))
    if not available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    found = kernel_of_call(bound)
    kernel = private_if_busy(found)     # (a call from a progress callback of its run)
    with holding(kernel):
        if kernel.program is None:
            gl.call(kernel.compile)
        try:
            target = _Target(kernel, bound)
            done = driver.run(target, progress)
        finally:
            if kernel is not found:     # a private copy: its program and buffers go
                gl.call(kernel.release)
        return host.finish(bound, kernel.meta, done, lambda rows: _pack(target.call, rows))


def _attempt_cap(kernel, bound: Bound) -> int | None:
    """The most attempts one dispatch may run on a software renderer (its loop limiter:
    see plan.loop_cap), counting the controller's own loops; None elsewhere."""
    from . import SOFTWARE_RENDERERS
    if not SOFTWARE_RENDERERS.search(gl.device_info().get("renderer", "")):
        return None
    return host.attempt_cap(kernel.meta, bound, LOOP_LIMIT)


class _Target:
    """runtime/adaptive.py's Target on a GLSL kernel."""

    nesting = _here

    def __init__(self, kernel, bound: Bound):
        self.kernel, self.layout = kernel, host.layout(bound, kernel.meta)
        n_save, n_states, item = len(self.layout.times), len(bound.field.states), \
            bound.dtype.itemsize
        self.block = _in_force[0][0] or gl.device_info().get("max_block", 1 << 27)
        _check_history(kernel, bound, n_save, self.block)
        # the history of a chunk is one buffer: chunks small enough that it fits one block
        self.plan = plan_for(kernel, bound, history=n_save * n_states * item).at(bound)
        self.call = _prepare(kernel.meta, bound, self.plan)
        self.uniforms = _call_uniforms(self.call, self.plan)
        self.uniforms.update(host.controller_uniforms(bound))
        self.chunks = [(c.a, c.b) for c in self.plan.chunks]
        self.cap, self.aim = _attempt_cap(kernel, bound), pacing.TARGET_SECONDS   # (as execute)
        self.outputs = [] if self.call.deposits is not None else self.plan.outputs
        self.chunk, self.pending = None, None

    def first(self, ci: int) -> int:
        return host.first_attempts(self.plan.chunks[ci].first, FIRST_ATTEMPTS)

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        self.chunk, self.pending = self.plan.chunks[ci], (ci == 0, sizes, writes)

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        self.uniforms.update(uniforms)
        return gl.call(_trip, self, sizes, writes, reads)

    def check(self, err: bytes) -> None:
        _raise_error(np.frombuffer(err, np.uint32), self.call)

    def read(self, reads: list) -> list:
        return gl.call(_read, self.kernel, reads)


def _trip(ctx, t: _Target, sizes: dict, writes: list, reads: list) -> list:
    """One dispatch on the GL thread: the chunk's first writes (and the run's) when it
    starts, then ``writes``, the dispatch, the error slot and ``reads``."""
    kernel, call, plan = t.kernel, t.call, t.plan
    out = []
    if t.pending is not None:
        shared, first_sizes, first_writes = t.pending
        out = _shared_writes(ctx, kernel, call, plan) if shared else []
        out += _chunk_writes(ctx, kernel, call, t.chunk)
        sizes = {**first_sizes, **sizes}
        writes = first_writes + writes
        t.pending = None
    for name, nbytes in sizes.items():
        kernel.ensure(ctx, name, nbytes)
    out += [(kernel.ensure(ctx, name, len(data)), data) for name, data in writes]
    err = _dispatch(ctx, kernel, t.chunk, t.uniforms, out)
    return [err.tobytes()] + _read(ctx, kernel, reads)


def _read(ctx, kernel, reads: list) -> list:
    return [kernel.buffers[name].read(nbytes) if nbytes else b"" for name, nbytes in reads]


def _check_history(kernel, bound: Bound, n_save: int, block: int) -> None:
    """The history of the fewest trajectories a chunk can hold (one, or one row of
    basins) must fit one storage block."""
    meta, n_states = kernel.meta, len(bound.field.states)
    unit = meta["basin"][0] * math.prod(bound.grid_shape[1:]) if meta["has_basin"] else 1
    if n_save * n_states * bound.dtype.itemsize * unit > block:
        what = "one trajectory" if unit == 1 else f"one row of basins ({unit} trajectories)"
        times = "saved steps" if host.every_events(bound) else "save_at times"
        raise BackendError(f"the history of {what} ({n_save} {times} x {n_states} states) "
                           f"is larger than the largest storage block of this driver "
                           f"({block} bytes); save fewer times, or use backend='numpy'")
