"""Which Simulation session a compiled backend opens (``open_session``), and the host
half of a fixed-step one (``HostRun``), written once for glsl, wgpu and cpu: the run's
arrays on the host, their steps taken, checkpoints and restores.

A backend's session gives ``_arrays()``: (state (n_states, N), the start values
(n_states, N) or None, a collapse's counters (2, N): steps taken and done, or None),
the host's arrays of the run, brought up to the device's by ``_sync()`` (a device that
holds the run reads them back; nothing on cpu, whose kernel works on them); and
``_restored()``: the device needs them from the host before its next dispatch. ``step``
is the steps the run has taken, ``bound`` the call (its grid shape).
"""
from __future__ import annotations

import importlib

import numpy as np

from ..call.session import Snapshot
from ..ir.observers import firsts

# the class of each kind, "module.Class" in a backend's package (every compiled one's names)
SESSIONS = {"adaptive": "adaptive_session.AdaptiveSession", "located": "session.LocatedSession",
            "fixed": "session.Session"}


def open_session(package: str, prepared, data, sessions: dict = SESSIONS):
    """The Simulation session of ``prepared``, its kind decided here: "adaptive" (an
    adaptive method's controller in the kernel's buffers: runtime/adaptive_session.py,
    a field's ``first`` in its events' kernel), "located" (a fixed-step method
    of a field with ``first``: runtime/located.py's rule) or "fixed". ``sessions``:
    the backend's class of each kind, "module.Class" in ``package`` (imported when
    wanted: opening a session never loads another kind's device code; SESSIONS names
    glsl's, wgpu's and cpu's)."""
    t = prepared.template
    if t.adaptive is not None:
        kind = "adaptive"
    else:
        kind = "located" if firsts(t.field) else "fixed"
    module, cls = sessions[kind].rsplit(".", 1)
    return getattr(importlib.import_module(f"{package}.{module}"), cls)(prepared, data)


class HostRun:
    """See the module."""

    def _arrays(self) -> tuple:
        raise NotImplementedError

    def _sync(self) -> None:
        pass

    def _restored(self) -> None:
        pass

    def steps_taken(self) -> np.ndarray:
        grid = self.bound.grid_shape
        if self._arrays()[2] is None:
            return np.full(grid, self.step, np.int32)
        self._sync()
        return self._arrays()[2][0].reshape(grid).copy()

    def snapshot(self, step: int) -> Snapshot:
        self._sync()
        state, init, steps2 = self._arrays()
        state = state.copy()
        init = init.copy() if init is not None else state.copy()
        if steps2 is not None:
            taken, done = steps2[0].copy(), steps2[1] != 0
        else:
            n = state.shape[1]
            taken, done = np.full(n, step, np.int32), np.zeros(n, bool)
        return Snapshot(step, state, init, taken, done)

    def restore(self, snap: Snapshot) -> None:
        state, init, steps2 = self._arrays()
        state[:] = snap.state
        if init is not None:
            init[:] = snap.init
        if steps2 is not None:
            steps2[0], steps2[1] = snap.taken, snap.done
        self.step = snap.step
        self._restored()
