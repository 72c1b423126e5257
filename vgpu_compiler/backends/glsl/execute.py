"""A fixed-step call on a compiled GpuKernel: runtime/fixed.py's driver on ``Target``,
and the GL work every GLSL driver shares (buffers written, uniforms set, one dispatch,
the read-back).

The driver runs on the caller's thread, one trip to the GL thread per dispatch
(``Target.trip``: writes, the dispatch, the error slot and the reads; a run of one
chunk and one dispatch is one trip), so the GL thread holds the context no longer than
the GL work takes and other threads' calls may run between its trips. So:
- progress is called on the caller's thread, between trips. The kernel's buffers
  then hold the run's state, so a call made by the callback that needs the same
  kernel gets a private copy (``private_if_busy``): its own program and buffers,
  compiled for that call and released after it;
- Ctrl-C (KeyboardInterrupt) stops the run at the next dispatch boundary: an
  interrupt while a trip is in flight waits for that trip (gl.call), then the
  run unwinds and the runtime is ready for the next call.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import copysign

import numpy as np

from . import device as gl
from ...call.bound import Bound, Progress, Solution
from ...runtime import fixed
from ...runtime import pacing
from ...runtime.progress import Nesting
from ..shader.faults import NO_ERROR
from ..shader.plan import Chunk, Plan, call_uniforms
from ..shader.target import PlanTarget, chunk_writes
from .plan import plan_for

NO_ERROR_BYTES = np.full(4, NO_ERROR, np.uint32).tobytes()


@dataclass
class _Call:
    """The host side of one run: arrays in kernel layout, and what the run fills in."""

    bound: Bound
    meta: dict
    item: int
    n: int
    n_states: int
    pt: tuple
    state: np.ndarray | None    # (n_states, N): h0 in kernel layout, then the end states
    params: np.ndarray | None   # (n_pt, N), None without per-trajectory params
    deposits: dict | None       # float64 flux: output name -> sums (None without)


def execute(kernel, bound: Bound, progress: Progress) -> Solution:
    """Run ``bound`` on ``kernel`` (runtime/fixed.py's driver on a ``Target``). The caller
    holds ``kernel.lock`` and reports the final progress(steps, steps) itself, after
    releasing it."""
    private = kernel.program is None    # evicted since found (eviction waits for the
    if private:                         # kernel's lock, held now): a private program
        gl.call(kernel.compile)
    try:
        target = Target(kernel, bound, plan_for(kernel, bound).at(bound))
        target.layout = fixed.layout(bound, kernel.meta)
        return fixed.solution(bound, fixed.run(target, progress))
    finally:
        if private:
            gl.call(kernel.release)


class Target(PlanTarget):
    """The drivers' Target (runtime/adaptive.py, runtime/fixed.py) on a GLSL kernel
    (shader/target.PlanTarget: what it takes from the plan): one trip to the GL context
    per dispatch, the kernel's buffers made and written on the GL
    thread, the run's and the chunk's first writes carried by the chunk's first trip,
    uniforms set only where they changed. The driver's ``layout`` is set by the caller;
    adaptive_run.py's subclass adds the controller's uniforms, caps and first sizes."""

    def __init__(self, kernel, bound: Bound, plan: Plan):
        super().__init__(kernel, plan, pacing.TARGET_SECONDS)   # (read now: tests lower it)
        self.call = _prepare(kernel.meta, bound, plan)
        self.uniforms = call_uniforms(kernel.meta, bound, plan)
        if self.call.deposits is not None:
            self.outputs = ()
        self.chunk, self.pending = None, None

    @property
    def bound(self) -> Bound:
        return self.call.bound

    @bound.setter
    def bound(self, bound: Bound) -> None:
        self.call.bound = bound

    def put(self, name: str, value) -> None:
        self.uniforms[name] = value

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        self.chunk, self.pending = self.plan.chunks[ci], (ci == 0, sizes, writes)

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        self.uniforms.update(uniforms)
        return gl.call(_trip, self, sizes, writes, reads)

    def read(self, reads: list) -> list:
        return gl.call(_read, self.kernel, reads)

    # (on the GL thread; session.py's Target changes them)
    def _opening(self, ctx, shared: bool) -> list:
        """The writes a chunk's first trip carries before the driver's: the run's
        (``shared``: its first chunk) and the chunk's own."""
        out = _shared_writes(ctx, self.kernel, self.call, self.plan) if shared else []
        return out + _chunk_writes(ctx, self.kernel, self.call, self.chunk)

    def _run(self, ctx, writes: list) -> np.ndarray:
        return _dispatch(ctx, self.kernel, self.chunk, self.uniforms, writes)


def _trip(ctx, t: Target, sizes: dict, writes: list, reads: list) -> list:
    """One dispatch on the GL thread: the chunk's first writes (and the run's) when it
    starts, then ``writes``, the dispatch, the error slot and ``reads``."""
    kernel = t.kernel
    try:
        out = []
        if t.pending is not None:
            shared, first_sizes, first_writes = t.pending
            out = t._opening(ctx, shared)
            sizes = {**first_sizes, **sizes}
            writes = first_writes + writes
            t.pending = None
        for name, nbytes in sizes.items():
            kernel.ensure(ctx, name, nbytes)
        out += [(kernel.ensure(ctx, name, len(data)), data) for name, data in writes]
        err = t._run(ctx, out)
        return [err.tobytes()] + _read(ctx, kernel, reads)
    except BaseException:           # stopped part way (a second Ctrl-C): trust no cached
        _forget(kernel)             # GL state of the kernel's next run
        raise


def _read(ctx, kernel, reads: list) -> list:
    """The bytes of each (name, bytes) of ``reads``; a (name, bytes, (array, offset)) is
    read straight into that array at that byte offset (b"" in its place)."""
    out = []
    for r in reads:
        if len(r) == 3:
            kernel.buffers[r[0]].read_into(r[2][0], r[1], write_offset=r[2][1])
            out.append(b"")
        else:
            out.append(kernel.buffers[r[0]].read(r[1]) if r[1] else b"")
    return out


# --- progress callbacks and re-entry -------------------------------------------------
_here = Nesting()               # the kernels whose run's progress callback this thread is in


def private_if_busy(kernel):
    """``kernel``, or a private copy of it when this thread is inside a progress callback
    of a run of ``kernel`` (whose buffers hold that run's state): the copy compiles its
    own program and buffers for one call (execute releases them)."""
    base = kernel.base          # a FieldView shares its kernel's program and buffers
    if not any(k.base is base for k in _here.kernels):
        return kernel
    from .kernel_cache import GpuKernel
    copy = GpuKernel(base.key, base.source, kernel.meta)    # the caller's error table
    copy.disk_key = base.disk_key
    return copy


Target.nesting = _here


# --- host arrays -----------------------------------------------------------------------
def _prepare(meta: dict, bound: Bound, plan: Plan) -> _Call:
    f = bound.field
    dtype = bound.dtype
    n = bound.n_trajectories
    state = fixed.start_state(bound)    # None: the kernel starts every state itself
    params = fixed.param_rows(bound, plan.pt)
    deposits = {name: np.zeros(shape, dtype) for name, shape in bound.output_shapes.items()
                } if meta["n_deposits"] else None
    return _Call(bound, meta, dtype.itemsize, n, len(f.states), plan.pt, state, params,
                 deposits)


def _forget(kernel) -> None:
    kernel.uniform_values, kernel.chunk_uniforms, kernel.err_dirty = {}, None, True
    kernel.uniform_owner = None
    gl.GL.bound_buffers = None


# Buffers are made (or grown) first and written just before the dispatch: on llvmpipe,
# Python work between the writes and the dispatch makes the dispatch itself slower.
def _shared_writes(ctx, kernel, call: _Call, plan: Plan) -> list:
    """Inputs, zeroed outputs and the error slot, once per run: [(buffer, data)]."""
    inputs = call.bound.inputs
    writes = [(kernel.ensure(ctx, buffer, inputs[name].nbytes), inputs[name])
              for buffer, name in plan.inputs]   # bind made them C-ordered, of the dtype
    if call.deposits is None:
        writes += [(kernel.ensure(ctx, buffer, size), bytes(size))
                   for buffer, _, size in plan.outputs]
    return writes + run_buffers(ctx, kernel, plan)


def run_buffers(ctx, kernel, plan: Plan) -> list:
    """The output buffers and the error slot made, the slot reset only after an error
    was flagged (or at first): [(buffer, data)]."""
    for buffer, _, size in plan.outputs:
        kernel.ensure(ctx, buffer, size)
    err = kernel.ensure(ctx, "b_err", 16)
    if kernel.err_dirty:
        kernel.err_dirty = False
        return [(err, NO_ERROR_BYTES)]
    return []


def _chunk_writes(ctx, kernel, call: _Call, chunk: Chunk) -> list:
    """The buffers of one chunk made, and its first writes (shader/target.chunk_writes:
    the states given by h0, per-trajectory params, deposit slots): [(buffer, data)]."""
    writes = []
    for name, nbytes, data in chunk_writes(call.meta, call.bound, call.state, call.params,
                                           chunk.a, chunk.b):
        buf = kernel.ensure(ctx, name, nbytes)
        if data is not None:
            writes.append((buf, data))
    return writes


def _set_uniforms(kernel, uniforms: dict) -> None:
    """Only what changed since the last dispatch: uniforms persist in a program. Values
    are compared as the program sees them: -0.0 differs from 0.0 (``1 / p``), so a zero
    also compares signs; a NaN never equals the last value, so it is sent again each time
    (the same value: harmless)."""
    prog, last, names = kernel.program, kernel.uniform_values, kernel.uniform_names
    kernel.uniform_owner = None     # a OneDispatch's fixed uniforms may be overwritten
    for name, value in uniforms.items():
        old = last.get(name)
        if (old != value or (value == 0 and copysign(1.0, old) != copysign(1.0, value))
                ) and name in names:
            prog[name].value = value
            last[name] = value


def bind_buffers(kernel) -> None:
    """Bind the kernel's buffers to their binding points, unless this kernel's buffers,
    as they are now, were the last bound (binding points are the context's state)."""
    context = gl.GL
    bound = context.bound_buffers
    if bound is None or bound[0] is not kernel or bound[1] != kernel.generation:
        for b in kernel.meta["buffers"]:
            kernel.buffers[b["name"]].bind_to_storage_buffer(b["binding"])
        context.bound_buffers = (kernel, kernel.generation)


def _dispatch(ctx, kernel, chunk: Chunk, uniforms: dict, writes=()) -> np.ndarray:
    """Run ``chunk`` once with ``uniforms`` (and the chunk's own, unless they are the ones
    this kernel's program holds already) after ``writes``; returns the error slot."""
    if kernel.chunk_uniforms is not chunk.uniforms:
        _set_uniforms(kernel, chunk.uniforms)
        kernel.chunk_uniforms = chunk.uniforms
    _set_uniforms(kernel, uniforms)
    return launch(ctx, kernel, kernel.program, chunk.groups, writes)


def launch(ctx, kernel, program, groups, writes=()) -> np.ndarray:
    """``writes``, then ``program`` (the kernel's, or its specialised one: session.py) on
    ``kernel``'s buffers over ``groups``; returns the error slot."""
    # Binding points are global state: bind again unless this kernel's buffers, as they are
    # now, were the last bound (a repeated call of one kernel skips it).
    bind_buffers(kernel)
    for buf, data in writes:
        buf.write(data)
    program.run(*groups)
    ctx.memory_barrier()
    err = np.frombuffer(kernel.buffers["b_err"].read(16), np.uint32)
    if err[0] != NO_ERROR:
        kernel.err_dirty = True
    return err


# --- results -----------------------------------------------------------------------------
def _pack(call: _Call, state: np.ndarray) -> np.ndarray:
    """(n_states, N) kernel layout -> grid_shape (+ (n_states,)), a new array."""
    return fixed.pack(state, call.bound.grid_shape)
