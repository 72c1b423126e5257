"""The one rule of a fixed-step Simulation of a field with an observer ``first`` (cpu's,
glsl's and wgpu's ``LocatedSession``), over a small host interface each backend gives.

Such a field runs the events' kernel (the one ``vgpu.solve`` runs: a crossing located in
its step), and a session resumes it: an advance of steps ``[step0, step0 + nsteps)`` lets
every trajectory that ended at ``step0`` run on to ``step0 + nsteps`` (steps keep their
numbers, ``t_n = t0 + n * dt``), so the pieces take the steps of one run bit for bit.
The buffers carry F at the state (the next step's stage 0) from one advance to the next,
and a checkpoint carries it too (``Snapshot.slope``). A change of the state or of what F
reads (set_state, set_params, set_input, another backend's checkpoint: a snapshot without
a slope) leaves the session ``fresh``: the next advance computes F at the state first, as
a step's stage 0 is. An interrupted advance (its trajectories part way, at steps of
their own) goes back to the state before it.

In a basin with ``collapse when`` a collapsed basin ends (status reached end) at the
steps it took, and the kernel sets its step size to 0 (a fixed step's is otherwise dt):
an advance resumes only the trajectories whose step size is not 0 (the shaders' kernel
at its first dispatch, cpu's host), the others deposit their flux at the state, time and
steps of their collapse; a snapshot holds each one's steps and whether it collapsed
(``taken``, ``done``), and a restore writes them back.

A backend gives (its own host structures: cpu's arrays of the C call, the shaders'
runtime/adaptive.py ``Target``):

- ``_open(data)``: the buffers of the values ``data`` (at the session's start, set_data);
- ``_input(name, array)``: a new value of an input;
- ``_run(step0, total)``: run to step ``total`` (``step0 == 0``: from the start; else
  resumed, F computed first where ``self.fresh``), every call done whole (``held``);
- ``_read()`` -> ``(state, init or None, slope)`` on the host, ``(n_states, N)`` each;
- ``_counts()`` -> ``(taken, done)`` on the host, ``(N,)`` each: the steps each
  trajectory took and whether its basin collapsed (its step size 0);
- ``_write(snapshot)``: the buffers of a run that ended at ``snapshot.step`` (its slope,
  or none: the session is fresh);
- ``_carries()``: the buffers hold F after a run (cpu's kernel that computes each step's
  stage 0 at its start does not);
- ``bound`` (the call's values), ``states()``, ``outputs()``, ``close()``.
"""
from __future__ import annotations

import numpy as np

from ..call.session import Snapshot


class Located:
    """The session's rule (the module's docstring); ``held``: the buffers hold a state
    that can be read back (a snapshot to go back to if an advance is interrupted)."""

    fresh = False
    held = False
    step = 0

    def advance(self, step0: int, nsteps: int) -> None:
        total = step0 + nsteps
        before = self.snapshot(self.step) if self.held else None
        try:
            self._run(step0, total)
        except BaseException:
            if before is not None:
                self.restore(before)
            raise
        self.held, self.step, self.fresh = True, total, not self._carries()

    def snapshot(self, step: int) -> Snapshot:
        """The state, the start values, and F at the state unless the next advance
        computes it (``fresh``)."""
        state, init, slope = self._read()
        state = state.copy()
        init = init.copy() if init is not None else state.copy()
        taken, done = self._counts()
        return Snapshot(step, state, init, np.array(taken, np.int32), np.array(done, bool),
                        slope=None if self.fresh else slope.copy())

    def restore(self, snap: Snapshot) -> None:
        self.fresh = snap.slope is None
        self._write(snap)
        self.fresh = self.fresh or not self._carries()
        self.step = snap.step

    def _change(self, change) -> None:
        """``change()`` of what F at the state reads: the state kept, F computed again."""
        snap = self.snapshot(self.step)
        snap.slope = None
        change()
        self.restore(snap)

    def set_data(self, data) -> None:
        self._change(lambda: self._open(data))

    def set_input(self, name: str, array: np.ndarray) -> None:
        self._change(lambda: self._input(name, array))

    def steps_taken(self) -> np.ndarray:
        if self.bound.field.collapse is None:
            return np.full(self.bound.grid_shape, self.step, np.int32)
        return np.array(self._counts()[0], np.int32).reshape(self.bound.grid_shape)

    def times(self, taken: np.ndarray, done: np.ndarray):
        """Rows t and step size of a run's ``b_ad`` at these steps: ``t0 + taken * dt``
        (as the kernel computes a step's time), dt, or 0 where the basin collapsed."""
        dt, b = self.bound.dtype.type, self.bound
        t = dt(b.t0) + np.asarray(taken).astype(self.bound.dtype) * dt(b.dt)
        return t, np.where(done, dt(0), dt(b.dt)).astype(self.bound.dtype)

    def alias_input(self, name, source, output) -> bool:
        return False
