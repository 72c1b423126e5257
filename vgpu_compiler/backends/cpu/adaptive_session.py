"""The cpu backend's Simulation session of an adaptive method: runtime/adaptive_session.py's
``TargetSession`` on the cpu's Target (target.py) of the adaptive C kernel's call
(templates/adaptive.c.j2; numpy arrays that stay alive between calls). ``advance_to(u)``
calls the kernel with ``u_pause = u`` and the one save time ``u``; a trajectory paused at
u has status ``PAUSED`` (running again at the next call)."""
from __future__ import annotations

import numpy as np

from ...runtime import adaptive_session as driver
from ..shader.adaptive import PAUSED, RUNNING
from .adaptive_run import AdaptiveCall, attempts_per_call
from .dispatch import _kernel
from .target import Target


class AdaptiveSession(driver.TargetSession):
    def __init__(self, prepared, data):
        driver.no_save_at(prepared)
        bound = prepared.bound(data)
        self.run = run = AdaptiveCall(_kernel(prepared, bound, dense=True), bound)
        target = Target(run, attempts_per_call(bound.field, run.nslots), adaptive=True)
        super().__init__(target, bound, ("cpu", "array"))

    def _running(self, cnt: np.ndarray) -> np.ndarray:
        return (cnt[2] == RUNNING) | (cnt[2] == PAUSED)

    def close(self) -> None:
        pass
