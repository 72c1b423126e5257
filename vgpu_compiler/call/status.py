"""Every Solution's per-trajectory status (ir/controller.py's codes) and its one warning.

Fixed-step runs without events end with status 0 at ``t0 + steps_taken * dt`` and
reject no step: their backends leave ``status``, ``t``, ``steps_rejected`` (and
``event_counts`` when the field has no event) to ``complete_status``.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..errors import NonFiniteWarning, StatusWarning
from ..ir import controller as C
from .bound import Bound, Solution

_WHY = {C.MAX_STEPS: "reached max_steps", C.STEP_UNDERFLOW: "had a step size underflow",
        C.TOO_MANY_EVENTS: "had too many events in one step"}


def complete_status(sol: Solution, bound: Bound) -> Solution:
    """Fill the fields a fixed-step backend leaves out."""
    shape = bound.grid_shape
    if sol.status is None:
        sol.status = np.zeros(shape, np.int8)
    if sol.steps_rejected is None:
        sol.steps_rejected = np.zeros(shape, np.int32)
    if sol.event_counts is None:       # (a field without events: a last axis of 0)
        sol.event_counts = np.zeros(shape + (bound.field.n_when,), np.int32)
    if sol.t is None:
        taken = np.asarray(sol.steps_taken).astype(bound.dtype)
        sol.t = (bound.dtype.type(bound.t0) + taken * bound.dtype.type(bound.dt)
                 ).astype(bound.dtype)
    return sol


def warn_status(sol: Solution, grid_shape: tuple[int, ...]) -> None:
    """One warning counting the trajectories that ended with status 2-4."""
    status = np.asarray(sol.status)
    if status.size == 0 or not (status >= C.MAX_STEPS).any():
        return
    parts = [f"{int((status == code).sum())} {why}" for code, why in _WHY.items()
             if (status == code).any()]
    bad = int((status >= C.MAX_STEPS).sum())
    warnings.warn(f"{bad} of {status.size} trajectories ended early ({', '.join(parts)}); "
                  f"each keeps its last accepted state, see Solution.status and .t",
                  StatusWarning, stacklevel=4)


# A small state array's sum is its dot with ones (BLAS: 0.4 us for 256 float32, numpy's
# add.reduce 0.8-1.2 us): the ones of the last size and dtype, for SMALL values at most
SMALL = 1 << 14
_ones = np.ones(0)


def warn_nonfinite(states, grid_shape: tuple[int, ...], stacklevel: int) -> None:
    """One warning counting the trajectories whose final state is NaN or infinite
    (``stacklevel`` as warnings.warn takes it here: 1 is this function)."""
    global _ones
    if type(states) is not np.ndarray:
        states = np.asarray(states)
    # The usual case, cheaply: a NaN or inf makes the sum one (an overflow of finite
    # values too, which the exact check below then clears).
    if states.dtype.kind == "f":
        flat, ones = states.reshape(-1), _ones
        if ones.size != flat.size or ones.dtype is not flat.dtype:
            ones = None if flat.size > SMALL else np.ones(flat.size, flat.dtype)
            if ones is not None:
                _ones = ones
        if math.isfinite(np.add.reduce(flat) if ones is None else flat.dot(ones)):
            return
    bad = ~np.isfinite(states)
    if states.ndim > len(grid_shape):
        bad = bad.any(axis=-1)
    count = int(bad.sum())
    if count:
        total = int(np.prod(grid_shape))
        warnings.warn(f"{count} of {total} trajectories became NaN or infinite",
                      NonFiniteWarning, stacklevel=stacklevel)
