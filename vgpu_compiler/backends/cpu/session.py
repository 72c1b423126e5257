"""The cpu backend's Simulation sessions (call/session.py): the run's buffers (numpy
arrays the C kernel works on) stay alive between calls.

A fixed-step method's ``Session`` is runtime/fixed_session.py's, on the cpu's Target
(target.py: the C library on a ``_Call``'s arrays): an advance of steps ``[step0,
step0 + nsteps)`` is its C calls of at most ``runner.WORK_PER_CALL`` lane-steps each.

A field with an observer ``first`` runs, as dispatch.run runs it, the events' kernel
(templates/events.c.j2, its buffers AdaptiveCall's): ``LocatedSession``, runtime/
located.py's rule. An advance sets its step count ``u_steps`` to ``step0 + nsteps`` and
its first call (``u_step0 = 2``, templates/adaptive.c.j2) lets the trajectories that
ended at ``step0`` run on (status running again; one already at ``u_steps``, or whose
basin collapsed, ends at once with its flux on the state), F at the state carried in
``b_ad``. Where F is not carried (set_state, set_params, set_input, another backend's
checkpoint) the session goes on with the kernel that computes each step's stage 0 at
the step's start (``kernel.plan``'s ``fresh``)."""
from __future__ import annotations

import numpy as np

from ...call.session import Snapshot
from ...runtime.fixed_session import FixedSession
from ...runtime.located import Located
from ...call.interrupt import held
from ...ir import controller as C
from ..shader.adaptive import RUNNING
from .adaptive_run import AdaptiveCall, attempts_per_call
from .dispatch import _kernel
from .runner import _Call
from .target import Target


class Session(FixedSession):
    def __init__(self, prepared, data):
        bound = prepared.bound(data)
        call = _Call(_kernel(prepared, bound, dense=False), bound)
        super().__init__(Target(call, call.per_call()), bound)

    def close(self) -> None:
        pass


def _set_input(run: _Call, name: str, array: np.ndarray) -> None:
    new = np.array(array, run.bound.dtype, order="C")     # (never the caller's array)
    for i, b in enumerate(run.k.meta["buffers"]):
        if b["role"] == "input" and b["array"] == name:
            run.buffers[i] = new
            run.ptrs[i] = new.ctypes.data
    run.bound.inputs[name] = new


class LocatedSession(Located):
    """A fixed-step Simulation of a field with an observer ``first``: runtime/located.py's
    rule over the events' kernel's arrays (AdaptiveCall), its trajectories resumed at each
    advance (the module's docstring)."""

    def __init__(self, prepared, data):
        self.fresh_kernel = False   # the kernel that computes each step's stage 0 (below)
        self.prepared = prepared
        self._open(data)
        self.held = True            # (host arrays: readable from the start)

    @property
    def bound(self):
        return self.run.bound

    def states(self) -> np.ndarray:
        return self.run._pack()

    def close(self) -> None:
        pass

    def _open(self, data) -> None:
        self.data = data
        bound = self.prepared.bound(data)
        # solve's kernel, or the one that needs no slope
        k = _kernel(self.prepared, bound, dense=True, fresh=self.fresh_kernel)
        self.run = run = AdaptiveCall(k, bound)
        roles = [b["role"] for b in k.meta["buffers"]]
        self.init = run.buffers[roles.index("init")] if "init" in roles else None
        self.attempts = attempts_per_call(bound.field, run.nslots)

    def _fresh_kernel(self) -> None:
        if not self.fresh_kernel:
            self.fresh_kernel = True
            self._open(self.data)

    def _input(self, name: str, array: np.ndarray) -> None:
        self._fresh_kernel()            # (F at the state: of the old input)
        _set_input(self.run, name, array)

    def _carries(self) -> bool:
        return not self.fresh_kernel

    def _run(self, step0: int, total: int) -> None:
        """From the start (step0 = 0: the start values made again, as every kernel's step
        0 makes them), or every trajectory resumed at step0 (the kernel's u_step0 = 2: on
        to ``total``; one already there, or whose basin collapsed, ends at once with its
        flux on the state)."""
        run = self.run
        run.ints[run.role["steps"]] = total
        start = 2 if step0 else 0
        while True:
            with held():
                run._call(start, 0, False, attempts=self.attempts)
            start = 1
            if not (run.cnt[2] == RUNNING).any():
                break

    def outputs(self) -> dict:
        return self.run._outputs()

    def _counts(self):
        return self.run.cnt[0], self.run.ad[1] == 0

    def _read(self):
        """The state, start values and F at it (b_ad's k0: the next step's stage 0)."""
        return self.run.state, self.init, self.run.ad[2:]

    def _write(self, snap: Snapshot) -> None:
        """The arrays of a run that ended at ``snap.step``: its state, start values, t,
        step count; no event in the step (no `when`: no conditions carried). Without a
        slope the session goes on with the kernel that computes each step's stage 0 at
        its start (``fresh``: the same steps, to the rounding of a function the compiler
        vectorises another way)."""
        if snap.slope is None:
            self._fresh_kernel()
        run = self.run
        run.state[:] = snap.state
        if self.init is not None:
            self.init[:] = snap.init
        run.ad[:] = 0
        if snap.slope is not None and not self.fresh_kernel:
            run.ad[2:] = snap.slope
        taken = snap.taken if run.bound.field.collapse is not None else snap.step
        run.ad[0], run.ad[1] = self.times(np.broadcast_to(taken, run.n), snap.done)
        run.cnt[:] = 0
        run.cnt[0] = taken
        run.cnt[2] = C.REACHED_END
        run.evi[:] = 0
        run.evf[:] = 0
