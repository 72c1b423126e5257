"""The wgpu backend's fixed-step Simulation session: runtime/fixed_session.py's driver on a
private copy of the field's kernel (the same pipeline, buffers of its own) through
``_Target`` (runner.Target: a dispatch and its read-backs one command buffer and one
mapping), under the runner's lock; chunks are the kernel's plan (shader/plan.py)."""
from __future__ import annotations


from ...errors import BackendError
from ...runtime.fixed_session import FixedSession
from ..shader import located as _located
from .runner import Target, _lock, _uniform_values, fixed_target, kernel_for, need


class _Target(Target):
    """runner.Target for a session: a chunk's begin writes the session's writes only (its
    buffers hold the run; the outputs are among them)."""

    _start = staticmethod(_uniform_values)      # (the session writes the inputs)

    def __init__(self, kernel, bound):
        super().__init__(kernel, bound)
        self.inputs = [(b["name"], b["array"]) for b in kernel.meta["buffers"]
                       if b["role"] == "input"]

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        self._place(ci)
        self._made({**sizes, "b_err": 16}, writes)


class Session(FixedSession):
    def __init__(self, prepared, data):
        t = prepared.template
        if t.adaptive is not None or t.save_at is not None:
            raise BackendError("a Simulation on wgpu runs fixed-step methods only so far")
        bound = prepared.bound(data)
        need(bound)
        self.kernel = k = kernel_for(bound).private()
        super().__init__(fixed_target(k, bound, _Target), bound, _lock)

    def close(self) -> None:
        self.kernel.buffers.clear()
        self.kernel.group = None


class LocatedSession(_located.LocatedSession):
    """A fixed-step Simulation of a field with an observer ``first`` (shader/located.py)
    on a private copy of the events' kernel, through adaptive_run's Target."""

    name = "wgpu"

    def _target(self, bound):
        from .adaptive_run import _Target
        need(bound)
        k = getattr(self, "kernel", None)
        if k is None:
            k = self.kernel = kernel_for(bound).private()
        return _Target(k, bound)

    def _lock(self):
        return _lock

    def close(self) -> None:
        k = getattr(self, "kernel", None)
        if k is not None:
            k.buffers.clear()
            k.group = None
