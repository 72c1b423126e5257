"""A batch of any shape for a field without a ``grid`` statement: one reshape around a call.

Such a field's grid is the implicit ``grid i < N``, so its trajectories have no shape
of their own: a call may pass ``h0`` of shape ``batch + (n_free,)`` (``batch`` alone,
or ``batch + (1,)``, for one free state) and per-trajectory params of shape ``batch``
(a meshgrid of a sweep, say). Every per-trajectory array has the one batch shape; a
number, or ``h0`` of shape ``(n_free,)``, is the same for every trajectory. Arrays of
other shapes are not broadcast against each other (a column of N values beside a row
of M would silently make N x M trajectories): a ShapeError names them. ``flatten``
makes them 1-D, the grid every backend runs; ``unflatten`` gives the Solution's
per-trajectory arrays the batch's shape. The program sees the flat batch: ``i`` is a
trajectory's row-major index and ``N`` the number of trajectories.

A call whose arrays are already one 1-D shape (the usual call) passes through
untouched, and so does every call of a field with a ``grid`` statement.
"""
from __future__ import annotations

import math

import numpy as np

from .. import spelling as S
from ..errors import ShapeError
from ..ir.nodes import Field
from . import labelled
from .bound import Solution


def flatten(field: Field, h0, params) -> tuple[object, object, tuple | None]:
    """``(h0, params, batch)``: the arrays as a 1-D grid, and the batch's shape to give
    back the results (None: the call is left as it was, for bind to check)."""
    if not field.implicit_grid:
        return h0, params, None
    n_free = len(field.free_states)
    shapes: list[tuple] = []        # (param name, or h0's shape for h0; its batch shape)
    if h0 is not None:
        if n_free == 0:
            return h0, params, None                 # bind says h0 is not wanted
        a = _array(h0)
        if a is None:
            return h0, params, None
        if n_free > 1:
            if a.ndim == 0 or a.shape[-1] != n_free:
                return h0, params, None             # bind names the shape it wants
            shapes.append((a.shape, a.shape[:-1]))
        else:       # one free state: a trailing axis of length 1 is the state's
            shapes.append((a.shape, a.shape[:-1] if a.ndim > 1 and a.shape[-1] == 1
                           else a.shape))
        h0 = a
    arrays = {}
    if type(params) is dict:
        for name, v in params.items():
            if type(v) is float or type(v) is int:
                continue
            a = _array(v)
            if a is None:
                return h0, params, None
            if a.ndim:
                arrays[name] = a
                shapes.append((name, a.shape))
    if not shapes:
        return h0, params, None
    first = shapes[0][1]
    if len(first) == 1 and all(s == first for _, s in shapes):
        return h0, params, None                     # one 1-D shape: the grid as it is
    batch = _batch(field, shapes, h0 is not None, n_free)
    if batch is None:
        return h0, params, None                     # 1-D lengths that differ: bind's words
    count = math.prod(batch)
    if h0 is not None:
        state = h0.reshape(shapes[0][1] + (n_free,))
        h0 = np.broadcast_to(state, batch + (n_free,)).reshape(count, n_free)
    if arrays:
        params = dict(params)
        for name, a in arrays.items():
            params[name] = np.broadcast_to(a, batch).reshape(count)
    return h0, params, tuple(batch)


def _batch(field: Field, shapes: list, has_h0: bool, n_free: int) -> tuple | None:
    """The one batch shape of the call: every per-trajectory param's, and h0's unless it
    is one start for all (shape ``(n_free,)``); None for 1-D shapes that differ."""
    params = shapes[1:] if has_h0 else shapes
    batch = params[0][1] if params else shapes[0][1]
    one_start = has_h0 and (shapes[0][1] == () or (n_free == 1 and shapes[0][1] == (1,)))
    if one_start and params:
        shapes = params                 # h0 of shape (n_free,): every trajectory's start
    if all(s == batch for _, s in shapes):
        return batch
    if all(len(s) == 1 for _, s in shapes):
        return None
    listed = ", ".join(f"{_what(what)}: batch {s}" for what, s in shapes)
    raise ShapeError(f"the per-trajectory arrays of field {field.name} have different batch "
                     f"shapes: {listed}; {_rule(n_free)}")


def require_flat(field: Field, h0, params, where: str) -> None:
    """A ShapeError for a batch of other than one axis where only the 1-D grid runs
    (``where``: a call on a Dask cluster); h0 and params may be dask arrays."""
    if not field.implicit_grid:
        return
    n_free = len(field.free_states)
    ranks = []
    if h0 is not None and n_free:
        shape = np.shape(h0)
        ranks.append(len(shape) - (1 if n_free > 1 or (len(shape) > 1 and shape[-1] == 1)
                                   else 0))
    ranks += [len(np.shape(v)) for v in (params or {}).values() if np.ndim(v)]
    if any(r != 1 for r in ranks):
        state = "" if n_free == 1 else f", {n_free}"
        raise ShapeError(f"{where} runs a batch of one axis: reshape {S.name('h0')} to "
                         f"(-1{state}) and the per-trajectory params to (-1,), and the "
                         f"results back")


def _what(what) -> str:
    return f"param {what}" if isinstance(what, str) else f"{S.name('h0')} {what}"


def _array(value) -> np.ndarray | None:
    """``value`` as an array, or None when numpy cannot read it as one (bind then says
    what is wrong with it)."""
    if type(value) is np.ndarray:
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        return None


def _rule(n_free: int) -> str:
    state = "batch" if n_free == 1 else f"batch + ({n_free},)"
    return (f"{S.name('h0')} has shape {state} (or ({n_free},): one start for every "
            f"trajectory) and each per-trajectory param shape batch (a number is the same "
            f"for every trajectory)")


def unflatten(sol: Solution, batch: tuple) -> Solution:
    """Give the Solution's per-trajectory arrays (grid shape first) the batch's shape."""
    def shaped(a):
        return None if a is None else a.reshape(batch + a.shape[1:])
    sol.states = shaped(sol.states)
    sol.steps_taken = shaped(sol.steps_taken)
    sol.status = shaped(sol.status)
    sol.t = shaped(sol.t)
    sol.steps_rejected = shaped(sol.steps_rejected)
    sol.event_counts = shaped(sol.event_counts)
    sol.sensitivities = shaped(sol.sensitivities)
    sol.observed = {k: shaped(v) for k, v in (sol.observed or {}).items()}
    for name in ("history", "history_sensitivities"):   # (n_saved,) + grid + ...
        h = getattr(sol, name)
        if h is not None:
            setattr(sol, name, h.reshape(h.shape[:1] + batch + h.shape[2:]))
    if sol.labels is not None:          # to_xarray's dims: i (one axis) or i_0, i_1, ...
        sol.labels = labelled.reshaped(sol.labels, batch)
    return sol
