"""A call on the cpu backend: its kernel (kept on the Prepared call), then the runner of
a fixed-step method (runner.py) or of an adaptive method or save_at (adaptive_run.py)."""
from __future__ import annotations

from ...call.bound import Bound, Progress, Solution
from ...call.counters import COUNTERS
from .adaptive_run import AdaptiveCall
from .kernel import CpuKernel, kernel
from .runner import _Call


def run(prepared, data, progress: Progress = None) -> Solution:
    t = prepared.template
    stepped = t.adaptive is not None or t.save_at is not None or bool(t.field.events)
    bound = prepared.bound(data)
    k = _kernel(prepared, bound, dense=stepped)
    if stepped:         # bs3, dopri5, tsit5, or any method with save_at
        return AdaptiveCall(k, bound).solve(progress)
    return _Call(k, bound).solve(progress)


def _kernel(prepared, bound: Bound, dense: bool) -> CpuKernel:
    """The call's kernel, kept on the Prepared call (a fixed-step method with save_at:
    its kernel of templates/adaptive.c.j2, keyed apart)."""
    slot = prepared.slots.setdefault("cpu", {})
    pt = bound.per_trajectory
    key = (bound.dtype.name, pt, dense)
    k = slot.get(key)
    if k is None:
        k = slot[key] = kernel(bound.field, bound.dtype.name, pt, dense)
    else:
        COUNTERS.add("memory_hits")
    return k
