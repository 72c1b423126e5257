"""Call arguments -> Bound: every mistake in a call is raised here, by name.

``bind`` converts what the user passed (lists, ints, float64, Fortran-ordered
or strided arrays) into C-ordered arrays of the working dtype, binds every dim
symbol from the shapes that carry it, fills param defaults and evaluates the
solve statement's ``dt``, ``steps`` and ``t0``. A backend never sees a bad call.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..errors import (ArgumentTypeError, CallError, DeclarationError, MissingError, ShapeError,
                      UnknownNameError)
from ..ir.nodes import Const, Expr, Field, Sym
from ..ir.ops import INT32_MAX, SymKind, Type
from .. import spelling as S
from .prepare import Data, Prepared, lookup, signature, store
from .adaptive import bind_adaptive, bind_save_at, check_method_args, check_range
from .bound import Bound
from .dims import Dims, free_params, shape_text
from .noise import seed_of
from .window import Window, check_origin


def prepare(field: Field, h0=None, params=None, inputs=None, dims=None, dtype="float32",
            dt=None, steps=None, t0=None, save_every=None, adaptive=None,
            save_at=None, seed=0, window: Window | None = None) -> tuple[Prepared, Data]:
    """The call's Prepared (memoised per signature: call/prepare.py) and its Data.
    ``adaptive``: the adaptive-method arguments given (call/adaptive.py's overrides).
    ``window``: run only those rows of the first grid axis (call/window.py)."""
    adaptive = adaptive or {}
    seed = seed_of(seed)            # checked per call: a seed is data, not signature
    key = signature(field, h0, params, inputs, dims, dtype, dt, steps, t0, save_every)
    if key is not None and (adaptive or save_at is not None):
        key = _adaptive_key(key, adaptive, save_at)
    if window is not None and key is not None:
        key += (("window", window.length, window.rows),)
    if key is not None:
        prepared = lookup(key, field)
        if prepared is not None:        # checked before: only this call's data is new
            data = prepared.convert(h0, params, inputs)
            if seed:
                data = data._replace(seed=seed)
            if window is None:
                return prepared, data
            check_origin(prepared, window)
            return prepared, data._replace(origin=window.start)
    bound = _bind(field, h0, params, inputs, dims, dtype, dt, steps, t0, save_every,
                  adaptive, save_at, window)
    prepared = Prepared.of(bound, params, steps)
    if key is not None:
        prepared = store(key, prepared)
    return prepared, Data(bound.h0, bound.params, bound.inputs, seed, bound.origin)


def bind(field: Field, h0=None, params=None, inputs=None, dims=None, dtype="float32",
         dt=None, steps=None, t0=None, save_every=None, seed=0,
         window: Window | None = None) -> Bound:
    """The call as one Bound (its Prepared call in ``bound.prepared``)."""
    prepared, data = prepare(field, h0, params, inputs, dims, dtype, dt, steps, t0, save_every,
                             seed=seed, window=window)
    return prepared.bound(data)


def _adaptive_key(key: tuple, adaptive: dict, save_at) -> tuple | None:
    """The signature with the adaptive arguments' values (plain numbers only) and
    save_at's times (a float array only) added; None otherwise."""
    if not all(type(v) in (int, float) for v in adaptive.values()):
        return None
    extra: tuple = tuple(sorted(adaptive.items()))
    if save_at is not None:
        if type(save_at) is not np.ndarray or save_at.dtype.kind != "f" or save_at.ndim != 1:
            return None
        extra += (save_at.tobytes(),)
    return key + (extra,)


def _bind(field: Field, h0, params, inputs, dims, dtype, dt, steps, t0, save_every,
          adaptive=None, save_at=None, window: Window | None = None) -> Bound:
    adaptive = adaptive or {}
    check_method_args(field, adaptive, dt, steps, save_every, save_at)
    if save_every is not None and save_at is not None:
        raise CallError(f"give {S.name('save_every')} or {S.name('save_at')}, not both")
    dtype = working_dtype(dtype)
    params = _names("params", params, [p.name for p in field.params], field)
    inputs = _names("inputs", inputs, [a.name for a in field.inputs], field)
    dims = _names("dims", dims, list(field.dims), field)
    arrays = _inputs(field, inputs, dtype)
    given = {k: _param(k, v, dtype) for k, v in params.items()}
    h0 = _h0(field, h0, dtype)
    if window is None:
        bound_dims = _bind_dims(field, dims, arrays, h0, given)
        grid_shape = tuple(bound_dims.extent(a.extent) for a in field.grid)
    else:       # the dims are the whole grid's: bind them from the arrays' whole shapes
        whole_h0, whole = _whole(window, h0, given, dtype)
        bound_dims = _bind_dims(field, dims, arrays, whole_h0, whole)
        grid_shape = tuple(bound_dims.extent(a.extent) for a in field.grid)
        window.check(field, grid_shape)
        grid_shape = window.shape(grid_shape)
    if h0 is not None and h0.ndim == len(grid_shape):
        h0 = h0.reshape(grid_shape + (1,))
    values = _param_values(field, given, grid_shape, dtype, bound_dims.values)
    scalars = {k: v for k, v in values.items() if not isinstance(v, np.ndarray)}
    ctx = (field, scalars, values, bound_dims.values)
    bound = Bound(
        field=field, dtype=dtype, grid_shape=grid_shape, dims=dict(bound_dims.values),
        h0=h0, params=values, inputs=arrays,
        output_shapes={o.name: bound_dims.shape(o) for o in field.outputs},
        dt=_solver_float("dt", field.solver.dt, dt, ctx),
        steps=_solver_steps(field.solver.steps, steps, ctx),
        t0=_solver_float("t0", field.solver.t0, t0, ctx),
        save_every=_save_every(save_every),
        origin=0 if window is None else window.start,
    )
    bound.adaptive = bind_adaptive(field, adaptive, bound.t0,
                                   lambda what, expr: _solver_value(what, expr, ctx))
    check_range(bound)
    t1 = bound.adaptive.t1 if bound.adaptive else bound.t0 + bound.steps * bound.dt
    bound.save_at = bind_save_at(save_at, bound.t0, t1, dtype)
    return bound


def _whole(window: Window, h0, given: dict, dtype) -> tuple:
    """Stand-ins of the whole grid's shape (no memory) for a window's h0 and
    per-trajectory params, after checking that each holds the window's rows."""
    def whole(what: str, a: np.ndarray) -> np.ndarray:
        if a.ndim and a.shape[0] != window.length:
            raise ShapeError(f"{what} has {a.shape[0]} rows on axis 0, but the window "
                             f"[{window.start}, {window.stop}) has {window.length}")
        return np.broadcast_to(np.zeros((), dtype), (window.rows,) + a.shape[1:])
    stand_in = {k: whole(f"param {k}", v) if isinstance(v, np.ndarray) else v
                for k, v in given.items()}
    return (None if h0 is None else whole(S.name("h0"), h0)), stand_in


# --- plain arguments -----------------------------------------------------------------
_WORKING = {"float32": np.dtype("float32"), "float64": np.dtype("float64")}


def working_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str) and dtype in _WORKING:     # the usual spelling, per call: fast
        return _WORKING[dtype]
    try:
        d = None if dtype is None else np.dtype(dtype)
    except (TypeError, ValueError):
        d = None
    if d is None or d.name not in ("float32", "float64"):
        raise ArgumentTypeError(f"{S.name('dtype')} must be 'float32' or 'float64', "
                                f"got {dtype!r}")
    return np.dtype(d.name)     # native byte order: '>f4' means float32 too


