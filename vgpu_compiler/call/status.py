"""Every Solution's per-trajectory status (ir/controller.py's codes) and its one warning.

Fixed-step runs without events end with status 0 at ``t0 + steps_taken * dt`` and
reject no step: their backends leave ``status``, ``t``, ``steps_rejected`` (and
``event_counts`` when the field has no event) to ``complete_status``.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import StatusWarning
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
