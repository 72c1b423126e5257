"""What a backend's Simulation session is (``Backend.open``), and its Snapshot.

A Simulation (persistent/simulation.py) keeps a fixed-step run alive between calls: the
backend's session holds the state where the backend keeps it (numpy arrays for
the reference; buffers on the device for compiled backends) and runs further
steps on request. A session of a call's ``(prepared, data)`` has:

- ``advance(step0, nsteps)``: run steps ``[step0, step0 + nsteps)`` exactly as
  one run of ``step0 + nsteps`` steps runs them (``t_n = t0 + n * dt``, ``step``
  and the noise counter count from the run's start), then deposit flux on the
  state reached (outputs are those of a run that ended there). ``step`` is the steps
  its state has run: each dispatch is counted with it (call/interrupt.py's
  ``held``), so an advance interrupted part way leaves the count of what ran (or,
  where the session went back to the state before the advance, that one's);
- ``states()``, ``steps_taken()``, ``outputs()``: read back (grid shapes);
- ``snapshot(step)`` -> Snapshot and ``restore(snapshot)``: the whole run's state in
  one backend-neutral form (a checkpoint; set_state; a new signature);
- ``set_data(data)``: new param values of the same signature (scalars, per-trajectory
  arrays), in force from the next step;
- ``close()``: give back what the session holds (device buffers).

An adaptive method's session (``prepared.template.adaptive``) has instead of
``advance``, ``set_data`` and ``set_input``: ``advance_to(until)``, which runs each
trajectory's steps of one solve to t1 until a step's end reaches or passes ``until``
(the state there from the step's continuous extension, as ``save_at`` computes it;
the step itself is not cut and is not yet kept), and ``times()``, ``status()``,
``steps_rejected()`` beside ``states()``, ``steps_taken()``, ``outputs()``; its
Snapshot carries the controller (``ADAPTIVE``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Snapshot:
    """A fixed-step run after ``step`` steps, every array in grid (row-major) order."""

    step: int
    state: np.ndarray           # (n_states, N) every state, in declaration order
    init: np.ndarray            # (n_states, N) the start values (what init(x) reads)
    taken: np.ndarray           # (N,) int32 steps each trajectory's basin took (collapse)
    done: np.ndarray            # (N,) bool: its basin collapsed
    # an adaptive method's controller, per trajectory (ADAPTIVE's keys); None: fixed steps
    controller: dict | None = None
    # (n_states, N) F at the state, where a fixed-step session carries it to the next
    # step (cpu's LocatedSession); None: the next step computes it (any other session
    # ignores it; a change of the state, params or inputs drops it)
    slope: np.ndarray | None = None

    def arrays(self, prefix: str = "") -> dict:
        out = {prefix + "step": np.int64(self.step), prefix + "state": self.state,
               prefix + "init": self.init, prefix + "taken": self.taken,
               prefix + "done": self.done}
        if self.slope is not None:
            out[prefix + "slope"] = self.slope
        for k, v in (self.controller or {}).items():
            out[prefix + "ad:" + k] = np.asarray(v)
        return out

    @classmethod
    def of(cls, arrays, prefix: str = "") -> "Snapshot":
        names = getattr(arrays, "files", None) or list(arrays)
        ad = {k[len(prefix) + 3:]: np.asarray(arrays[k]) for k in names
              if k.startswith(prefix + "ad:")}
        slope = np.asarray(arrays[prefix + "slope"]) if prefix + "slope" in names else None
        return cls(int(arrays[prefix + "step"]), np.asarray(arrays[prefix + "state"]),
                   np.asarray(arrays[prefix + "init"]), np.asarray(arrays[prefix + "taken"]),
                   np.asarray(arrays[prefix + "done"]).astype(bool), ad or None, slope)


# An adaptive run's controller in a Snapshot, every array in grid order (N = trajectories;
# a basin's values repeated on each of its trajectories). ``state`` holds the integrator's
# state at ``t`` (t <= until: the step that covers ``until`` is taken again, with the same
# result, by the next advance), ``at`` the states at ``until``.
ADAPTIVE = {
    "until": "() the time the last advance reached",
    "t": "(N,) the time of the state held",
    "dt": "(N,) the next attempt's step size",
    "k0": "(n_states, N) F at (t, state): the FSAL derivative",
    "at": "(n_states, N) the states at until (the continuous extension)",
    "taken": "(N,) int32 steps accepted",
    "rejected": "(N,) int32 steps rejected",
    "status": "(N,) int8 the Solution's status (0 while running)",
    "again": "(N,) bool: the last attempt was rejected",
    "running": "(N,) bool: still stepping",
}


def pack_states(state: np.ndarray, grid: tuple) -> np.ndarray:
    """(n_states, N) -> grid (+ (n_states,)), a new array."""
    if len(state) == 1:
        return np.array(state[0]).reshape(grid)
    state = np.asarray(state)
    if len(state) > 64:
        return np.ascontiguousarray(state.T).reshape(grid + (len(state),))
    # row by row into the transposed layout: numpy's copy of state.T runs an inner loop
    # of len(state) elements (262,144 x 3 float32: 0.67 -> 0.22 ms)
    out = np.empty((state.shape[1], len(state)), state.dtype)
    for i, row in enumerate(state):
        out[:, i] = row
    return out.reshape(grid + (len(state),))