def _names(what: str, given, valid: list[str], field: Field) -> dict:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ArgumentTypeError(f"{S.keyword(what)} must be a dict of name -> value, "
                                f"got {type(given).__name__}")
    unknown = [k for k in given if k not in valid]
    if unknown:
        listed = ", ".join(valid) if valid else f"none: field {field.name} declares no {what}"
        raise UnknownNameError(f"unknown name {unknown[0]!r} in {S.keyword(what)}"
                               f"{_elsewhere(field, unknown[0])}; valid names: {listed}")
    return dict(given)


def _elsewhere(field: Field, name) -> str:
    """Where a name given in the wrong mapping belongs: ``: F is an input of field f,
    pass it in inputs={'F': array}`` (or "" when the field has no such name)."""
    if not isinstance(name, str):
        return ""
    of = f"of field {field.name}"
    if any(p.name == name for p in field.params):
        return f": {name} is a param {of}, pass it in {S.give_entry('params', name)}"
    if any(a.name == name for a in field.inputs):
        return f": {name} is an input {of}, pass it in {S.give_entry('inputs', name)}"
    if name in field.dims:
        return f": {name} is a dim {of}, pass it in {S.give_entry('dims', name)}"
    state = next((s for s in field.states if s.name == name), None)
    if state is not None:
        if state.init is not None:
            return (f": {name} is a state {of} with a start expression "
                    f"(state {name} = ...), so it takes no value at call time")
        return f": {name} is a state {of}, its starting value goes in {S.name('h0')}"
    if any(o.name == name for o in field.outputs):
        return f": {name} is an output {of}, computed by the run (sol.outputs[{name!r}])"
    return ""


def _numeric(what: str, value) -> np.ndarray:
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise ArgumentTypeError(f"{what} must be an array of real numbers ({e})") from None
    if a.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"{what} must be real numbers (int or float), "
                                f"got an array of dtype {a.dtype}")
    return a


def _scalar(what: str, value) -> float:
    a = _numeric(what, value)
    if a.ndim != 0 or a.dtype.kind == "b":
        raise ArgumentTypeError(f"{what} must be one number, got {value!r}")
    if not math.isfinite(float(a)):
        raise ArgumentTypeError(f"{what} must be finite, got {float(a)}")
    return float(a)


def _int(what: str, value, low: int) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok or not low <= int(value) <= INT32_MAX:
        raise ArgumentTypeError(f"{what} must be an int >= {low}, got {value!r}")
    return int(value)


def _save_every(k) -> int | None:
    return None if k is None else _int(S.name("save_every"), k, 1)


# --- arrays ----------------------------------------------------------------------------
def _inputs(field: Field, given: dict, dtype) -> dict[str, np.ndarray]:
    out = {}
    for decl in field.inputs:
        if decl.name not in given:
            raise MissingError(f"input {decl.name}{shape_text(decl.dims, '[]')} was not given: "
                               f"pass {S.give_entry('inputs', decl.name)}")
        a = _numeric(f"input {decl.name}", given[decl.name])
        if a.ndim != len(decl.dims):
            raise ShapeError(f"input {decl.name} is declared {decl.name}"
                             f"{shape_text(decl.dims, '[]')} ({len(decl.dims)} dims), "
                             f"got an array of shape {a.shape}")
        out[decl.name] = np.ascontiguousarray(a, dtype)
    return out


def _param(name: str, value, dtype):
    a = _numeric(f"param {name}", value)
    if a.ndim == 0:
        return float(a)
    return np.ascontiguousarray(a, dtype)


def _h0(field: Field, h0, dtype) -> np.ndarray | None:
    n_free = len(field.free_states)
    if h0 is None:
        if n_free:
            names = ", ".join(s.name for s in field.free_states)
            raise MissingError(f"{S.name('h0')} was not given: field {field.name} needs the "
                               f"starting values of {names} ({_h0_expected(field)})")
        return None
    if n_free == 0:
        raise CallError(f"{S.name('h0')} was given, but every state of field {field.name} "
                        f"has a start expression (state x = ...): leave {S.name('h0')} out")
    a = _numeric(S.name("h0"), h0)
    rank = len(field.grid)
    ok = a.ndim == rank + 1 and a.shape[-1] == n_free
    ok = ok or (n_free == 1 and a.ndim == rank)
    if not ok:
        raise ShapeError(f"{S.name('h0')} must have shape {_h0_expected(field)}, "
                         f"got {a.shape}")
    return np.ascontiguousarray(a, dtype)


def _h0_expected(field: Field) -> str:
    n_free = len(field.free_states)
    grid = tuple(a.extent for a in field.grid)
    extra = () if n_free == 1 else (n_free,)
    names = ", ".join(s.name for s in field.free_states)
    if field.implicit_grid:     # a batch of any shape (call/batch.py)
        batch = "batch" if n_free == 1 else f"batch + ({n_free},)"
        return (f"{shape_text(grid + extra, '()')} (grid {shape_text(grid, '()')} x states "
                f"{names}), or {batch} for a batch of trajectories of any shape")
    return f"{shape_text(grid + extra, '()')} (grid {shape_text(grid, '()')} x states {names})"


# --- dims ------------------------------------------------------------------------------
def _bind_dims(field: Field, dims: dict, arrays: dict, h0, params: dict) -> Dims:
    bound = Dims(field)
    for name, value in dims.items():
        bound.bind(name, _int(S.entry("dims", name), value, 0), S.keyword("dims"))
    for decl in field.inputs:
        bound.match(decl.dims, arrays[decl.name].shape, f"input {decl.name}")
    grid = tuple(a.extent for a in field.grid)
    if h0 is not None:
        bound.match(grid, h0.shape[:len(grid)], S.name("h0"))
    for name, value in params.items():
        if isinstance(value, np.ndarray):
            if value.ndim != len(grid):
                raise ShapeError(f"param {name} must be one number or an array of the grid's "
                                 f"shape {shape_text(grid, '()')}, got shape {value.shape}")
            bound.match(grid, value.shape, f"param {name}")
    _require_all(bound)
    return bound


def _require_all(bound: Dims) -> None:
    missing = [d for d in bound.field.dims if d not in bound.values]
    if missing:
        name = missing[0]
        raise MissingError(f"dim {name} is not bound: it is {bound._used(name)}; no array "
                           f"passed gives it, so pass {S.give_entry('dims', name)}")


# --- params and the solve statement ---------------------------------------------------------
def _param_values(field: Field, given: dict, grid_shape: tuple, dtype, dims: dict) -> dict:
    """Every param's value: given, or its default (which may use other params), each
    default evaluated after the params it names (on an explicit stack: chains of
    thousands of defaults are fine)."""
    decls = {p.name: p for p in field.params}
    values: dict = {}
    for p in field.params:
        stack = [p.name]            # params being computed, the innermost last
        while stack:
            name = stack[-1]
            if name in values or name in given:
                values.setdefault(name, given.get(name))
                stack.pop()
                continue
            decl = decls[name]
            if decl.default is None:
                raise MissingError(f"param {name} has no default and was not given: "
                                   f"pass {S.give_entry('params', name)}")
            needed = next((q for q in free_params(decl.default) if q not in values), None)
            if needed is not None:
                if needed in stack:
                    raise DeclarationError(f"the default of param {needed} depends on itself",
                                           span=decls[needed].span)
                stack.append(needed)
                continue
            v = _evaluate(decl.default, values.__getitem__, dims)
            values[name] = (np.ascontiguousarray(np.broadcast_to(v, grid_shape), dtype)
                            if np.ndim(v) else float(v))
            stack.pop()
    return values


def _evaluate(expr: Expr, param, dims: dict):
    """Evaluate a constant expression (literals, params, dims) in float64."""
    # Literals and plain names (almost every dt / steps / t0 / default) need no evaluator:
    # this runs on every call, where microseconds count.
    if isinstance(expr, Const):
        return np.int32(expr.value) if expr.type is Type.INT else np.float64(expr.value)
    if isinstance(expr, Sym) and expr.kind is SymKind.DIM:
        return np.int32(dims[expr.name])
    if isinstance(expr, Sym) and expr.kind is SymKind.PARAM:
        return np.float64(param(expr.name))
    from ..ir.evaluate import Context, evaluate

    class Constants(Context):
        def symbol(self, node: Sym):
            if node.kind is SymKind.PARAM:
                return np.float64(param(node.name))
            if node.kind is SymKind.DIM:
                return np.int32(dims[node.name])
            raise DeclarationError(f"{node.name} cannot be used in a constant expression")

    return evaluate(expr, Constants(), np.float64)


def _solver_value(what: str, expr: Expr, ctx):
    field, scalars, values, dims = ctx
    per_trajectory = [p for p in free_params(expr) if p not in scalars]
    if per_trajectory:
        raise CallError(f"{what} of field {field.name} uses param {per_trajectory[0]}, which has "
                        f"one value per trajectory in this call; {what} is one value for every "
                        f"trajectory: pass that param as a scalar, or give {S.keyword(what)}")
    return _evaluate(expr, lambda p: values[p], dims)


def _solver_float(what: str, expr: Expr, override, ctx) -> float:
    if override is not None:
        return _scalar(S.name(what), override)
    v = float(_solver_value(what, expr, ctx))
    if not math.isfinite(v):
        raise ArgumentTypeError(f"{what} of the solve statement is {v}; it must be finite")
    return v


def _solver_steps(expr: Expr, override, ctx) -> int:
    if override is not None:
        return _int(S.name("steps"), override, 0)
    v = _solver_value("steps", expr, ctx)
    if not float(v).is_integer() or not 0 <= float(v) <= INT32_MAX:
        raise ArgumentTypeError(f"steps of the solve statement is {v}; it must be an int >= 0")
    return int(v)

