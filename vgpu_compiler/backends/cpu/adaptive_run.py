"""Running an adaptive method's C kernel (templates/adaptive.c.j2), or a fixed-step
method's with save_at: kernel calls until every trajectory has ended.

Each call runs at most ``attempts`` step attempts per trajectory (about
``runner.WORK_PER_CALL`` lane-stage evaluations in all, so Ctrl-C stops a long run
at the next call); a trajectory resumes where the last call left it (its state,
t, step size, FSAL derivative and counters stay in their buffers). Between
calls the host counts the trajectories still running (the status row) and
reports progress. Tolerances, t0, t1, dt0, dtmax, max_steps and the save_at
times are run-time values: a new value never recompiles.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Progress, Solution
from ...ir import controller as C
from ..shader.adaptive import COUNTERS as ROWS, RUNNING
from . import runner
from .runner import _Call


class AdaptiveCall(_Call):
    def values(self) -> dict:
        b, cast = self.bound, self.bound.dtype.type
        a, n_save = b.adaptive, 0 if b.save_at is None else len(b.save_at)
        out = {**super().values(), "nsave": n_save}
        if a is None:                   # a fixed-step method run for save_at
            return out
        out.update({"steps": 0, "t1": float(cast(a.t1)), "rtol": float(cast(a.rtol)),
                    "atol": float(cast(a.atol)), "dt0": float(cast(a.dt0 or 0.0)),
                    "dtmax": float(cast(a.dtmax)),
                    "gap": float(cast(C.end_gap(a.t1, b.dtype))),
                    "max_steps": int(a.max_steps), "pause": float(cast(a.t1))})
        return out

    def _buffer(self, b: dict) -> np.ndarray:
        bound, n, dt = self.bound, self.n, self.bound.dtype
        n_states = len(bound.field.states)
        n_save = 0 if bound.save_at is None else len(bound.save_at)
        role = b["role"]
        if role == "ad":                # t, step size, then the FSAL derivative per state
            self.ad = np.zeros((2 + n_states, n), dt)
            return self.ad
        if role == "cnt":               # taken, rejected, status, after a reject, next save
            self.cnt = np.zeros((len(ROWS), n), np.int32)
            return self.cnt
        if role == "run":
            return np.zeros(4, np.uint32)
        if role == "save":
            times = np.zeros(max(1, n_save), dt)
            times[:n_save] = [] if bound.save_at is None else bound.save_at.astype(dt)
            return times
        if role == "hist":              # (time, state, trajectory)
            self.hist = np.zeros((max(1, n_save), n_states, n), dt)
            return self.hist
        return super()._buffer(b)

    def solve(self, progress: Progress) -> Solution:
        bound, n = self.bound, self.n
        stages = max(1, len(self.k.meta.get("stages", ())) or 7)
        attempts = max(1, runner.WORK_PER_CALL // (max(1, self.nslots) * stages))
        step0 = 0
        while True:
            self._call(step0, 0, False, attempts=attempts)
            step0 = 1
            running = int(np.count_nonzero(self.cnt[2] == RUNNING))
            if progress is not None:
                progress(n - running, n)
            if not running:
                break
        grid = bound.grid_shape
        sol = Solution(states=self._pack(), outputs=self._outputs(),
                       steps_taken=self.cnt[0].reshape(grid).copy())
        sol.steps_rejected = self.cnt[1].reshape(grid).copy()
        sol.status = self.cnt[2].astype(np.int8).reshape(grid)
        sol.t = self.ad[0].reshape(grid).copy()
        if bound.save_at is not None:
            n_save = len(bound.save_at)
            hist = self.hist[:n_save]
            for j in range(n_save):             # stopped early: repeat the final state
                late = self.cnt[4] <= j
                hist[j][:, late] = self.state[:, late]
            sol.history = (np.stack([self._pack(hist[j]) for j in range(n_save)]) if n_save
                           else np.zeros((0,) + sol.states.shape, bound.dtype))
            sol.times = bound.save_at.astype(bound.dtype)
        return sol
