"""A call on the cpu backend: its kernel (kept on the Prepared call), then the runner of
a fixed-step method (runner.py) or of an adaptive method or save_at (adaptive_run.py)."""
from __future__ import annotations

from ...call.bound import Bound, Progress, Solution
from ...call import replay as _replay
from ...call.counters import COUNTERS
from ...ir import observers as _observers
from ..shader.adaptive_host import lean_field
from .adaptive_run import AdaptiveCall
from .kernel import CpuKernel, kernel
from .replay import Replay
from .runner import _Call


def run(prepared, data, progress: Progress = None, build=None, calls=None,
        history: bool = False) -> Solution:
    """``build(field, dtype, per_trajectory, dense)`` makes the kernel (default: the C
    compiler's), ``calls`` the (fixed, adaptive) runner classes (backends/cuda: on a GPU);
    ``history``: a save_every history stored by the kernel itself (shader/history.fits:
    as the GPU backends' shaders do, no call per saved step; runtime/fixed.py points it
    at the history array, target.py)."""
    t = prepared.template
    located = _observers.located(t.field)      # events, or an observer `first`
    stepped = t.adaptive is not None or t.save_at is not None or located
    bound = prepared.bound(data)
    # a call without save_at or events runs without the dense-only stages (dop853, vern7,
    # vern9: adaptive_host.lean_field); a Simulation always has them (adaptive_session)
    lean = t.adaptive is not None and t.save_at is None and not located
    k = _kernel(prepared, bound, dense=stepped, lean=lean, build=build,
                history=history)
    fixed, adaptive = calls or (_Call, AdaptiveCall)
    if stepped:         # bs3, dopri5, tsit5, or any method with save_at
        return adaptive(k, bound).solve(progress)
    call = fixed(k, bound)
    sol = call.solve(progress)
    if calls is None:   # a run_field being recorded: this call, to replay (replay.py)
        _replay.offer(lambda: Replay.of(call))
    return sol


def _kernel(prepared, bound: Bound, dense: bool, lean: bool = False,
            build=None, fresh: bool = False, history: bool = False) -> CpuKernel:
    """The call's kernel, kept on the Prepared call (a fixed-step method with save_at:
    its kernel of templates/adaptive.c.j2, keyed apart; ``lean``: the method without its
    dense-only stages, keyed apart where that is another field; ``fresh``, ``history``:
    kernel.kernel's variants, keyed apart). Every cpu call and session finds it here."""
    slot = prepared.slots.setdefault("cpu" if build is None else build.__module__, {})
    pt = bound.per_trajectory
    field = lean_field(bound.field) if lean else bound.field
    variants = {name: True for name, on in (("fresh", fresh), ("history", history)) if on}
    key = (bound.dtype.name, pt, dense) + (("lean",) if field is not bound.field else ()) \
        + tuple(variants)
    k = slot.get(key)
    if k is None:
        k = slot[key] = (build or kernel)(field, bound.dtype.name, pt, dense, **variants)
    else:
        COUNTERS.add("memory_hits")
    return k
