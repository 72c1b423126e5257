"""The call arguments of adaptive methods and of ``save_at``: resolved and checked.

An adaptive method's ``t1, rtol, atol, dt0, dtmax, max_steps`` come from the
call (overrides), else the solve statement, else the defaults of
ir/controller.py (``dtmax``: t1 - t0 of the values in force). They are numbers
in the Bound (uniforms for a shader): changing them never recompiles.
Integration runs forwards only: ``t1 < t0`` is an error (docs/language.md).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentTypeError, CallError, MissingError
from ..ir import controller as C
from ..ir.embedded import ADAPTIVE
from ..ir.rosenbrock import STIFF
from ..ir.nodes import Field
from .. import spelling as S
from .bound import AdaptiveCall
from .noise import refuse_with_noise

NAMES = ("t1", "rtol", "atol", "dt0", "dtmax", "max_steps")


def overrides(t1=None, rtol=None, atol=None, dt0=None, dtmax=None, max_steps=None) -> dict:
    """The adaptive arguments the caller gave (None: not given)."""
    given = dict(t1=t1, rtol=rtol, atol=atol, dt0=dt0, dtmax=dtmax, max_steps=max_steps)
    return {k: v for k, v in given.items() if v is not None}


def check_method_args(field: Field, given: dict, dt, steps, save_every, save_at=None) -> None:
    """Arguments that do not belong to the field's kind of method."""
    method = field.solver.method
    refuse_with_noise(field, S.name("save_at"), save_at)
    if field.solver.adaptive is None:
        if given:
            name = next(iter(given))
            raise CallError(f"{S.name(name)} is an argument of the adaptive methods "
                            f"({', '.join([*ADAPTIVE, *STIFF])}); field {field.name} uses the fixed-step "
                            f"method {method}: give {S.name('dt')} and "
                            f"{S.name('steps')} instead")
        return
    for name, value in (("dt", dt), ("steps", steps)):
        if value is not None:
            raise CallError(f"{S.name(name)} was given, but field {field.name} uses the "
                            f"adaptive method {method}, which chooses its own steps: give "
                            f"{S.name('t1')} (and {S.name('rtol')}, {S.name('atol')}, "
                            f"{S.name('dt0')}, {S.name('max_steps')}) instead")
    if save_every is not None:
        raise CallError(f"{S.name('save_every')} counts fixed steps; field {field.name} uses "
                        f"the adaptive method {method}: pass {S.name('save_at')}=times "
                        f"(values from its continuous extension) instead")


def _number(name: str, value) -> float:
    a = np.asarray(value) if not isinstance(value, (int, float)) else value
    if isinstance(a, np.ndarray):
        if a.ndim != 0 or a.dtype.kind not in "iuf":
            raise ArgumentTypeError(f"{S.name(name)} must be one number, got {value!r}")
    elif isinstance(a, bool):
        raise ArgumentTypeError(f"{S.name(name)} must be one number, got {value!r}")
    v = float(a)
    if not math.isfinite(v):
        raise ArgumentTypeError(f"{S.name(name)} must be finite, got {v}")
    return v


def bind_adaptive(field: Field, given: dict, t0: float, value) -> AdaptiveCall | None:
    """The adaptive arguments in force; ``value(what, expr)`` evaluates a solve-statement
    expression (bind's evaluator). None for a fixed-step method."""
    spec = field.solver.adaptive
    if spec is None:
        return None
    got: dict = {}
    for name in NAMES:
        if name in given:
            got[name] = _number(name, given[name])
        elif getattr(spec, name) is not None:
            v = float(value(name, getattr(spec, name)))
            if not math.isfinite(v):
                raise ArgumentTypeError(f"{name} of the solve statement is {v}; it must "
                                        f"be finite")
            got[name] = v
    if "t1" not in got:
        raise MissingError(f"t1 was not given: field {field.name} uses the adaptive method "
                           f"{field.solver.method}, which integrates from t0 to t1; write "
                           f"`t1 = ...` in its solve statement or pass {S.name('t1')}")
    t1 = got["t1"]
    if t1 < t0:
        raise CallError(f"{S.name('t1')} = {t1} is before t0 = {t0}: adaptive methods "
                        f"integrate forwards only (negate the time in the equations to go "
                        f"backwards)")
    rtol, atol = got.get("rtol", C.DEFAULT_RTOL), got.get("atol", C.DEFAULT_ATOL)
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not v > 0:
            raise CallError(f"{S.name(name)} must be positive, got {v}")
    dt0 = got.get("dt0")
    if dt0 is not None and not dt0 > 0:
        raise CallError(f"{S.name('dt0')} (the first step) must be positive, got {dt0}")
    dtmax = got.get("dtmax", t1 - t0)
    if not dtmax > 0 and t1 > t0:
        raise CallError(f"{S.name('dtmax')} must be positive, got {dtmax}")
    max_steps = got.get("max_steps", C.DEFAULT_MAX_STEPS)
    if not float(max_steps).is_integer() or not 1 <= max_steps <= 2**31 - 1:
        raise CallError(f"{S.name('max_steps')} must be an int >= 1, got {max_steps!r}")
    return AdaptiveCall(t1=t1, rtol=rtol, atol=atol, dt0=dt0, dtmax=max(dtmax, 0.0),
                        max_steps=int(max_steps))


def bind_save_at(save_at, t0: float, t1: float) -> np.ndarray | None:
    """``save_at`` as a float64 array: 1-D, finite, non-decreasing, within [t0, t1]."""
    if save_at is None:
        return None
    try:
        a = np.asarray(save_at)
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(f"{S.name('save_at')} must be a 1-D array of times ({e})") \
            from None
    if a.dtype.kind not in "iuf" or a.ndim != 1:
        raise ArgumentTypeError(f"{S.name('save_at')} must be a 1-D array of times, got "
                                f"{'shape ' + str(a.shape) if a.dtype.kind in 'iuf' else a.dtype}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise CallError(f"{S.name('save_at')} must hold finite times")
    if a.size and np.any(np.diff(a) < 0):
        i = int(np.argmax(np.diff(a) < 0))
        raise CallError(f"{S.name('save_at')} must be non-decreasing: entry {i + 1} "
                        f"({a[i + 1]}) comes before entry {i} ({a[i]})")
    if a.size and (a[0] < t0 or a[-1] > t1):
        bad = a[0] if a[0] < t0 else a[-1]
        raise CallError(f"{S.name('save_at')} holds {bad}, outside the integration "
                        f"interval [{t0}, {t1}]")
    return a
