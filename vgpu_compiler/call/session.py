"""What a backend's Simulation session is (``Backend.open``), and its Snapshot.

A Simulation (persistent/simulation.py) keeps a fixed-step run alive between calls: the
backend's session holds the state where the backend keeps it (numpy arrays for
the reference; buffers on the device for compiled backends) and runs further
steps on request. A session of a call's ``(prepared, data)`` has:

- ``advance(step0, nsteps)``: run steps ``[step0, step0 + nsteps)`` exactly as
  one run of ``step0 + nsteps`` steps runs them (``t_n = t0 + n * dt``, ``step``
  and the noise counter count from the run's start), then deposit flux on the
  state reached (outputs are those of a run that ended there);
- ``states()``, ``steps_taken()``, ``outputs()``: read back (grid shapes);
- ``snapshot(step)`` -> Snapshot and ``restore(snapshot)``: the whole run's state in
  one backend-neutral form (a checkpoint; set_state; a new signature);
- ``set_data(data)``: new param values of the same signature (scalars, per-trajectory
  arrays), in force from the next step;
- ``close()``: give back what the session holds (device buffers).
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

    def arrays(self, prefix: str = "") -> dict:
        return {prefix + "step": np.int64(self.step), prefix + "state": self.state,
                prefix + "init": self.init, prefix + "taken": self.taken,
                prefix + "done": self.done}

    @classmethod
    def of(cls, arrays, prefix: str = "") -> "Snapshot":
        return cls(int(arrays[prefix + "step"]), np.asarray(arrays[prefix + "state"]),
                   np.asarray(arrays[prefix + "init"]), np.asarray(arrays[prefix + "taken"]),
                   np.asarray(arrays[prefix + "done"]).astype(bool))


def pack_states(state: np.ndarray, grid: tuple) -> np.ndarray:
    """(n_states, N) -> grid (+ (n_states,)), a new array."""
    if len(state) == 1:
        return np.array(state[0]).reshape(grid)
    return np.ascontiguousarray(np.asarray(state).T).reshape(grid + (len(state),))
