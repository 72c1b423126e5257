"""The cpu backend's Simulation session of an adaptive method (call/session.py).

The adaptive C kernel's buffers (templates/adaptive.c.j2; numpy arrays: the states,
``b_ad`` with each trajectory's t, step size and FSAL derivative, ``b_cnt`` with its
counters) stay alive between calls. ``advance_to(u)`` calls the kernel, as
adaptive_run.py does, with ``u_pause = u`` and the one save time ``u``: a trajectory
attempts while its t < u; an accepted step that ends after u writes the state at u from
its continuous extension (``b_hist``, as save_at does) and is not kept (status
``PAUSED``, running again at the next call), so the next advance takes the same step
again and the steps are those of one run (numpy's adaptive_session.py does the same).
A field with observers ``first`` runs the events' kernel (a Simulation takes no
``when``), which puts that step off the same way: its crossings are located when the
next advance keeps it, as numpy's are (codegen/build/adaptive.py's step_end; C:
templates/adaptive.c.j2).
The first call of an advance has ``u_step0 = 2``: the save index starts again.
"""
from __future__ import annotations

import numpy as np

from ...call.session import Snapshot, pack_states
from ...errors import BackendError
from ..shader import adaptive_host as host
from ..shader.adaptive import PAUSED, RUNNING
from .adaptive_run import AdaptiveCall, attempts_per_call
from .dispatch import _kernel
from .runner import _is_int


class AdaptiveSession:
    def __init__(self, prepared, data):
        t = prepared.template
        if t.save_at is not None:
            raise BackendError("a Simulation takes no save_at (advance(until=...) reads "
                               "the states at any time)")
        bound = prepared.bound(data)
        k = _kernel(prepared, bound, dense=True)
        self.run = run = AdaptiveCall(k, bound)
        self.dtype = bound.dtype
        meta = k.meta
        floats = [u for u in meta["uniforms"] if not _is_int(u, meta)]
        self._pause = next(i for i, u in enumerate(floats) if u["role"] == "pause")
        roles = [b["role"] for b in meta["buffers"]]
        self.save = run.buffers[roles.index("save")]
        self.init = run.buffers[roles.index("init")] if "init" in roles else None
        self.attempts = attempts_per_call(bound.field, run.nslots)
        self.until = self.dtype.type(bound.t0)
        self.flux_lost = False
        run._call(0, 0, False, attempts=0, nsave=1)     # the start: F there, the first step

    # --- running -------------------------------------------------------------------------
    def advance_to(self, until: float) -> None:
        run, u = self.run, self.dtype.type(until)
        run.floats[self._pause] = float(u)
        self.save[0] = u
        step0 = 2
        while True:
            run._call(step0, 0, False, attempts=self.attempts, nsave=1)
            step0 = 1
            if not (run.cnt[2] == RUNNING).any():
                break
        self.until = u

    # --- reading -------------------------------------------------------------------------
    def _running(self) -> np.ndarray:
        s = self.run.cnt[2]
        return (s == RUNNING) | (s == PAUSED)

    def _at(self) -> np.ndarray:
        """The states at ``until``: the covering step's value where a running trajectory
        is still before it, else the state held."""
        run = self.run
        inside = self._running() & (run.ad[0] < self.until)
        return host.states_at(inside, run.hist[0], run.state, run.bound.field)

    def _grid(self, a) -> np.ndarray:
        return np.asarray(a).reshape(self.run.bound.grid_shape).copy()

    def states(self) -> np.ndarray:
        return pack_states(self._at(), self.run.bound.grid_shape)

    def times(self) -> np.ndarray:
        t = np.where(self._running(), self.until, self.run.ad[0]).astype(self.dtype)
        return self._grid(t)

    def status_codes(self) -> np.ndarray:
        return self._grid(np.where(self._running(), 0, self.run.cnt[2]).astype(np.int8))

    def steps_taken(self) -> np.ndarray:
        return self._grid(self.run.cnt[0])

    def steps_rejected(self) -> np.ndarray:
        return self._grid(self.run.cnt[1])

    def outputs(self) -> dict | None:
        """The flux, deposited as each trajectory ends: None while some still run."""
        if self._running().any() or self.flux_lost:
            return None
        return self.run._outputs()

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self, step: int) -> Snapshot:
        run = self.run
        init = self.init if self.init is not None else run.state
        return host.controller_snapshot(step, run.state, init, run.ad, run.cnt, self._at(),
                                        self.until, self._running(), self.dtype)

    def restore(self, snap: Snapshot) -> None:
        ctl, run = snap.controller, self.run
        run.ad[:], run.cnt[:] = host.controller_buffers(snap, run.cnt.shape[1], self.dtype)
        run.state[:] = snap.state
        if self.init is not None:
            self.init[:] = snap.init
        running = np.asarray(ctl["running"], bool)
        run.hist[0] = ctl["at"]
        self.until = self.dtype.type(ctl["until"])
        # flux of trajectories that ended before the checkpoint: in the saved session's
        # deposit slots, not in these
        self.flux_lost = not running.all()

    def close(self) -> None:
        pass
