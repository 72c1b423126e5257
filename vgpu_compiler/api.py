"""The Python face of VGPU: ``run_field``, ``solve``, ``load``, ``compile``, and the
kernel caches' management.

A call runs the pipeline (pipeline.py: text -> Compiled -> prepared call -> the
backend the registry chooses -> a Solution, errors located in the text); a call
given Dask arrays, or ``chunks=``, goes to distributed/ instead, whose blocks run
windows of it through the same pipeline on the workers.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .errors import ArgumentTypeError
from .call.bound import Progress, Solution
from .call.counters import COUNTERS
from .source import Located, Source, load, text_of

# The pipeline (front end, IR, the call's checks) is imported when a call first needs
# it: ``import vgpu`` loads none of it (tests/api/test_import_light.py).

__all__ = ["run_field", "solve", "load", "compile", "Source", "solve_window", "cache_stats",
           "cache_info", "clear_cache", "evict"]


def compile(src, field: str | None = None):
    """Parse and check a program; returns the Compiled object with every stage kept."""
    from .pipeline import compile as compile_program
    return compile_program(src, field)


def solve_window(*args, **kwargs):
    """pipeline.solve_window (what a Dask worker runs)."""
    from .pipeline import solve_window as window
    return window(*args, **kwargs)


def run_field(src, h0=None, *, params=None, inputs=None, dims=None, field=None,
              backend="auto", dtype="float32", dt=None, steps=None, t0=None, t1=None,
              rtol=None, atol=None, dt0=None, dtmax=None, max_steps=None,
              seed=0, chunks=None) -> np.ndarray:
    """Integrate every trajectory; returns the final states, grid_shape (+ (n_states,)).
    ``t1, rtol, atol, dt0, dtmax, max_steps``: an adaptive method's arguments;
    ``seed``: the key of a stochastic field's noise (an int in [0, 2^64)).
    Dask arrays for h0 or params, or ``chunks=``: a lazy dask array (distributed/)."""
    extra = (None if t1 is None and rtol is None and atol is None and dt0 is None
             and dtmax is None and max_steps is None
             else _overrides(t1, rtol, atol, dt0, dtmax, max_steps))
    key = None
    if chunks is None and extra is None:    # a repeated small call: its plan, if it has one
        replay = _replay or _replay_module()            # (call/replay.py)
        key = replay.key(src, field, backend, dtype, dt, steps, t0, seed)
        plan = None if key is None else replay.lookup(key)
        if plan is not None:
            states = plan.run(h0, params, inputs, dims)
            if states is not None:
                if states is not replay.BUSY:
                    return states
                key = None      # (another thread's replay: this call runs in full)
    if chunks is not None or _lazy(h0, params):
        return _distributed(src, h0, params, inputs, dims, field, backend, dtype, dt, steps,
                            t0, None, chunks, extra, seed).states
    from .pipeline import solve_call
    # the full call; with a key, recorded: a plan for the next ones
    with nullcontext() if key is None else replay.recording(key, h0, params, inputs, dims):
        sol = solve_call(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0,
                         None, None, extra, full=False, seed=seed)
    return sol.states


_replay = None


def _replay_module():
    global _replay
    from .call import replay
    _replay = replay
    return replay


def solve(src, h0=None, *, params=None, inputs=None, dims=None, field=None, backend="auto",
          dtype="float32", dt=None, steps=None, t0=None, save_every=None,
          progress: Progress = None, t1=None, rtol=None, atol=None, dt0=None, dtmax=None,
          max_steps=None, save_at=None, seed=0, chunks=None, sensitivities=None) -> Solution:
    """Like run_field, returning the whole Solution (outputs, steps_taken, status, t,
    steps_rejected, history). ``progress``: a function ``progress(done, total)``, or
    True for a terminal bar. ``save_at``: times whose states the history holds (the
    method's continuous extension). ``seed``: the key of a stochastic field's noise
    (an int in [0, 2^64)). ``sensitivities``: param names and ``init(x)`` entries; the
    Solution's ``sensitivities`` (and ``history_sensitivities``) hold the derivatives of
    the states with respect to them (ir/sensitivity.py). Dask arrays for h0 or params, or
    ``chunks=``: a Solution of lazy dask arrays (distributed/; ``progress`` is not
    available there)."""
    from .pipeline import solve_call
    extra = _overrides(t1, rtol, atol, dt0, dtmax, max_steps)
    if save_at is not None:
        extra["save_at"] = save_at
    if sensitivities is not None:
        if chunks is not None or _lazy(h0, params):
            raise ArgumentTypeError("sensitivities are not available for a run on a Dask "
                                    "cluster; run the call without chunks= (numpy arrays)")
        extra["sensitivities"] = sensitivities
    if chunks is not None or _lazy(h0, params):
        if progress not in (None, False):
            raise ArgumentTypeError("progress is not available for a run on a Dask cluster "
                                    "(dask.distributed's dashboard shows its tasks)")
        return _distributed(src, h0, params, inputs, dims, field, backend, dtype, dt, steps,
                            t0, save_every, chunks, extra, seed)
    if progress is True or progress is False:
        bar = _bar(src, field) if progress else None
        try:
            return solve_call(src, h0, params, inputs, dims, field, backend, dtype, dt, steps,
                          t0, save_every, bar, extra, seed=seed)
        finally:
            if bar is not None:
                bar.close()
    return solve_call(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0,
                  save_every, progress, extra, seed=seed)


def _overrides(*args) -> dict:
    from .call.adaptive import overrides
    return overrides(*args)


def _bar(src, field):
    """A progress bar labelled with the field's name (call/progress.py: tqdm, on stderr,
    drawn only on a terminal and only for runs longer than a moment)."""
    from .call.progress import bar
    from .pipeline import parsed
    text, filename = text_of(src)
    with Located(text, filename):
        return bar(parsed(text, filename).select(field).name)


def cache_stats() -> dict[str, int]:
    """The process's counters: compiles, memory_hits, disk_hits, dispatches, evictions,
    cpu_fallbacks, parses, parse_hits."""
    return COUNTERS.snapshot()


def cache_info() -> dict:
    """The kernel caches of every backend that keeps them (the registry's ``cached()``):
    ``memory_entries`` and ``memory_bytes`` in all, the disk root (``disk_folder``) with
    its ``disk_entries``, ``disk_bytes`` and bound (``disk_max_bytes``), one row per kind
    of disk entry (``disk``: kind, folder, entries, bytes, why off or None), each
    backend's own info under its name, and the counters."""
    from . import disk_cache as dc
    from .backends import cached
    out: dict = {}
    for name, caches in cached():
        out[name] = caches.info()
    mine = [out[name] for name, _ in cached()]
    rows = disk_rows()
    out.update({"memory_entries": sum(i.get("memory_entries", 0) for i in mine),
                "memory_bytes": sum(i.get("memory_bytes", 0) for i in mine),
                "disk_folder": str(dc.root()), "disk": rows,
                "disk_entries": sum(r["entries"] for r in rows),
                "disk_bytes": sum(r["bytes"] for r in rows), "disk_max_bytes": dc.max_bytes()})
    out.update(COUNTERS.snapshot())
    return out


def disk_rows() -> list[dict]:
    """Each registered kind of disk entry: kind, folder, entries, bytes and why that
    cache is off (None: on), read from the folders (no backend is started)."""
    from . import disk_cache as dc
    from .backends import cached
    trust = dc.Trust("")
    rows = []
    for _, caches in cached():
        for kind in caches.disk:
            where = dc.folder(kind)
            n, nbytes = dc.size(where, dc.SUFFIXES[kind])
            rows.append({"kind": kind, "folder": str(where), "entries": n, "bytes": nbytes,
                         "off": trust.why_off(where)})
    return rows


def clear_cache(*, memory: bool = True, disk: bool = True) -> dict:
    """Drop every compiled kernel from memory and/or every kernel from disk, of every
    backend that keeps them; returns how many were dropped: each backend's
    ``{"memory": n, "disk": n}`` under its name, ``memory`` and ``disk`` in all, and
    with ``disk`` the parser's tables and compiled templates (``startup``). Always
    safe: kernels are rebuilt on demand. ``memory`` also forgets the prepared calls
    (call/prepare.py), which hold the cpu backend's kernels: the next call compiles,
    and the replays of repeated calls (call/replay.py)."""
    from .backends import cached
    out: dict = {}
    if memory:
        from .call import prepare, replay
        prepare.clear()
        replay.clear()
    totals = {"memory": 0} if memory else {}
    if disk:
        totals["disk"] = 0
    for name, caches in cached():
        out[name] = got = caches.clear(memory, disk)
        for what in totals:
            totals[what] += got.get(what, 0)
    out.update(totals)
    if disk:
        from .backends.shader import template_cache
        from .frontend import parser_cache
        out["startup"] = parser_cache.clear() + template_cache.clear()   # tables, templates
    return out


def evict(src, *, field=None, dtype=None, per_trajectory=None) -> bool:
    """Drop one field's kernels (every shape, memory and disk), and every prepared call
    and replay of a repeated call (call/prepare.py, call/replay.py: they hold kernels);
    True if any kernel was cached.
    ``dtype`` and ``per_trajectory`` (the names of the params that were passed per
    trajectory) narrow it to those kernels; None means all."""
    from .backends import cached
    from .call.bind import working_dtype
    from .pipeline import parsed
    if isinstance(per_trajectory, str):
        per_trajectory = (per_trajectory,)
    if per_trajectory is not None and not (
            isinstance(per_trajectory, (list, tuple, set, frozenset))
            and all(isinstance(p, str) for p in per_trajectory)):
        raise ArgumentTypeError(f"per_trajectory must be the names of params (str), "
                                f"got {per_trajectory!r}")
    from .call import prepare, replay
    prepare.clear()         # (the prepared calls, whose slots hold the cpu backend's kernels,
    replay.clear()          # and the replays of every call: a plan holds its kernel)
    text, filename = text_of(src)
    with Located(text, filename):
        selected = parsed(text, filename).select(field)
        args = (None if dtype is None else working_dtype(dtype).name,
                None if per_trajectory is None else tuple(sorted(per_trajectory)))
        dropped = False
        for _, caches in cached():      # (a backend's evict() says what it can reach)
            if caches.evict is not None:
                dropped = caches.evict(selected, *args) or dropped
        return dropped


# --- a run on a Dask cluster (distributed/) -----------------------------------------
def _lazy(h0, params) -> bool:
    """True when h0 or a param is a Dask collection (checked without importing dask;
    numpy arrays and numbers, the usual case, are passed over first: this runs on every
    call)."""
    t = type(h0)
    if t is not np.ndarray and h0 is not None and hasattr(t, "__dask_graph__"):
        return True
    if type(params) is dict:
        for v in params.values():
            t = type(v)
            if t is not float and t is not np.ndarray and hasattr(t, "__dask_graph__"):
                return True
    return False


def _distributed(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0,
                 save_every, chunks, extra=None, seed=0) -> Solution:
    from .call.batch import require_flat
    from .distributed import ensemble
    from .pipeline import parsed
    text, filename = text_of(src)
    with Located(text, filename):
        require_flat(parsed(text, filename).select(field), h0, params,
                     "a call on a Dask cluster (dask arrays, or chunks=)")
        return ensemble.solve(Source(text, filename), h0, params, inputs, dims, field, backend,
                              dtype, dt, steps, t0, save_every, chunks, extra or None, seed)
