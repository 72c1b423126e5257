"""The pipeline of one call, below the API and the distributed runs that both use it:
text -> (memoised) Compiled (``compile``) -> Field -> call.bind.prepare: the call's
Prepared (memoised per signature; every call error raised here) and its Data -> the
backend chosen from the registry (backends/: ``auto`` tries them in order, one warning
per reason it moves on; an empty ensemble is answered here, call/empty.py) ->
``run(prepared, data, progress)`` -> a Solution -> one warning counting non-finite
trajectories. Errors located in the text get the text and file name attached, so
they print the line with a caret. ``solve_window`` is what a Dask worker runs
(distributed/block.py).
"""
from __future__ import annotations

import logging
import os
import threading

import numpy as np

from . import spelling as S
from .errors import ArgumentTypeError, BackendError, CallError, VgpuError
from .call.batch import flatten, unflatten
from .call.bind import prepare
from .call.status import complete_status, warn_nonfinite, warn_status
from .call.tolerance import warn_tolerance
from .call.bound import Solution
from .call import labelled
from .call.sensitivities import split as split_sensitivities
from .call.observers import split as split_observers
from .ir import observers, sensitivity
from .call.counters import COUNTERS
from .call import replay
from .call.lru import LRU
from .call.empty import is_empty, solution as empty_solution
from . import backends as registry
from .source import Located, Source, load, text_of     # (their home: import vgpu needs them)

log = logging.getLogger("vgpu")

PARSE_CACHE_SIZE = 64
_parsed: LRU = LRU(PARSE_CACHE_SIZE)        # (text, filename) -> Compiled
_fallback_reasons: set[str] = set()         # each fallback reason is logged once per process
_fallback_lock = threading.Lock()
if hasattr(os, "register_at_fork"):     # a parent thread may hold it at the fork
    os.register_at_fork(after_in_child=lambda: globals().__setitem__("_fallback_lock",
                                                                     threading.Lock()))


def compile(src, field: str | None = None):
    """Parse and check a program; returns the Compiled object with every stage kept."""
    text, filename = text_of(src)
    with Located(text, filename):
        compiled = parsed(text, filename)
        if field is not None:
            compiled.select(field)
    return compiled


def solve_window(src, window, h0=None, *, params=None, inputs=None, dims=None, field=None,
                 backend="auto", dtype="float32", dt=None, steps=None, t0=None,
                 save_every=None, extra=None, seed=0) -> Solution:
    """Run one window of a call (call/window.py): rows [window.start, window.stop) of the
    first grid axis of a grid of window.rows rows; h0 and per-trajectory params hold
    those rows only; everything else is the whole call's. The result is exactly those
    rows of the whole call's (flux: this window's deposits). ``extra``: the adaptive
    arguments and save_at, as solve passes them on. Used by distributed/."""
    return solve_call(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0,
                  save_every, None, extra, seed=seed, window=window)



# --- the pipeline ------------------------------------------------------------------
def solve_call(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0, save_every,
           progress, extra=None, full=True, seed=0, window=None) -> Solution:
    """``extra``: the adaptive arguments and save_at given; ``full``: fill every field of
    the Solution (run_field reads only the states); ``seed``: the noise's key;
    ``window``: rows of the first grid axis of a larger grid (call/window.py)."""
    text, filename = text_of(src)
    if progress is not None:
        _check_progress(progress)
    if type(backend) is str:        # the backend's probe runs while the text is parsed
        registry.start_probe(backend)
    prepared = selected = base = batch = None
    try:                            # (what Located does, without a context manager)
        selected = base = parsed(text, filename).select(field)
        if window is None:          # a batch of any shape, run as the 1-D grid (call/batch.py)
            h0, params, batch = flatten(selected, h0, params)
        save_at = joined = lowered = None
        if extra:
            extra = dict(extra)
            save_at = extra.pop("save_at", None)
            names = extra.pop("sensitivities", None)
            if names is not None:       # the field joined with dh/dp (ir/sensitivity.py)
                joined = sensitivity.joined(selected, names)
                selected = joined.field
        if selected.observers:      # observers as hidden states (ir/observers.py)
            lowered = observers.lower(selected)
            selected = lowered.field
        prepared, data = prepare(selected, h0, params, inputs, dims, dtype, dt, steps,
                                 t0, save_every, extra, save_at, seed, window)
        if window is None:          # (a Dask run's blocks: said once, on the client)
            warn_tolerance(prepared.template, stacklevel=3)     # the caller of vgpu.solve
            if not full and batch is None and lowered is None and joined is None \
                    and progress is None and type(backend) is str and backend != "auto":
                replay.note(text, filename, prepared)   # (a run_field being recorded)
        sol = _run(prepared, data, backend, progress)
        if lowered is not None:
            complete_status(sol, prepared.template)     # (average reads sol.t)
            split_observers(sol, lowered, prepared.template.t0, prepared.dtype,
                            squeeze=joined is None)
        if joined is not None:
            split_sensitivities(sol, joined)
        if full:
            complete_status(sol, prepared.template)
            if window is None:          # (a Dask run labels the whole: distributed/)
                sol.labels = labelled.of(base, params)    # (the field's own states)
    except MemoryError:
        if selected is None:
            raise
        error = CallError(_out_of_memory(selected, prepared))
        error.with_source(text, filename)
        raise error from None
    except VgpuError as error:
        if error.source is None:
            error.with_source(text, filename)
        raise
    warn_nonfinite(sol.states, prepared.grid_shape, stacklevel=4)     # (the API's caller)
    if prepared.template.adaptive is not None or prepared.template.field.events:
        warn_status(sol, prepared.grid_shape)
    sol.state_names = base.state_names
    return sol if batch is None else unflatten(sol, batch)


