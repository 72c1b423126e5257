"""The cpu backend's Simulation session of an adaptive method: runtime/adaptive_session.py's
``Session`` (its reads and checkpoints) on the adaptive C kernel's buffers
(templates/adaptive.c.j2; numpy arrays that stay alive between calls). ``advance_to(u)``
calls the kernel, as adaptive_run.py does, with ``u_pause = u`` and the one save time
``u``; a trajectory paused at u has status ``PAUSED`` (running again at the next call).
"""
from __future__ import annotations

import numpy as np

from ...runtime import adaptive_session as driver
from ..shader.adaptive import PAUSED, RUNNING
from .adaptive_run import AdaptiveCall, attempts_per_call
from .dispatch import _kernel
from .runner import _is_int


class AdaptiveSession(driver.Session):
    def __init__(self, prepared, data):
        driver.no_save_at(prepared)
        bound = prepared.bound(data)
        k = _kernel(prepared, bound, dense=True)
        self.run = run = AdaptiveCall(k, bound)
        self.dtype, self.field, self.grid = bound.dtype, bound.field, bound.grid_shape
        meta = k.meta
        floats = [u for u in meta["uniforms"] if not _is_int(u, meta)]
        self._pause = next(i for i, u in enumerate(floats) if u["role"] == "pause")
        roles = [b["role"] for b in meta["buffers"]]
        self.save = run.buffers[roles.index("save")]
        self.init = run.buffers[roles.index("init")] if "init" in roles else None
        self.n, self.uses_init = run.cnt.shape[1], self.init is not None
        self.attempts = attempts_per_call(bound.field, run.nslots)
        self.until = self.dtype.type(bound.t0)
        run._call(0, 0, False, attempts=0, nsave=1)     # the start: F there, the first step

    def advance_to(self, until: float) -> None:
        run, u = self.run, self.dtype.type(until)
        run.floats[self._pause] = float(u)
        self.save[0] = u
        step0 = 2
        while True:
            run._call(step0, 0, False, attempts=self.attempts, nsave=1)
            step0 = 1
            if not (run.cnt[2] == RUNNING).any():
                break
        self.until = u

    def _running(self, cnt: np.ndarray) -> np.ndarray:
        return (cnt[2] == RUNNING) | (cnt[2] == PAUSED)

    def _raw(self) -> dict:
        run = self.run
        raw = {"state": run.state, "ad": run.ad, "cnt": run.cnt, "hist": run.hist[0]}
        return raw if self.init is None else {**raw, "init": self.init}

    def _write(self, arrays: dict) -> None:
        run = self.run
        run.state[:], run.ad[:], run.cnt[:] = arrays["b_state"], arrays["b_ad"], arrays["b_cnt"]
        run.hist[0] = arrays["b_hist"]
        if self.init is not None:
            self.init[:] = arrays["b_init"]

    def _outputs(self) -> dict:
        return self.run._outputs()

    def close(self) -> None:
        pass
