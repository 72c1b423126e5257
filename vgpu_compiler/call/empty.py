"""The Solution of an empty ensemble (a grid with no trajectory), made once for every
backend: there is nothing to dispatch, so the API answers such a call itself and no
backend needs a special case for it (or another backend to run it)."""
from __future__ import annotations

import numpy as np

from .bound import Bound, Progress, Solution, saved_steps


def is_empty(call) -> bool:
    """True when the call (a Bound or a Prepared) has no trajectory."""
    return 0 in call.grid_shape


def solution(bound: Bound, progress: Progress = None) -> Solution:
    """Empty states, steps taken and history; every output zero (no trajectory
    deposits into it); the times of the steps a history would keep."""
    n_states = len(bound.field.states)
    shape = bound.grid_shape + (() if n_states == 1 else (n_states,))
    sol = Solution(states=np.zeros(shape, bound.dtype),
                   outputs={k: np.zeros(s, bound.dtype) for k, s in bound.output_shapes.items()},
                   steps_taken=np.zeros(bound.grid_shape, np.int32),
                   state_names=bound.field.state_names)
    if bound.save_every:
        saved = saved_steps(bound.steps, bound.save_every)
        sol.history = np.zeros((len(saved),) + shape, bound.dtype)
        sol.times = (bound.t0 + np.asarray(saved).astype(bound.dtype) * bound.dt
                     ).astype(bound.dtype)
    if bound.save_at is not None:
        sol.history = np.zeros((len(bound.save_at),) + shape, bound.dtype)
        sol.times = bound.save_at.astype(bound.dtype)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol

