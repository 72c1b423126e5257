"""The cpu backend's Simulation session (call/session.py): the run's buffers (numpy
arrays the C kernel works on) stay alive between calls; an ``advance`` calls the
kernel on steps ``[step0, step0 + nsteps)``, as runner.py's segments do."""
from __future__ import annotations

import numpy as np

from ...call.session import Snapshot
from ...call.counters import COUNTERS
from ...call.interrupt import held
from ...errors import BackendError
from ...ir import observers as _observers
from .kernel import kernel
from .runner import WORK_PER_CALL, _Call


class Session:
    def __init__(self, prepared, data):
        t = prepared.template
        if t.adaptive is not None or t.save_at is not None:
            raise BackendError("a Simulation on cpu runs fixed-step methods only so far")
        if t.field.events:
            raise BackendError("a Simulation on cpu has no events (`when`, `stop when`) yet; "
                               "vgpu.solve(..., backend='cpu') runs them")
        if _observers.firsts(t.field):
            raise BackendError("a Simulation on cpu does not compute the observer first yet "
                               "(vgpu.solve(..., backend='cpu') does); use backend='numpy'")
        self.prepared = prepared
        self._open(data)
        self.step = 0

    def _open(self, data) -> None:
        bound = self.prepared.bound(data)
        slot = self.prepared.slots.setdefault("cpu", {})
        key = (bound.dtype.name, bound.per_trajectory)
        k = slot.get(key)
        if k is None:
            k = slot[key] = kernel(bound.field, bound.dtype.name, bound.per_trajectory)
        else:
            COUNTERS.add("memory_hits")
        self.run = _Call(k, bound)
        roles = [b["role"] for b in k.meta["buffers"]]
        self.init = self.run.buffers[roles.index("init")] if "init" in roles else None

    def advance(self, step0: int, nsteps: int) -> None:
        """Steps [step0, step0 + nsteps), in calls of about WORK_PER_CALL; each call and
        its count are done whole (a Ctrl-C is held until the call ends): an interrupted
        advance leaves ``step`` at the steps the finished calls ran."""
        run, total = self.run, step0 + nsteps
        run.ints[run.role["steps"]] = total         # flux's step count: the run's so far
        chunk = max(1, WORK_PER_CALL // max(1, run.nslots))
        if nsteps == 0:
            with held():
                run._call(step0, 0, True)
                self.step = step0
        start = step0
        while start < total:
            end = min(total, start + chunk)
            with held():
                run._call(start, end - start, end == total)
                self.step = start = end

    def states(self) -> np.ndarray:
        return self.run._pack()

    def steps_taken(self) -> np.ndarray:
        grid = self.run.bound.grid_shape
        if self.run.steps_buf is None:
            return np.full(grid, self.step, np.int32)
        return self.run.steps_buf[:self.run.n].reshape(grid).copy()

    def outputs(self) -> dict:
        return self.run._outputs()

    def snapshot(self, step: int) -> Snapshot:
        run, n = self.run, self.run.n
        state = run.state.copy()
        init = self.init.copy() if self.init is not None else state.copy()
        if run.steps_buf is not None:
            taken, done = run.steps_buf[:n].copy(), run.steps_buf[n:2 * n] != 0
        else:
            taken, done = np.full(n, step, np.int32), np.zeros(n, bool)
        return Snapshot(step, state, init, taken, done)

    def restore(self, snap: Snapshot) -> None:
        run, n = self.run, self.run.n
        run.state[:] = snap.state
        if self.init is not None:
            self.init[:] = snap.init
        if run.steps_buf is not None:
            run.steps_buf[:n] = snap.taken
            run.steps_buf[n:2 * n] = snap.done
        self.step = snap.step

    def set_data(self, data) -> None:
        snap = self.snapshot(self.step)
        self._open(data)
        self.restore(snap)

    def set_input(self, name: str, array: np.ndarray) -> None:
        """A new value of input ``name`` (same shape), written into the kernel's buffer."""
        run = self.run
        new = np.array(array, run.bound.dtype, order="C")     # (never the caller's array)
        for i, b in enumerate(run.k.meta["buffers"]):
            if b["role"] == "input" and b["array"] == name:
                run.buffers[i] = new
                run.ptrs[i] = new.ctypes.data
        run.bound.inputs[name] = new

    def alias_input(self, name, source, output) -> bool:
        return False

    def close(self) -> None:
        pass
