"""Prepare once per call signature: a repeated call with new data skips the checks.

``bind`` checks a call against its field: names, shapes, dims, defaults, the
solve statement. None of that depends on the numbers in the arrays, only on
the call's *signature*: which names were given, the shapes and dtypes of the
arrays, and the scalars that the checks read. A call whose signature was bound
before reuses its Prepared call and only converts its new arrays (Data), the
"bind once, dispatch many" of the design: a backend's ``run(prepared, data,
progress)`` finds what it derived for the signature in ``prepared.slots``.

``signature`` returns None for anything it does not describe exactly (lists,
0-d arrays, numpy scalars, a dims= mapping of odd types...): such a call is
simply bound in full, as before. Errors are never memoised: a call that raises
leaves nothing here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field as dc_field
from typing import NamedTuple

import numpy as np

from ..ir.nodes import Field
from .bound import Bound
from .dims import free_params
from .lru import LRU

CAPACITY = 256
_memo: LRU = LRU(CAPACITY)                # signature -> Prepared
_value_free: dict[int, tuple] = {}        # id(field) -> (field, True if no value is read)


def _reads_no_param_value(field: Field) -> bool:
    """True when no check or default reads a scalar param's value: then a call with new
    scalar values has the signature of the old one. (Defaults that name params, and
    dt/steps/t0 that name params, make the values part of the signature.)"""
    hit = _value_free.get(id(field))
    if hit is None or hit[0] is not field:
        exprs = [p.default for p in field.params if p.default is not None]
        exprs += [field.solver.dt, field.solver.steps, field.solver.t0]
        if field.solver.adaptive is not None:
            exprs += field.solver.adaptive.exprs()
        hit = (field, not any(free_params(e) for e in exprs if e is not None))
        if len(_value_free) > CAPACITY:
            _value_free.clear()
        _value_free[id(field)] = hit
    return hit[1]


# numpy converts Python ints in [-2**63, 2**64) to int64 / uint64, larger ones to object
# arrays, which bind rejects: such an int is described by no signature, so a call with it
# is bound (and refused) in full, every time.
_INT_LOW, _INT_HIGH = -2**63, 2**64


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
    if not ((dt is None or _number(dt)) and (steps is None or _number(steps))
            and (t0 is None or _number(t0)) and (save_every is None or _number(save_every))):
        return None
    if type(dtype) is not str and not isinstance(dtype, np.dtype):
        return None
    # (steps and save_every with their types: 2.0 == 2, but bind takes only an int)
    parts: list = [id(field), dtype, dt if type(dt) is not float else _exact(dt), steps,
                   type(steps), t0 if type(t0) is not float else _exact(t0), save_every,
                   type(save_every)]
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
    if inputs:
        for name, a in inputs.items():
            if type(a) is not np.ndarray:
                return None
            parts.append((name, a.shape, a.dtype))
    if not params:
        if dims:
            return _with_dims(parts, dims)
        return tuple(parts)
    values = not _reads_no_param_value(field)
    for name, v in params.items():
        if type(v) is np.ndarray and v.ndim:
            if values:      # a default may be computed from this array's numbers
                return None
            parts.append((name, v.shape, v.dtype))
        elif _number(v):
            parts.append((name, _exact(v)) if values else (name, float))
        else:
            return None
    return _with_dims(parts, dims) if dims else tuple(parts)


def _with_dims(parts: list, dims: dict) -> tuple | None:
    for name, v in dims.items():
        if type(v) is not int:
            return None
        parts.append((name, v))
    return tuple(parts)


class Data(NamedTuple):
    """One call's numbers, converted as bind converts them (C order, the working dtype)."""

    h0: np.ndarray | None
    params: dict            # every param: a float, or an array of the grid's shape
    inputs: dict            # every input: an array of its declared shape
    seed: int = 0           # stochastic fields: the generator's key (not in the signature)
    origin: int = 0         # a window's first row of the whole grid (call/window.py)


@dataclass(eq=False)
class Prepared:
    """What a call's signature decides, made once and shared by every call of it: the
    checked call without its data (``template``: dims, shapes, dt, steps, t0, defaults)
    and a slot per backend for what it derives from the shapes alone (the GLSL backend:
    which compiled kernel runs them). ``bound(data)`` is the Bound of one call."""

    template: Bound                 # the first call's Bound, its data taken out
    h0_shape: tuple | None
    slots: dict = dc_field(default_factory=dict, repr=False)   # backend name -> its own
    # True when ``steps`` is the solve statement's and names no param: then it is the same
    # for every call whose dims are these (a backend may fold it into a kernel per shape)
    fixed_steps: bool = False

    @classmethod
    def of(cls, bound: Bound, params, steps=None) -> "Prepared":
        """The Prepared call of ``bound`` (which keeps no user's array: see Data);
        ``steps``: the call's own steps argument (None: the solve statement's)."""
        given = params or {}
        light = dataclasses.replace(
            bound, h0=None, inputs=dict.fromkeys(bound.inputs),
            params={k: None if k in given else v for k, v in bound.params.items()})
        expr = bound.field.solver.steps
        fixed = steps is None and (expr is None or not free_params(expr))
        return cls(light, None if bound.h0 is None else bound.h0.shape, fixed_steps=fixed)

    # what every backend reads, the same for every call of the signature
    field = property(lambda self: self.template.field)
    dtype = property(lambda self: self.template.dtype)
    grid_shape = property(lambda self: self.template.grid_shape)
    output_shapes = property(lambda self: self.template.output_shapes)

    def convert(self, h0, params, inputs) -> Data:
        """This call's data, converted as bind converts it (its checks passed: they
        depend on the signature only)."""
        t = self.template
        dtype = t.dtype
        arrays = {name: np.ascontiguousarray(inputs[name], dtype) for name in t.inputs}
        values = t.params
        if params:
            values = dict(values)
            for name, v in params.items():
                values[name] = (np.ascontiguousarray(v, dtype) if type(v) is np.ndarray
                                else float(v))
        if h0 is not None:
            h0 = np.ascontiguousarray(h0, dtype).reshape(self.h0_shape)
        return Data(h0, values, arrays)

    def bound(self, data: Data) -> Bound:
        t = self.template
        return Bound(field=t.field, dtype=t.dtype, grid_shape=t.grid_shape, dims=t.dims,
                     h0=data.h0, params=data.params, inputs=data.inputs,
                     output_shapes=t.output_shapes, dt=t.dt, steps=t.steps, t0=t.t0,
                     save_every=t.save_every, adaptive=t.adaptive, save_at=t.save_at,
                     prepared=self, seed=data.seed, origin=data.origin)


def lookup(key: tuple, field: Field) -> Prepared | None:
    hit = _memo.get(key)
    return hit if hit is not None and hit.template.field is field else None


def clear() -> int:
    """Forget every Prepared call (with what backends keep in its slots: the cpu
    backend's kernels, dispatch._kernel); returns how many. (vgpu.clear_cache drops the
    replays made of them too: call/replay.py.)"""
    return len(_memo.clear())


def store(key: tuple, prepared: Prepared) -> Prepared:
    """Keep ``prepared`` (or the one another thread kept first) for its signature."""
    return _memo.put(key, prepared)