def _out_of_memory(field, prepared) -> str:
    """The message for a call whose arrays do not fit in memory, with their size."""
    if prepared is None:
        return (f"out of memory while converting the arrays of a call of field {field.name}: "
                f"pass smaller arrays")
    n = int(np.prod(prepared.grid_shape, dtype=np.int64))
    state = n * len(field.states) * prepared.dtype.itemsize
    gib = state / (1 << 30)
    return (f"out of memory running field {field.name} on a grid of shape {prepared.grid_shape} "
            f"({n} trajectories, {gib:.2f} GiB of states alone): run fewer trajectories "
            f"per call")


def parsed(text: str, filename: str):
    key = (text, filename)
    hit = _parsed.get(key)
    if hit is not None:
        COUNTERS.add("parse_hits")
        return hit
    from .frontend.compile import compile_program
    compiled = compile_program(text, filename)
    COUNTERS.add("parses")
    return _parsed.put(key, compiled)


# --- backends ----------------------------------------------------------------------
def _run(prepared, data, backend, progress) -> Solution:
    """Run the call on the backend named (``auto``: the first available in the
    registry's order that can run it, one warning per reason it moved on)."""
    if backend not in registry.choices():
        raise ArgumentTypeError(f"{S.name('backend')} must be one of "
                                f"{', '.join(map(repr, registry.choices()))}, got {backend!r}")
    if backend != "auto":
        chosen = registry.get(backend)
        ok, why = chosen.available()
        if not ok:
            raise BackendError(f"the {backend} backend is not available here ({why}); "
                               f"use {S.setting('backend', 'numpy')}")
        if 0 in prepared.template.grid_shape:     # (_on, inline: the usual call)
            sol = empty_solution(prepared.template, progress)
        else:
            refuse_observers(chosen, prepared.template.field)
            sol = chosen.run(prepared, data, progress)
        sol.backend = backend
        return sol
    order = registry.auto_order()
    for i, candidate in enumerate(order):
        last = i == len(order) - 1
        ok, why = candidate.available()
        if not ok:
            if not candidate.absent_quietly:
                _fell_back(candidate, f"is not available ({why})", order[i + 1:])
            continue
        if i and not candidate.gpu:
            COUNTERS.add("cpu_fallbacks")       # auto came down to a CPU backend
        try:
            sol = _on(candidate, prepared, data, progress)
        except BackendError as e:
            if last:
                raise
            _fell_back(candidate, f"cannot run this: {e.message}", order[i + 1:])
            continue
        if candidate.name not in _chosen:
            _say_chosen(candidate)
        return sol
    raise BackendError("no backend is available here")      # numpy always is


_chosen: set = set()


def _say_chosen(backend) -> None:
    """One logged line (INFO, logger "vgpu") per backend that ``auto`` first runs on:
    which it is and why (registry.why_chosen)."""
    with _fallback_lock:
        if backend.name in _chosen:
            return
        _chosen.add(backend.name)
    log.info("%s", registry.why_chosen(backend))


# The capability (backends.FEATURES) that runs each kind of step-end observer.
OBSERVER_FEATURE = {"peak": "observe_peak", "trough": "observe_peak", "first": "observe_first"}


def refuse_observers(backend, field) -> None:
    """A BackendError when the (lowered) field has step-end observers (peak, trough,
    first) and ``backend`` does not update them (``auto`` then moves on)."""
    have = registry.capabilities(backend)
    kinds = sorted({r.kind for r in field.observer_rules
                    if OBSERVER_FEATURE[r.kind] not in have})
    if kinds:
        does = ("peak, trough, " if "observe_peak" in have else "") + "integral and average"
        raise BackendError(f"the {backend.name} backend does not compute the observers "
                           f"{', '.join(kinds)} yet ({does} it does); use "
                           f"{S.setting('backend', 'numpy')}")


def _on(backend, prepared, data, progress) -> Solution:
    if is_empty(prepared):      # nothing to dispatch: no backend needs to know
        sol = empty_solution(prepared.template, progress)
    else:
        refuse_observers(backend, prepared.template.field)
        sol = backend.run(prepared, data, progress)
    sol.backend = backend.name
    return sol


def _fell_back(backend, what: str, rest) -> None:
    """One warning per reason ``auto`` moved past a backend (counted every time)."""
    if not rest:
        return
    reason = f"the {backend.name.upper()} backend {what}"
    with _fallback_lock:            # two threads falling back at once: one warning
        first = reason not in _fallback_reasons
        _fallback_reasons.add(reason)
    if first:
        after = next((b for b in rest if b.available()[0]), rest[-1])
        log.warning("%s; running on the %s backend instead", reason,
                    "numpy reference" if after.name == "numpy" else after.name)


def _numpy(prepared, data, progress) -> Solution:
    return registry.get("numpy").run(prepared, data, progress)


def _check_progress(progress) -> None:
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(f"progress must be None, True or a function "
                                f"progress(done, total), "
                                f"got {type(progress).__name__} {progress!r}")
