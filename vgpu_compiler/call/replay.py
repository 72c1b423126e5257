"""A small repeated ``run_field`` call replayed: the full path's result without its path.

A ``run_field`` call of a program on a backend that keeps a replay (the cpu backend:
a fixed-step call that was one kernel call, backends/cpu/replay.py) leaves, after its
full run, a ``Plan``: the arguments' description (names, shapes, dtypes, exact types
and values of the scalars that decide the call) and the backend's prepared run (its
loaded kernel, its buffers, its uniforms). A later call whose key (``key``: the text,
field, backend, dtype, dt, steps, t0, seed) finds a plan, and whose arguments the plan
describes exactly (``Plan.run``), writes its arrays into the plan's buffers and calls
the kernel once: what the full path computes for it, bit for bit, with the same
run-time errors and the same NonFiniteWarning. Anything else, or a plan in use by
another thread, runs the full path (pipeline.solve_call), which records a plan again.

Only a call the full path runs plainly is recorded (``note``: no batch, observers,
sensitivities, window or progress; the backend decides the rest, ``offer``). Every
check of the full path that depends on the arguments passed when the plan was made
(call/bind.py, call/prepare.py's signature); those that do not (the backend's
availability, the registry's entry) are made again per call. Bounded (``CAPACITY``
plans, the least recently used dropped); ``vgpu.clear_cache`` and ``vgpu.evict`` drop
them all.
"""
from __future__ import annotations

import contextlib
import os
import threading
from math import isfinite

import numpy as np

from ..errors import VgpuError
from ..source import Source
from .counters import COUNTERS
from .prepare import _exact, _number, _reads_no_param_value
from .status import warn_nonfinite

CAPACITY = 64
# key -> Plan, the oldest made dropped first (a dict: its get is the per-call cost,
# 0.05 us; an LRU's move to the end would double it)
_plans: dict = {}
_lock = threading.Lock()
BUSY = object()                     # Plan.run: another thread is replaying this plan
_local = threading.local()          # ``rec``: this thread's full call being recorded
if hasattr(os, "register_at_fork"):     # (a parent thread may hold it at the fork)
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_lock",
                                                                     threading.Lock()))


def key(src, field, backend, dtype, dt, steps, t0, seed) -> tuple | None:
    """What picks a plan: the text (and file name), field, backend, dtype, dt, steps, t0
    and seed, each with its type (steps=2.0 is refused where steps=2 runs); None for a
    program that is not text (a path is read again every call)."""
    t = type(src)
    if t is str:
        name = None
    elif t is Source:
        name = src.filename
    else:
        return None
    return (src, name, field, type(field), backend, dtype, type(dtype),
            dt if dt is None else (type(dt), _exact(dt)),
            steps if steps is None else (type(steps), steps),
            t0 if t0 is None else (type(t0), _exact(t0)), seed, type(seed))


def lookup(k: tuple):
    try:
        return _plans.get(k)
    except TypeError:               # an unhashable argument: the full path says what
        return None


def _store(k: tuple, plan: "Plan") -> None:
    try:
        hash(k)
    except TypeError:
        return
    plan.runner.count = COUNTERS.tally("dispatches")    # (its replays' kernel calls)
    with _lock:
        _drop(_plans.pop(k, None))
        while len(_plans) >= CAPACITY:
            _drop(_plans.pop(next(iter(_plans))))
        _plans[k] = plan


def _drop(plan) -> None:
    """A plan no longer kept: its replays' count folded into COUNTERS, and refused from
    now on (a thread that found it before runs the full path: no count is lost)."""
    if plan is not None:
        with plan.lock:
            plan.dropped = True
            COUNTERS.untally(plan.runner.count)


class _Recording:
    plain = False
    runner = None                   # the backend's replay (offer)
    text = filename = prepared = None


@contextlib.contextmanager
def recording(k: tuple, h0, params, inputs, dims):
    """Record the full call run inside (this thread's): a plan under ``k`` when it ran
    plainly and its backend offered a replay."""
    rec = _local.rec = _Recording()
    try:
        yield
    finally:
        _local.rec = None
    if rec.plain and rec.runner is not None:
        plan = Plan.of(rec, h0, params, inputs, dims)
        if plan is not None:
            _store(k, plan)


def note(text: str, filename: str, prepared) -> None:
    """The pipeline: the call being recorded runs plainly (pipeline.solve_call)."""
    rec = getattr(_local, "rec", None)
    if rec is not None:
        rec.plain, rec.text, rec.filename, rec.prepared = True, text, filename, prepared


def offer(make) -> None:
    """A backend: ``make()`` is its replay of the call just run (None: it has none),
    asked for only while a plain call is being recorded."""
    rec = getattr(_local, "rec", None)
    if rec is not None and rec.plain:
        rec.runner = make()


def clear() -> int:
    """Drop every plan; returns how many."""
    with _lock:
        n = len(_plans)
        for plan in _plans.values():
            _drop(plan)
        _plans.clear()
    return n


