"""The numpy reference backend as the registry sees it: always available."""
from __future__ import annotations

from .. import Backend


def _available() -> tuple[bool, str]:
    return True, ""


def _run(prepared, data, progress=None):
    from . import runner        # the reference interpreter, loaded when first used
    return runner.run(prepared.bound(data), progress)


def _open(prepared, data):
    if prepared.template.adaptive is not None:
        from .adaptive_session import AdaptiveSession   # the controller kept in memory
        return AdaptiveSession(prepared, data)
    from .session import Session    # a Simulation's arrays, kept in memory
    return Session(prepared, data)


BACKEND = Backend(
    name="numpy",
    description="the numpy reference interpreter (always available; the CPU fallback)",
    available=_available,
    run=_run,
    open=_open,
    dtypes=("float32", "float64"),
    features=frozenset({"history", "flux", "reductions", "progress", "events", "stiff",
                        "adaptive", "noise", "save_at", "float64_functions",
                        "stiff_events", "observe_peak", "observe_first"}),
)
