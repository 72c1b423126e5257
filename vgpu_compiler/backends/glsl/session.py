"""The GLSL backend's Simulation session (call/session.py): a private copy of the
field's kernel (its own program and buffers, compiled once) whose buffers hold the run
between calls.

The kernel already runs any range of steps ``[u_step0, u_step0 + u_nsteps)`` of a
run whose state waits in its buffers (execute.py splits long runs that way), so an
``advance`` is the dispatches of that range: no upload unless something changed (a
restored state, new per-trajectory params), nothing read back until asked for. An
ensemble larger than one storage block runs as several chunks (plan.py): each chunk's
arrays then live on the host between dispatches, as in execute.py.
"""
from __future__ import annotations

import time
import weakref

import numpy as np

from ...call.counters import COUNTERS
from ...call.interrupt import held
from ...call.session import pack_states
from ...errors import BackendError
from . import device as gl
from .execute import (NO_ERROR, NO_ERROR_BYTES, _accumulate, _call_uniforms, _dispatch,
                      _forget, _prepare, _raise_error, _read_outputs, _set_uniforms,
                      bind_buffers)
from ...runtime.pacing import Pacer, segments
from ...runtime.session import HostRun
from .kernel_cache import GpuKernel
from .plan import plan_for
from .special import MAX_STEPS, program_for
from . import lookup
from ..shader import located as _located


def private_kernel(found) -> GpuKernel:
    """A session's own compiled copy of the kernel ``lookup.kernel_of_call`` found (its
    buffers are the session's; the field's own error table)."""
    base = found.base
    k = GpuKernel(base.key, base.source, found.meta)
    k.disk_key, k.dtype = base.disk_key, base.dtype
    try:
        gl.call(k.compile)
    except gl.NoContext as exc:
        raise BackendError(f"no OpenGL context: {exc}") from None
    return k


