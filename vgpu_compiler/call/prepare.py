"""Bind once per call signature: a repeated call with new data skips the checks.

``bind`` checks a call against its field: names, shapes, dims, defaults, the
solve statement. None of that depends on the numbers in the arrays, only on
the call's *signature*: which names were given, the shapes and dtypes of the
arrays, and the scalars that the checks read. A call whose signature was bound
before reuses that Bound as a template and only converts its new arrays, the
"bind once, dispatch many" of the design.

``signature`` returns None for anything it does not describe exactly (lists,
0-d arrays, numpy scalars, a dims= mapping of odd types...): such a call is
simply bound in full, as before. Errors are never memoised: a call that raises
leaves nothing here.
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..ir.nodes import Field
from .bound import Bound
from .dims import free_params

CAPACITY = 256
_memo: OrderedDict = OrderedDict()
_lock = threading.Lock()
if hasattr(os, "register_at_fork"):     # a parent thread may hold it at the fork
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_lock", threading.Lock()))
_value_free: dict[int, tuple] = {}        # id(field) -> (field, True if no value is read)


def _reads_no_param_value(field: Field) -> bool:
    """True when no check or default reads a scalar param's value: then a call with new
    scalar values has the signature of the old one. (Defaults that name params, and
    dt/steps/t0 that name params, make the values part of the signature.)"""
    hit = _value_free.get(id(field))
    if hit is None or hit[0] is not field:
        exprs = [p.default for p in field.params if p.default is not None]
        exprs += [field.solver.dt, field.solver.steps, field.solver.t0]
        hit = (field, not any(free_params(e) for e in exprs if e is not None))
        if len(_value_free) > CAPACITY:
            _value_free.clear()
        _value_free[id(field)] = hit
    return hit[1]


# numpy converts Python ints in [-2**63, 2**64) to int64 / uint64, larger ones to object
# arrays, which bind rejects: such an int is described by no signature, so a call with it
# is bound (and refused) in full, every time.
_INT_LOW, _INT_HIGH = -2**63, 2**64


def _plain(v) -> bool:
    return v is None or _number(v)


def _number(v) -> bool:
    """A Python float, or an int that bind converts as a number."""
    return type(v) is float or (type(v) is int and _INT_LOW <= v < _INT_HIGH)


def _exact(v):
    """``v`` as a part of a signature: a float zero keeps its sign (-0.0 == 0.0, but a
    default ``1 / p`` or a ``t0`` of -0.0 gives another result than 0.0)."""
    return (v, math.copysign(1.0, v)) if type(v) is float and v == 0.0 else v


def signature(field: Field, h0, params, inputs, dims, dtype, dt, steps, t0,
              save_every) -> tuple | None:
    """A hashable description of everything bind reads, or None."""
    if not (_plain(dt) and _plain(steps) and _plain(t0) and _plain(save_every)):
        return None
    if type(dtype) is not str and not isinstance(dtype, np.dtype):
        return None
    parts: list = [id(field), dtype, _exact(dt), steps, _exact(t0), save_every]
    for given in (inputs, params, dims):
        if given is None:
            parts.append(None)
        elif type(given) is not dict:
            return None
        else:
            parts.append(len(given))
    if type(h0) is np.ndarray:
        parts.append((h0.shape, h0.dtype))
    elif h0 is not None:
        return None
    for name, a in (inputs or {}).items():
        if type(a) is not np.ndarray:
            return None
        parts.append((name, a.shape, a.dtype))
    values = not _reads_no_param_value(field)
    for name, v in (params or {}).items():
        if type(v) is np.ndarray and v.ndim:
            if values:      # a default may be computed from this array's numbers
                return None
            parts.append((name, v.shape, v.dtype))
        elif _number(v):
            parts.append((name, _exact(v)) if values else (name, float))
        else:
            return None
    for name, v in (dims or {}).items():
        if type(v) is not int:
            return None
        parts.append((name, v))
    return tuple(parts)


@dataclass(frozen=True)
class _Template:
    bound: Bound                # the first call's Bound, its data taken out
    h0_shape: tuple | None


def lookup(key: tuple, field: Field) -> _Template | None:
    with _lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
    return hit if hit is not None and hit.bound.field is field else None


def store(key: tuple, bound: Bound, params) -> None:
    """Keep ``bound`` without the call's data (the memo must not hold users' arrays)."""
    given = params or {}
    light = dataclasses.replace(
        bound, h0=None, inputs=dict.fromkeys(bound.inputs),
        params={k: None if k in given else v for k, v in bound.params.items()})
    with _lock:
        _memo[key] = _Template(light, None if bound.h0 is None else bound.h0.shape)
        while len(_memo) > CAPACITY:
            _memo.popitem(last=False)


def rebind(template: _Template, h0, params, inputs) -> Bound:
    """The template's Bound with this call's data, converted as bind converts it."""
    t = template.bound
    dtype = t.dtype
    arrays = {name: np.ascontiguousarray(inputs[name], dtype) for name in t.inputs}
    values = t.params
    if params:
        values = dict(values)
        for name, v in params.items():
            values[name] = np.ascontiguousarray(v, dtype) if type(v) is np.ndarray else float(v)
    if h0 is not None:
        h0 = np.ascontiguousarray(h0, dtype).reshape(template.h0_shape)
    return Bound(field=t.field, dtype=dtype, grid_shape=t.grid_shape, dims=t.dims, h0=h0,
                 params=values, inputs=arrays, output_shapes=t.output_shapes, dt=t.dt,
                 steps=t.steps, t0=t.t0, save_every=t.save_every, memo=t.memo)
