"""``solve(..., sensitivities=NAMES)``: the call runs the joined field (ir/sensitivity.py)
on any backend, and its Solution is split here into the states and their derivatives.

The joined field's states are the field's own (n), then ``S[i][j] = dh_i/dp_j`` by
columns (name j's n states after name j-1's), so a state vector of n * (1 + p) values splits into ``states`` (as the call
without sensitivities gives them: the state axis dropped for a one-state field) and
``sensitivities`` with the axes ``(n, p)`` (kept for a one-state field).
"""
from __future__ import annotations

import numpy as np

from ..ir.sensitivity import Joined
from .bound import Solution


def split(sol: Solution, joined: Joined) -> Solution:
    """``sol`` of the joined field -> the Solution of the field, with its sensitivities."""
    n, p = joined.n_states, len(joined.names)

    def parts(a: np.ndarray):
        own = a[..., :n]
        if n == 1:
            own = own[..., 0]
        sens = np.swapaxes(a[..., n:n + n * p].reshape(a.shape[:-1] + (p, n)), -1, -2)
        # (states past these: the last event's tau_p and time, the joined field's own)
        return np.ascontiguousarray(own), np.ascontiguousarray(sens)

    sol.states, sol.sensitivities = parts(np.asarray(sol.states))
    if sol.history is not None:
        sol.history, sol.history_sensitivities = parts(np.asarray(sol.history))
    if sol.event_counts is not None:    # the blocks made for `stop when`s are not counted
        sol.event_counts = np.ascontiguousarray(sol.event_counts[..., :joined.base.n_when])
    sol.sensitivity_names = joined.texts
    return sol
