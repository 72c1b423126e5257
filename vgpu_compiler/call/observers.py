"""``observe`` statements: the call runs the lowered field (ir/observers.py) on any
backend, and its Solution is split here into the field's states and ``observed``.

The lowered field's states are the field's own (with a joined field's sensitivities),
then one per observer in written order; ``average`` is that state divided by the
trajectory's own elapsed time ``sol.t - t0``.
"""
from __future__ import annotations

import numpy as np

from ..ir.observers import Lowered
from .bound import Solution


def split(sol: Solution, lowered: Lowered, t0, dtype, squeeze: bool = True) -> Solution:
    """``sol`` of the lowered field -> the Solution of the field, with ``observed``
    (``squeeze``: drop the state axis of a one-state field; not for a joined field,
    which call/sensitivities.py splits next)."""
    n = lowered.first_row
    states = np.asarray(sol.states)
    hidden = states[..., n:]
    own = states[..., :n]
    sol.states = np.ascontiguousarray(own[..., 0] if n == 1 and squeeze else own)
    if sol.history is not None:
        hist = np.asarray(sol.history)[..., :n]
        sol.history = np.ascontiguousarray(hist[..., 0] if n == 1 and squeeze else hist)
    dtype = np.dtype(dtype)
    observed = {}
    for k, (name, kind) in enumerate(zip(lowered.names, lowered.kinds)):
        value = np.array(hidden[..., k], dtype)
        if kind == "average":
            elapsed = np.asarray(sol.t, dtype) - dtype.type(t0)
            with np.errstate(all="ignore"):
                value = (value / elapsed).astype(dtype)
        observed[name] = value
    sol.observed = observed
    return sol
