"""The GLSL backend's ``run(prepared, data, progress) -> Solution``.

Compile once, bind once, dispatch many: a call's kernel comes from lookup.py (its
memory and disk caches); a repeated call of one dispatch takes the fast path
(fast.py); an adaptive method, or save_at, runs in adaptive_run.py; a ``save_every``
history the shader writes (shader/history.fits) runs the field's history kernel
(lookup.kernel_of_call's ``history``) on this full path, with no fast path.
"""
from __future__ import annotations

from . import device as gl
from ...call.bound import Progress, Solution
from ...call.prepare import Data, Prepared
from .adaptive_run import run as run_adaptive  # noqa: F401 (backend._run's)
from .execute import _here, execute, private_if_busy
from .fast import OneDispatch
from . import REDUCTION_ENV
from .plan import LIMITS, plan_for
from ..shader.history import fits as history_fits
from .kernel_cache import holding
from ...runtime.kernel_cache import environ_reader
from .lookup import (DISK, MEMORY, available, cache_info, canonical, clear_cache, evict,
                     kernel_of_call, need, set_cache_dir, set_memory_capacity)

# the backend's face, as the API, the command line and the tests call it (the caches
# and their management live in lookup.py)
__all__ = ["run", "available", "MEMORY", "DISK", "canonical", "cache_info", "clear_cache",
           "evict", "set_cache_dir", "set_memory_capacity"]


def run(prepared: Prepared, data: Data, progress: Progress = None) -> Solution:
    """Run one fixed-step call (backend._run sends the others to run_adaptive:
    shader/adaptive_host.runs_adaptive): its Prepared call (whose ``slots["glsl"]`` remembers the kernel of
    its shapes, and ``slots["glsl_fast"]`` the OneDispatch of a one-dispatch call) and
    its Data."""
    history = history_fits(prepared.template)   # save_every: the shader writes the history
    if progress is None and not data.origin and not history:   # (a window's place: no slot)
        slots = prepared.slots
        fast = slots.get("glsl_fast")
        if fast is not None and _still(fast, slots):
            sol = fast.call(data)       # (it counts the memory hit and the dispatch)
            if sol is not None:
                return sol
    bound = prepared.bound(data)
    need()
    if 0 in bound.grid_shape:       # the API answers an empty ensemble itself (call/empty.py)
        raise ValueError("the GLSL runner was given an empty ensemble")
    found = kernel_of_call(bound, history=history)
    kernel = private_if_busy(found)     # a progress callback's call: see execute.py
    with holding(kernel):
        sol = execute(kernel, bound, progress)  # (runtime/fixed.py; a history kernel writes b_hist)
        if (not history and kernel is found and bound.prepared is not None
                and kernel.program is not None and not bound.origin):
            plan = plan_for(kernel, bound)
            if OneDispatch.fits(kernel, bound, plan):
                bound.prepared.slots["glsl_fast"] = OneDispatch(kernel, bound, plan)
    if progress is not None:        # outside the lock: the callback may call run_field
        progress(bound.steps, bound.steps)
    return sol


def _still(fast: OneDispatch, slots: dict) -> bool:
    """True when ``fast`` still runs this call as ``run``'s full path would (the kernel
    cache's ``still``: the same kernel, still in the memory cache, VGPU_REDUCTION
    unchanged, no progress callback of a run of this thread underway, whose call gets a
    private kernel: private_if_busy), under the same limits and GL context."""
    return MEMORY.still(slots, "glsl", fast, _reduction_env(), (LIMITS.in_force, gl.GL.ctx),
                        _here)


_reduction_env = environ_reader(REDUCTION_ENV)