class Session(HostRun):
    def __init__(self, prepared, data):
        t = prepared.template
        if t.adaptive is not None or t.save_at is not None:
            raise BackendError("a Simulation on glsl runs fixed-step methods only so far")
        if not lookup.available():
            raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
        bound = prepared.bound(data)
        found = lookup.kernel_of_call(bound)
        k = private_kernel(found)
        self.kernel = k
        self.aliased: dict = {}     # input buffer -> (the session whose buffer it is, name)
        self.borrowers = weakref.WeakSet()      # sessions whose inputs alias our buffers
        self._finalize()
        self.plan = plan_for(k, bound)
        self.call = call = _prepare(k.meta, bound, self.plan)
        self.uniforms = _call_uniforms(call, self.plan)
        meta, n, dtype = k.meta, call.n, bound.dtype
        if call.state is None:
            call.state = np.zeros((call.n_states, n), dtype)
        self.init = np.zeros((call.n_states, n), dtype) if meta["uses_init"] else None
        self.steps2 = np.zeros((2, n), np.int32) if meta["collapse"] else None
        self.dep = (np.full((meta["n_deposits"], n, 2), -1.0, dtype)
                    if meta["n_deposits"] else None)
        self.resident = len(self.plan.chunks) == 1
        self.dirty = {"state", "params", "inputs"}      # the device needs these from the host
        self.step = 0

    # --- running -------------------------------------------------------------------------
    def advance(self, step0: int, nsteps: int) -> None:
        """Steps [step0, step0 + nsteps), paced dispatches. Each dispatch and its count
        are done whole (gl.call holds a Ctrl-C until the job ends, and the count is taken
        with it): an interrupted advance of a resident run leaves ``step`` at the steps
        the finished dispatches ran; one of several chunks (each runs all its steps in
        turn) keeps the host's arrays, and ``step``, as they were before the advance."""
        total, back = step0 + nsteps, []
        for ci, chunk in enumerate(self.plan.chunks):
            upload = set(self.dirty) if self.resident else {"state", "params"}
            if ci == 0:
                upload |= {"outputs"} | (self.dirty & {"inputs"})
            pacer = Pacer(chunk.first, self.plan.cap)
            for s0, s1 in segments(total, pacer, start=step0):
                u = {**self.uniforms, "u_step0": s0, "u_nsteps": s1 - s0,
                     "u_final": int(s1 == total), "u_steps": total}
                last = s1 == total and not self.resident
                began = time.perf_counter()
                with held():
                    err, raw = gl.call(self._trip, chunk, u, upload, last)
                    if self.resident:       # the device holds the run: this is its step
                        self.dirty, self.step = set(), s1
                pacer.record(s1 - s0, time.perf_counter() - began)
                COUNTERS.add("dispatches")
                upload = set()
                _raise_error(err, self.call)
                if raw is not None:
                    back.append((chunk, raw))
        with held():            # every chunk has run: the host's arrays are the run's
            for chunk, raw in back:
                self._absorb(chunk, raw)
            self.dirty = set()
            self.step = total

    def _trip(self, ctx, chunk, uniforms: dict, upload: set, back: bool):
        try:
            writes = self._writes(ctx, chunk, upload)
            special = self._special(ctx, chunk, uniforms)
            if special is not None:
                err = _dispatch_special(ctx, self.kernel, special, chunk, uniforms, writes)
            else:
                err = _dispatch(ctx, self.kernel, chunk, uniforms, writes)
            return err, (self._read(chunk) if back else None)
        except BaseException:       # stopped part way: trust no cached GL state
            _forget(self.kernel)
            raise

    def _special(self, ctx, chunk, uniforms: dict):
        """A run from step 0 of a few steps (a pipeline's stage, run again and again) gets
        the kernel's specialised program (special.py: its int uniforms fixed, the loop
        unrolled), as run_field's one-dispatch calls do; other advances the generic one
        (a new step0 each time would be a new program each time)."""
        if uniforms["u_step0"] != 0 or uniforms["u_nsteps"] > MAX_STEPS:
            return None
        ints = {**chunk.uniforms, **{n: uniforms[n] for n in
                                     ("u_step0", "u_nsteps", "u_final", "u_steps")}}
        return program_for(ctx, self.kernel, ints)

    def _writes(self, ctx, chunk, upload: set) -> list:
        k, call, plan = self.kernel, self.call, self.plan
        a, b, item, meta = chunk.a, chunk.b, call.item, k.meta
        count, writes = b - a, []
        if "inputs" in upload:
            inputs = call.bound.inputs
            writes += [(k.ensure(ctx, buffer, inputs[name].nbytes), inputs[name])
                       for buffer, name in plan.inputs if buffer not in self.aliased]
        if "outputs" in upload:         # an advance's flux: on the state it ends with
            for buffer, _, size in plan.outputs:
                buf = k.ensure(ctx, buffer, size)
                if call.deposits is None:
                    writes.append((buf, bytes(size)))
            err = k.ensure(ctx, "b_err", 16)
            if k.err_dirty:
                writes.append((err, NO_ERROR_BYTES))
                k.err_dirty = False
        buf = k.ensure(ctx, "b_state", call.n_states * count * item)
        if "state" in upload:
            writes.append((buf, np.ascontiguousarray(call.state[:, a:b])))
        if meta["uses_init"]:
            buf = k.ensure(ctx, "b_init", call.n_states * count * item)
            if "state" in upload:
                writes.append((buf, np.ascontiguousarray(self.init[:, a:b])))
        if meta["collapse"]:
            buf = k.ensure(ctx, "b_steps", 2 * count * 4)
            if "state" in upload:
                writes.append((buf, np.ascontiguousarray(self.steps2[:, a:b])))
        if call.pt:
            p = np.ascontiguousarray(call.params[:, a:b])
            buf = k.ensure(ctx, "b_params", p.nbytes)
            if "params" in upload:
                writes.append((buf, p))
        if meta["n_deposits"]:
            buf = k.ensure(ctx, "b_dep", 2 * meta["n_deposits"] * count * item)
            if "state" in upload:
                writes.append((buf, np.ascontiguousarray(self.dep[:, a:b])))
        return writes

    def _read(self, chunk) -> dict:
        """What the device holds of ``chunk``: states, init values, collapse counters and
        deposit slots (on the GL thread)."""
        k, call, meta = self.kernel, self.call, self.kernel.meta
        count, item, dtype = chunk.b - chunk.a, call.item, call.bound.dtype
        size = call.n_states * count * item
        raw = {"state": np.frombuffer(k.buffers["b_state"].read(size), dtype)}
        if meta["uses_init"]:
            raw["init"] = np.frombuffer(k.buffers["b_init"].read(size), dtype)
        if meta["collapse"]:
            raw["steps"] = np.frombuffer(k.buffers["b_steps"].read(8 * count), np.int32)
        if meta["n_deposits"]:
            raw["dep"] = np.frombuffer(
                k.buffers["b_dep"].read(2 * meta["n_deposits"] * count * item), dtype)
        return raw

    def _absorb(self, chunk, raw: dict) -> None:
        a, b, call = chunk.a, chunk.b, self.call
        call.state[:, a:b] = raw["state"].reshape(call.n_states, b - a)
        if "init" in raw:
            self.init[:, a:b] = raw["init"].reshape(call.n_states, b - a)
        if "steps" in raw:
            self.steps2[:, a:b] = raw["steps"].reshape(2, b - a)
        if "dep" in raw:
            self.dep[:, a:b] = raw["dep"].reshape(len(self.dep), b - a, 2)

    def _on_device(self) -> bool:
        """Whether the device holds the run's state (one chunk, and no state from the host
        waiting to be written: new params or inputs do not change the state)."""
        return self.resident and "state" not in self.dirty

    def _sync(self) -> None:
        """Bring the host arrays up to the device's (one chunk: the device holds the run)."""
        if self._on_device():
            chunk = self.plan.chunks[0]
            self._absorb(chunk, gl.call(lambda ctx: self._read(chunk)))

    # --- reading -------------------------------------------------------------------------
    def states(self) -> np.ndarray:
        if self._on_device():
            call = self.call
            raw = gl.call(lambda ctx: self.kernel.buffers["b_state"].read(
                call.n_states * call.n * call.item))
            state = np.frombuffer(raw, call.bound.dtype).reshape(call.n_states, call.n)
            return pack_states(state, call.bound.grid_shape)
        return pack_states(self.call.state, self.call.bound.grid_shape)

    def outputs(self) -> dict:
        call = self.call
        if call.deposits is None:
            return gl.call(lambda ctx: _read_outputs(self.kernel, call, self.plan))
        self._sync()
        out = {name: np.zeros(shape, call.bound.dtype)
               for name, shape in call.bound.output_shapes.items()}
        _accumulate(self.dep.reshape(len(self.dep), call.n, 2), call.meta, out)
        return out

    # --- changing (checkpoints: runtime/session.HostRun) ------------------------------
    def _arrays(self) -> tuple:
        return self.call.state, self.init, self.steps2

    def _restored(self) -> None:
        self.dirty |= {"state", "params"}

    @property
    def bound(self):
        return self.call.bound

    def set_data(self, data) -> None:
        """New param values of the same signature: scalars are uniforms (set at the next
        dispatch when they changed), per-trajectory params are written when they changed."""
        call, plan = self.call, self.plan
        bound = call.bound.prepared.bound(data)
        cast = bound.dtype.type
        for uniform, name in plan.scalars:
            self.uniforms[uniform] = float(cast(bound.params[name]))
        if plan.pt:
            new = np.stack([np.asarray(bound.params[p], bound.dtype).reshape(call.n)
                            for p in plan.pt])
            if not np.array_equal(new, call.params):
                call.params = new
                self.dirty |= {"params"}
        call.bound = bound

    # --- pipelines (persistent/pipeline.py) -----------------------------------------------
    def set_input(self, name: str, array: np.ndarray) -> None:
        """A new value of input ``name`` (same shape), written before the next dispatch."""
        self.call.bound.inputs[name] = np.ascontiguousarray(array, self.call.bound.dtype)
        self.dirty |= {"inputs"}

    def alias_input(self, name: str, source: "Session", output: str | None) -> bool:
        """Make input ``name`` read ``source``'s buffer of ``output`` (None: its states) on
        the device, with no copy: True when both keep their arrays in one buffer each (one
        chunk), of one dtype, and ``output`` is not summed on the host (float64 flux).
        An earlier alias of ``name`` is undone first (False: the input is this session's
        own buffer again, written from the host's array before the next dispatch)."""
        mine = next(b for b, n in self.plan.inputs if n == name)
        self._unalias(mine)
        if not (isinstance(source, Session) and self.resident and source.resident
                and source._free.alive
                and source.call.bound.dtype == self.call.bound.dtype
                and (output is None or source.call.deposits is None)):
            return False
        if output is None:
            buffer = "b_state"
        else:
            buffer = next(b for b, n, _ in source.plan.outputs if n == output)
        if "inputs" in self.dirty:      # the other inputs first
            self.advance(self.step, 0)
        k, other = self.kernel, source.kernel
        old = k.buffers.get(mine)
        if old is not None:
            gl.call(lambda ctx: old.release())
        k.buffers[mine] = other.buffers[buffer]
        k.capacity[mine] = other.capacity[buffer]
        k.generation += 1
        self.aliased[mine] = (source, buffer)
        source.borrowers.add(self)
        self._finalize()
        return True

    def _unalias(self, mine: str, keep: bool = False) -> None:
        """Input buffer ``mine`` back to one of this session's own (made at the next
        upload of the inputs); ``keep``: first read what the shared buffer holds into
        the host's array of the input (its source is closing: the value it last had)."""
        if mine not in self.aliased:
            return
        k, name = self.kernel, next(n for b, n in self.plan.inputs if b == mine)
        if keep:
            host = self.call.bound.inputs[name]
            raw = gl.call(lambda ctx: k.buffers[mine].read(host.nbytes))
            self.call.bound.inputs[name] = np.frombuffer(raw, host.dtype).reshape(
                host.shape).copy()
        del self.aliased[mine]
        k.buffers.pop(mine, None)       # (the source's buffer: it releases it)
        k.capacity.pop(mine, None)
        k.generation += 1
        self.dirty |= {"inputs"}
        self._finalize()

    def _lose(self, source_kernel) -> None:
        """``source_kernel``'s session is closing: inputs aliasing its buffers keep the
        values they hold now, in buffers of this session's own."""
        if not self._free.alive:
            return
        for mine, (source, _) in list(self.aliased.items()):
            if source.kernel is source_kernel:
                self._unalias(mine, keep=True)

    def _finalize(self) -> None:
        """(Re)arm the release of the kernel's buffers, but not those it borrows."""
        old = getattr(self, "_free", None)
        if old is not None:
            old.detach()
        self._free = weakref.finalize(self, _release, self.kernel, tuple(self.aliased),
                                      self.borrowers)
        self._free.atexit = False

    def close(self) -> None:
        self._free()


