"""``save_at`` for the fixed-step methods on the reference: cubic Hermite per step.

A time s inside step n (``t_n <= s <= t_{n+1}``, ``t_n = t0 + n*dt``; the other way
round for a backward run, dt < 0, whose save times come in its direction) takes
``y(t_n + theta*dt)`` from the cubic Hermite interpolant through both step
ends, values and slopes (``ir.embedded.hermite``'s formula, the contract's
rule for every method without an interpolant of its own): the run keeps the
states at the ends of the steps that hold a save time (nothing else), then
evaluates F there. A time that is a step end takes that state exactly; a basin
that collapsed repeats its final state at later times. Saving never changes
the steps.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...ir.evaluate import INT
from .interpreter import _Run


class _SavingRun(_Run):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        d, steps = self.dtype, bound.steps
        s = bound.save_at.astype(d)
        if steps and self.dt != 0:
            n = np.floor((s - self.t0) / self.dt).astype(np.int64)
        else:
            n = np.zeros(len(s), np.int64)
        self.bracket = np.clip(n, 0, max(steps - 1, 0))
        self.saves = s
        self.needed = set(self.bracket.tolist()) | set((self.bracket + 1).tolist())
        self.kept: dict[int, list] = {}

    def step(self, h: list, n: int, mask) -> list:
        new = super().step(h, n, mask)
        if n in self.needed and n not in self.kept:
            self.kept[n] = [x.copy() for x in h]
        if n + 1 in self.needed:
            self.kept[n + 1] = [x.copy() for x in new]
        return new

    def solve(self) -> Solution:
        lay = self.layout
        h0 = self.start()
        self.kept[0] = [x.copy() for x in h0]
        h, taken, history = self.integrate(h0)
        outputs = self.deposit(h, taken)
        sol = Solution(states=self.pack(h), outputs=outputs,
                       steps_taken=lay.per_basin_to_grid(taken).astype(INT))
        sol.history = self._history(h, taken)
        sol.times = self.saves.copy()
        return sol

    def _history(self, h: list, taken: np.ndarray) -> np.ndarray:
        d = self.dtype.type
        slopes: dict[int, list] = {}

        def slope(n: int) -> list:
            if n not in slopes:
                t = self.time(n)
                ks = self.derivs(self.kept[n], t, INT.type(n), self.layout.active, 0)
                slopes[n] = [k.copy() for k in ks]
            return slopes[n]

        final_t = self.time(taken.reshape(-1, 1))         # per basin
        out = []
        for s, n in zip(self.saves, self.bracket.tolist()):
            if self.bound.steps == 0 or n + 1 not in self.kept:
                y = [x.copy() for x in h]
            else:
                y0, y1 = self.kept[n], self.kept[n + 1]
                f0, f1 = slope(n), slope(n + 1)
                theta = (s - self.time(n)) / self.dt
                y = []
                for a, b, fa, fb in zip(y0, y1, f0, f1):
                    th2 = theta * theta
                    v = ((d(1) - d(3) * th2 + d(2) * th2 * theta) * a
                         + (d(3) * th2 - d(2) * th2 * theta) * b
                         + self.dt * ((theta - d(2) * th2 + th2 * theta) * fa
                                      + (th2 * theta - th2) * fb))
                    v = np.where(theta == 0, a, np.where(theta == 1, b, v))
                    y.append(v)
            late = (s >= final_t) if self.dt >= 0 else (s <= final_t)  # collapsed: the end
            late = np.broadcast_to(late, self.layout.shape)
            y = [np.where(late, hf, yi) for hf, yi in zip(h, y)]
            out.append(self.pack(y))
        shape = (0,) + self.pack(h).shape
        return np.stack(out).astype(self.dtype) if out else np.zeros(shape, self.dtype)


def run(bound: Bound, progress: Progress = None) -> Solution:
    with np.errstate(all="ignore"):
        return _SavingRun(bound, progress).solve()