def entries() -> int:
    return len(_plans)


def _described(name, v) -> tuple | None:
    """A param's part of a plan: a number (its exact type and value), an array (shape
    and dtype), or None (nothing a plan describes)."""
    if type(v) is np.ndarray and v.ndim:
        return (name, "array", v.shape, v.dtype)
    if _number(v):
        return (name, "number", type(v), _exact(v))
    return None


def _same(a, shape, dtype) -> bool:
    """``a`` is an array of exactly this shape and dtype (what a plan was made for)."""
    return type(a) is np.ndarray and a.shape == shape and a.dtype is dtype


class Plan:
    """A recorded call's arguments and its backend's replay (``runner``)."""

    def __init__(self, rec, h0, params, inputs, dims):
        self.runner, self.text, self.filename = rec.runner, rec.text, rec.filename
        self.total = rec.runner.total       # the sum of the states its last run left
        self.lock = threading.Lock()
        self.dropped = False
        t = rec.prepared.template
        self.grid_shape = t.grid_shape
        self.h0 = None if h0 is None else (h0.shape, h0.dtype)
        self.inputs_none = inputs is None
        self.inputs = tuple((name, a.shape, a.dtype, rec.runner.input_buffer(name))
                            for name, a in (inputs or {}).items())
        self.params_none = params is None
        values = not _reads_no_param_value(t.field)
        self.fixed, self.numbers, self.slots, self.arrays = [], [], [], []
        for name, v in (params or {}).items():
            d = _described(name, v)
            if d[1] == "array":
                self.arrays.append((name, d[2], d[3], rec.runner.param_row(name)))
            elif values:            # a default, dt, steps or t0 reads this value
                self.fixed.append(d)
            else:                   # a uniform of the kernel (if it reads it)
                self.numbers.append(name)
                slot = rec.runner.param_slot(name)
                if slot is not None:
                    self.slots.append((name,) + slot)
        self.nparams = len(params or ())
        self.dims = None if dims is None else dict(dims)

    @classmethod
    def of(cls, rec, h0, params, inputs, dims) -> "Plan | None":
        """The plan of a recorded call, or None where its arguments are not all arrays
        and numbers of exact types (lists, 0-d arrays, ...: the full path every time)."""
        if h0 is not None and type(h0) is not np.ndarray:
            return None
        for given in (params, inputs, dims):
            if given is not None and type(given) is not dict:
                return None
        if any(type(a) is not np.ndarray for a in (inputs or {}).values()):
            return None
        if any(_described(k, v) is None for k, v in (params or {}).items()):
            return None
        if dims and any(type(v) is not int for v in dims.values()):
            return None
        if params and not _reads_no_param_value(rec.prepared.template.field) and any(
                type(v) is np.ndarray for v in params.values()):
            return None             # (a default may be computed from the array's numbers)
        return cls(rec, h0, params, inputs, dims)

    def run(self, h0, params, inputs, dims):
        """The states of this call; None where the plan does not describe it exactly,
        BUSY where another thread is replaying it: then the full path runs it."""
        if h0 is None:
            if self.h0 is not None:
                return None
        elif self.h0 is None or not _same(h0, *self.h0):
            return None
        if type(inputs) is dict and len(inputs) == len(self.inputs):
            for name, shape, dtype, _ in self.inputs:      # (_same, inline: 0.06 us each)
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.shape != shape or a.dtype is not dtype:
                    return None
        elif inputs is not None or not self.inputs_none:
            return None
        if params is None:
            if not self.params_none:
                return None
        elif type(params) is not dict or len(params) != self.nparams or not self._params(params):
            return None
        if (dims is not None or self.dims is not None) and not self._dims(dims):
            return None
        if not self.lock.acquire(False):
            return BUSY
        if self.dropped:
            self.lock.release()
            return None
        try:
            for name, _, _, buf in self.inputs:
                buf[...] = inputs[name]         # (cast as the full path's conversion)
            if params:
                for name, _, _, row in self.arrays:
                    row[...] = params[name]
                for name, fu, i in self.slots:
                    fu[i] = float(params[name])
            states = self.runner.run(h0)
        except VgpuError as error:
            if error.source is None:
                error.with_source(self.text, self.filename)
            raise
        finally:
            self.lock.release()
        if states is not None and not isfinite(self.total()):     # (NaN, inf or overflow)
            warn_nonfinite(states, self.grid_shape, stacklevel=4)     # (run_field's caller)
        return states

    def _dims(self, dims) -> bool:
        return type(dims) is dict and dims == self.dims and all(
            type(v) is int for v in dims.values())

    def _params(self, params: dict) -> bool:
        for name, kind, t, v in self.fixed:
            got = params.get(name, self)
            if type(got) is not t or _exact(got) != v:
                return False
        for name in self.numbers:
            if not _number(params.get(name)):
                return False
        for name, shape, dtype, _ in self.arrays:
            if not _same(params.get(name), shape, dtype):
                return False
        return True
