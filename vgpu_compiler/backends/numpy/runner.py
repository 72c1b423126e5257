"""The numpy reference backend: the oracle every other path is tested against.

``run(bound, progress=None) -> Solution`` integrates every trajectory at once, on the
run its method takes: fixed steps (interpreter.py), an adaptive method (adaptive.py)
or fixed steps saving at given times (dense_fixed.py; with events fixed_events.py).
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Progress, Solution
from .adaptive import run as run_adaptive      # bs3, dopri5, tsit5
from .dense_fixed import run as run_saving      # fixed-step save_at (Hermite)
from .interpreter import _Run
from .adaptive_events import run as run_adaptive_events
from .fixed_events import run as run_events     # `when`, `stop when`


def run(bound: Bound, progress: Progress = None) -> Solution:
    if bound.field.jacobian is not None:        # rodas4 (with or without events)
        from .rosenbrock import run as run_rosenbrock
        return run_rosenbrock(bound, progress)
    # step-end observers (peak, trough, first) run where events do (numpy/observers.py)
    located = bool(bound.field.events or bound.field.observer_rules)
    if bound.adaptive is not None and located:
        return run_adaptive_events(bound, progress)
    if bound.adaptive is not None:
        return run_adaptive(bound, progress)
    if located:                                 # (save_at too: fixed_events.py)
        return run_events(bound, progress)
    if bound.save_at is not None:
        return run_saving(bound, progress)
    with np.errstate(all="ignore"):
        return _Run(bound, progress).solve()