def _dispatch_special(ctx, kernel, special, chunk, uniforms: dict, writes) -> np.ndarray:
    """execute._dispatch with a specialised program (its int uniforms are constants)."""
    _set_uniforms(special, uniforms)
    bind_buffers(kernel)
    for buf, data in writes:
        buf.write(data)
    special.program.run(*chunk.groups)
    ctx.memory_barrier()
    err = np.frombuffer(kernel.buffers["b_err"].read(16), np.uint32)
    if err[0] != NO_ERROR:
        kernel.err_dirty = True
    return err


def _release(kernel: GpuKernel, aliased=(), borrowers=()) -> None:
    for other in list(borrowers):   # sessions reading our buffers: their own copies now
        try:
            other._lose(kernel)
        except gl.NoContext:
            pass
    for name in aliased:            # another session's buffers: it releases them
        kernel.buffers.pop(name, None)
        kernel.capacity.pop(name, None)
    try:
        gl.call(kernel.release)
    except gl.NoContext:
        pass


class LocatedSession(_located.LocatedSession):
    """A fixed-step Simulation of a field with an observer ``first`` (shader/located.py)
    on a private copy of the events' kernel, through adaptive_run's Target."""

    name = "glsl"

    def _target(self, bound):
        from .adaptive_run import _Target
        k = getattr(self, "kernel", None)
        if k is None:
            if not lookup.available():
                raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
            k = private_kernel(lookup.kernel_of_call(bound))
            self.kernel = k
            self._free = weakref.finalize(self, _release, k)
            self._free.atexit = False
        return _Target(k, bound)

    def close(self) -> None:
        free = getattr(self, "_free", None)
        if free is not None:
            free()
