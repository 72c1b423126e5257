"""The GLSL backend's fixed-step Simulation session: runtime/fixed_session.py's driver on
a private copy of the field's kernel (its own program and buffers, compiled once)
through ``_Target`` (execute.Target: one trip to the GL context per dispatch). What is
GLSL's own: a run from step 0 of a few steps runs the kernel's specialised program
(special.py), and a pipeline's input may read another session's buffer (``alias_input``).
"""
from __future__ import annotations

import weakref

import numpy as np

from ...errors import BackendError
from ...runtime import fixed
from ...runtime.fixed_session import FixedSession
from . import device as gl
from .execute import Target, launch, run_buffers, _set_uniforms
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


class _Target(Target):
    """execute.Target for a session: a chunk's first trip carries the session's writes
    only (its buffers hold the run), and on chunk 0 makes the output buffers and the
    error slot (reset where an error was flagged); a run from step 0 of a few steps (a
    pipeline's stage, run again and again) gets the kernel's specialised program
    (special.py: its int uniforms fixed, the loop unrolled), as run_field's one-dispatch
    calls do; other advances the generic one (a new step0 each time would be a new
    program each time)."""

    def __init__(self, kernel, bound):
        super().__init__(kernel, bound, plan_for(kernel, bound))
        self.layout = fixed.layout(bound, kernel.meta)
        self.inputs, self.pt = self.plan.inputs, self.plan.pt
        self.call.state = self.call.params = None       # (the session's own arrays)

    def _opening(self, ctx, shared: bool) -> list:
        return run_buffers(ctx, self.kernel, self.plan) if shared else []

    def _run(self, ctx, writes: list) -> np.ndarray:
        u = self.uniforms
        if u["u_step0"] != 0 or u["u_nsteps"] > MAX_STEPS:
            return super()._run(ctx, writes)
        ints = {**self.chunk.uniforms, **{n: u[n] for n in
                                          ("u_step0", "u_nsteps", "u_final", "u_steps")}}
        special = program_for(ctx, self.kernel, ints)
        if special is None:
            return super()._run(ctx, writes)
        _set_uniforms(special, u)
        return launch(ctx, self.kernel, special.program, self.chunk.groups, writes)


class Session(FixedSession):
    def __init__(self, prepared, data):
        t = prepared.template
        if t.adaptive is not None or t.save_at is not None:
            raise BackendError("a Simulation on glsl runs fixed-step methods only so far")
        lookup.need()
        bound = prepared.bound(data)
        self.kernel = k = private_kernel(lookup.kernel_of_call(bound))
        self.aliased: dict = {}     # input buffer -> (the session whose buffer it is, name)
        self.borrowers = weakref.WeakSet()      # sessions whose inputs alias our buffers
        self._finalize()
        super().__init__(_Target(k, bound), bound)

    @property
    def plan(self):
        return self.target.plan

    # --- pipelines (persistent/pipeline.py) -----------------------------------------------
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
                and source.bound.dtype == self.bound.dtype
                and (output is None or source.dep is None)):
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
            host = self.bound.inputs[name]
            raw = gl.call(lambda ctx: k.buffers[mine].read(host.nbytes))
            self.bound.inputs[name] = np.frombuffer(raw, host.dtype).reshape(
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
            lookup.need()
            k = private_kernel(lookup.kernel_of_call(bound))
            self.kernel = k
            self._free = weakref.finalize(self, _release, k)
            self._free.atexit = False
        return _Target(k, bound)

    def close(self) -> None:
        free = getattr(self, "_free", None)
        if free is not None:
            free()
