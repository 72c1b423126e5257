"""The reference backend's adaptive methods (bs3, dopri5, tsit5; rodas4's stages:
rosenbrock.py): per-trajectory steps.

Values are arrays of shape ``(rows, lanes)`` as in the fixed-step runner
(``layout.py``), with one change: without a ``basin`` statement every
trajectory is a row of its own (a basin of one lane), so every row has its
own ``t``, ``dt`` (shape ``(rows, 1)``), accepted and rejected counts. A basin
is one row and shares one step size: its error is the largest over its
active lanes and it accepts or rejects as one (contract, "Adaptive methods").

One attempt is vectorised over every running row: the method's stages
(``ir.step``: the same Combinations as the fixed-step runner), the embedded
error, the controller of ``ir/controller.py``. Rows that finish stop counting
and, once at most half the working rows still run, the working set is
compacted to them (the per-lane params, starts and layout are indexed down),
so the ensemble's work follows each trajectory's own step count, not the
hardest one's times N. ``save_at`` values come from the method's continuous
extension inside the step that covers each time, after the step is accepted:
saving never changes the steps.
"""
from __future__ import annotations

import copy

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...ir import controller as C
from ...ir.evaluate import INT
from ...ir.step import step_program
from .layout import Layout
from .interpreter import _Run

COMPACT_BELOW = 64          # never compact a working set smaller than this


def _subset(layout: Layout, rows: np.ndarray) -> Layout:
    """The layout of some rows (basins) only: every per-row array indexed down."""
    sub = copy.copy(layout)
    sub.grid_index = [g[rows] for g in layout.grid_index]
    sub.global_index = [g[rows] for g in layout.global_index]
    sub.trajectory = layout.trajectory[rows]
    sub.basin_index = [b[rows] for b in layout.basin_index]
    sub.extent = [e[rows] if np.shape(e)[0] == layout.shape[0] else e for e in layout.extent]
    sub.active = layout.active[rows]
    sub.flat = layout.flat[rows]
    sub.count = layout.count[rows]
    sub.shape = sub.active.shape
    return sub


class _AdaptiveRun(_Run):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        f, a = self.field, bound.adaptive
        if f.basin is None:         # every trajectory steps on its own: a row each
            self.layout = Layout(bound.grid_shape, (1,) * len(bound.grid_shape), bound.origin)
            self.params = {k: self._param(v) for k, v in bound.params.items()}
        self.full_layout = self.layout
        self.program = step_program(f.solver.tableau)
        d = self.dtype.type
        self.t1, self.rtol, self.atol = d(a.t1), d(a.rtol), d(a.atol)
        self.dtmax = d(a.dtmax)
        self.gap = d(C.end_gap(a.t1, self.dtype))
        self.c = [d(float(st.c)) for st in self.program.stages]
        self.error = self._terms(self.program.error)
        self.error2 = None if self.program.error2 is None else self._terms(self.program.error2)
        self.dense = [self._terms(p) for p in self.program.dense]
        self._alloc()

    def _alloc(self) -> None:
        """Arrays kept for the working set (reallocated when it is compacted)."""
        self.scratch = self.arrays(2)
        self.stage_state = self.arrays(len(self.field.states))
        self.new_state = [self.arrays(len(self.field.states)) for _ in range(2)]
        self.into = []
        self.fixed = {}

    def time(self, n):              # deposit() asks for the final time of every row
        return self.final_t

    def F(self, h: list, t, step, mask, stage: int) -> list:
        """The derivatives, each on every lane (a constant one broadcast)."""
        shape = self.layout.shape
        return [k if np.shape(k) == shape else self.full(k)
                for k in self.derivs(h, t, step, mask, stage)]

    def error_norm(self, h, new, ks, use):
        """Each lane's error of the step from h to new (ir/controller.py's error_norm),
        over the states the norm measures (the first ``field.n_error``: a field joined
        with its sensitivities measures its own)."""
        ratio = np.zeros(np.shape(h[0]), self.dtype)
        ratio2 = np.zeros(np.shape(h[0]), self.dtype) if self.error2 else None
        n = self.field.n_error
        for i in range(n):
            sc = C.scale(h[i], new[i], self.rtol, self.atol)
            e = use * self.weighted(ks, self.error, i)
            ratio += np.square(e / sc)
            if ratio2 is not None:
                ratio2 += np.square(use * self.weighted(ks, self.error2, i) / sc)
        return C.error_norm(ratio, ratio2, n, self.program.norm)

    def weighted(self, ks: list, terms: list, i: int):
        """sum(w_j * k_j[i]) over a Combination's terms (no h, no dt)."""
        total = None
        for j, w in terms:
            k = ks[j][i] if w is None else w * ks[j][i]
            total = k if total is None else total + k
        return total if total is not None else np.zeros(self.layout.shape, self.dtype)

    # --- the starting step ---------------------------------------------------------
    def first_step(self, h: list, k0: list, t, mask) -> np.ndarray:
        """The first step per row: dt0, or Hairer's (ir/controller.py), the smallest of
        each row's active lanes."""
        lay, d = self.layout, self.dtype.type
        if self.bound.adaptive.dt0 is not None:
            return np.minimum(np.full(t.shape, d(self.bound.adaptive.dt0)), self.dtmax)

        def smallest(x):
            return np.where(lay.active, x, d(np.inf)).min(axis=1, keepdims=True)

        def trial(t_trial, y1, h0):
            self.dt = self.dt_0d = h0                  # `dt` in F: the trial step
            return np.stack([x.copy() for x in
                             self.F(y1, t_trial, np.zeros(t.shape, INT), mask, 1)])

        return C.initial_step(trial, t, np.stack(h), np.stack(k0), self.t1 - t,
                              self.program.q, self.rtol, self.atol, self.dtmax, smallest,
                              n=self.field.n_error)

    # --- the whole run -------------------------------------------------------------
    def solve(self) -> Solution:
        with np.errstate(all="ignore"):
            return self._solve()

    def _solve(self) -> Solution:
        lay, d, prog = self.layout, self.dtype.type, self.program
        n_rows, n_states = lay.shape[0], len(self.names)
        a = self.bound.adaptive
        save_at = self.bound.save_at
        n_save = 0 if save_at is None else len(save_at)
        saves = None if save_at is None else save_at.astype(self.dtype)
        hist = (None if save_at is None
                else np.zeros((n_save, n_states) + lay.shape, self.dtype))
        # results of every row, written as rows finish (and at the end)
        out_h = np.zeros((n_states,) + lay.shape, self.dtype)
        out_t = np.full((n_rows, 1), d(self.bound.t0))
        out_status = np.zeros(n_rows, np.int8)
        out_taken = np.zeros(n_rows, INT)
        out_rej = np.zeros(n_rows, INT)
        out_next = np.zeros(n_rows, np.int64)

        h = self.start()
        rows = np.arange(n_rows)
        t = np.full((n_rows, 1), d(self.bound.t0))
        taken = np.zeros((n_rows, 1), INT)
        rejected = np.zeros(n_rows, INT)
        after_reject = np.zeros((n_rows, 1), bool)
        status = np.zeros(n_rows, np.int8)
        next_save = np.zeros(n_rows, np.int64)
        running = np.ones(n_rows, bool)
        if a.t1 == self.bound.t0:
            running[:] = False
        mask = lay.active
        self.begin(h, t, taken)             # (events: every condition at t0)
        k0 = [x.copy() for x in self.F(h, t, taken, mask, 0)]
        dt = self.first_step(h, k0, t, mask) if running.any() else np.zeros_like(t)
        # save_at times at t0 take the start
        if n_save:
            while True:
                due = (next_save < n_save) & (saves[np.minimum(next_save, n_save - 1)] <= t[:, 0])
                if not due.any():
                    break
                idx = np.nonzero(due)[0]
                hist[next_save[idx], :, rows[idx]] = np.stack(h, axis=1)[idx]
                next_save[idx] += 1

        def finish(which: np.ndarray) -> None:
            """Copy rows (positions in the working set) to the results."""
            g = rows[which]
            out_h[:, g] = np.stack(h)[:, which]
            out_t[g] = t[which]
            out_status[g] = status[which]
            out_taken[g] = taken[which, 0]
            out_rej[g] = rejected[which]
            out_next[g] = next_save[which]
            self.finish_rows(which, g)

        done_mark, total = 0, 1000
        span = float(a.t1 - self.bound.t0) or 1.0
        while running.any():
            if running.sum() * 2 <= len(rows) and len(rows) > COMPACT_BELOW:
                finish(~running)
                keep = np.nonzero(running)[0]
                rows = rows[keep]
                self.layout = lay = _subset(self.full_layout, rows)
                self.params = {k: (v[rows] if isinstance(v, np.ndarray) and v.ndim else v)
                               for k, v in self._full_params.items()}
                self.init = {k: v[rows] for k, v in self._full_init.items()}
                h = [x[keep] for x in h]
                k0 = [x[keep] for x in k0]
                t, dt, taken = t[keep], dt[keep], taken[keep]
                rejected, after_reject = rejected[keep], after_reject[keep]
                status, next_save, running = status[keep], next_save[keep], running[keep]
                self.compact(keep)
                self._alloc()
            mask = lay.active & running[:, None]
            # the step: at most dtmax, cut to end exactly at t1 near it
            step_dt = np.minimum(dt, self.dtmax)
            cut = t + step_dt >= self.t1 - self.gap
            use = np.where(cut, self.t1 - t, step_dt).astype(self.dtype)
            self.dt = self.dt_0d = use
            ks = self.stage_values(h, k0, t, use, taken, mask)
            new = self.combine(h, ks, self.update, self.new_state[0])
            # the error norm, per row the largest over its active lanes
            err_lane = self.attempt_error(self.error_norm(h, new, ks, use))
            err = np.where(self.counted(), err_lane, d(0)).max(axis=1, keepdims=True)
            finite = np.isfinite(err)
            accept = running[:, None] & finite & (err <= 1)
            reject = running[:, None] & ~accept
            proposed = np.minimum(use * C.factor(err, prog.q, after_reject), self.dtmax)
            # accepted rows move on
            acc = accept[:, 0]
            if acc.any():
                t_new = np.where(cut, self.t1, t + use).astype(self.dtype)
                moved = None
                if self.field.events or self.field.observer_rules:   # located events end
                    # the step early; step-end observers (adaptive_events.py)
                    new, t_new, cut, moved = self.events_in_step(
                        h, new, ks, t, t_new, use, accept, taken, cut)
                if n_save:
                    self._save(hist, saves, next_save, acc, rows, h, new, ks, t, t_new, use)
                last = ks[prog.last] if prog.fsal else None
                h = [np.where(accept, nw, old) for nw, old in zip(new, h)]
                if last is not None:
                    k0 = [np.where(accept, kl, old) for kl, old in zip(last, k0)]
                t = np.where(accept, t_new, t)
                taken = taken + accept
                if not prog.fsal:
                    k0 = [np.where(accept, kn, old) for kn, old in
                          zip(self.F(h, t, taken, lay.active & accept, 0), k0)]
                if moved is not None and moved.any():    # F at the state after events
                    k0 = [np.where(moved, kn, old) for kn, old in
                          zip(self.F(h, t, taken, lay.active & moved, 0), k0)]
                k0 = [x.copy() for x in k0]
                ended = acc & cut[:, 0]
                if moved is not None:
                    ended |= acc & self.all_stopped()
                running &= ~ended
                if self.field.collapse is not None:
                    running &= ~(acc & self._collapsed(h, t, taken, mask & accept))
                hit_max = running & acc & (taken[:, 0] >= a.max_steps)
                status[hit_max] = C.MAX_STEPS
                running &= ~hit_max
            rejected += reject[:, 0]
            after_reject = np.where(running[:, None], reject, after_reject)
            under = running & ~acc & ~finite[:, 0] | (running & C.underflow(
                proposed, t, self.dtype)[:, 0] & ~(acc & cut[:, 0]))
            status[under] = C.STEP_UNDERFLOW
            running &= ~under
            dt = np.where(running[:, None], proposed, dt)
            if self.progress is not None:
                frac = out_t[:, 0] - self.bound.t0
                frac[rows] = t[:, 0] - self.bound.t0
                mark = int(total * min(1.0, float(frac.mean()) / span))
                if mark > done_mark:
                    self.progress(mark, total)
                    done_mark = mark
        finish(np.ones(len(rows), bool))
        self.layout = self.full_layout
        self.params, self.init = self._full_params, self._full_init
        self._alloc()
        if self.progress is not None and done_mark != total:
            self.progress(total, total)
        return self._pack(out_h, out_t, out_status, out_taken, out_rej, hist, out_next, saves)

    def stage_values(self, h: list, k0: list, t, use, taken, mask) -> list:
        """The k_s of one attempt of step ``use`` from (t, h), k0 = F(t, h): explicit
        stages (a Rosenbrock method's K_s: rosenbrock.py)."""
        if self.program.implicit is not None:       # never the explicit stages for rodas4
            raise AssertionError(f"{self.program.method} runs through numpy/rosenbrock.py")
        d = self.dtype.type
        ks = [k0]
        for st in self.program.stages[1:]:
            terms = self._terms(st.state)
            hs = self.combine(h, ks, terms, self.stage_state)
            ks.append(self.F(hs, t + d(float(st.c)) * use, taken, mask, st.index))
        return ks

    # --- hooks for events (adaptive_events.py): nothing to do without them ---------------
    def begin(self, h: list, t, taken) -> None:
        pass

    def attempt_error(self, err_lane: np.ndarray) -> np.ndarray:
        """Each lane's error norm of this attempt (rodas4: a singular W's, rosenbrock.py)."""
        return err_lane

    def finish_rows(self, which: np.ndarray, rows: np.ndarray) -> None:
        pass

    def compact(self, keep: np.ndarray) -> None:
        pass

    def counted(self) -> np.ndarray:
        """The lanes whose error counts (the active ones; events: not stopped)."""
        return self.layout.active

    def start(self) -> list:
        h = super().start()
        self._full_params, self._full_init = self.params, self.init
        return h

    def _collapsed(self, h: list, t, taken, mask) -> np.ndarray:
        """Rows whose active lanes all hold ``collapse when`` after an accepted step."""
        lay = self.layout
        frame, _ = self.frame(dict(zip(self.names, h)), t, taken, mask)
        schedule = self.schedule("collapse", [self.field.collapse])
        cond = np.broadcast_to(frame.run(schedule, mask)[0], lay.shape)
        return np.all(cond | ~lay.active, axis=1)

    def _save(self, hist, saves, next_save, acc, rows, h, new, ks, t, t_new, use) -> None:
        """The save_at times inside the accepted steps (t, t_new], from the continuous
        extension y(t + theta*dt) = h + dt * sum_p theta^(p+1) * D_p; at t_new itself,
        the new state."""
        n_save = len(saves)
        dense = None
        while True:
            s = saves[np.minimum(next_save, n_save - 1)]
            due = acc & (next_save < n_save) & (s <= t_new[:, 0])
            if not due.any():
                return
            if dense is None:
                dense = [[self.weighted(ks, p, i) for p in self.dense]
                         for i in range(len(h))]
            idx = np.nonzero(due)[0]
            theta = ((s[idx] - t[idx, 0]) / use[idx, 0]).reshape(-1, 1)
            at_end = (s[idx] == t_new[idx, 0]).reshape(-1, 1)
            for i in range(len(h)):
                acc_p = np.zeros((len(idx), h[i].shape[1]), self.dtype)
                power = np.ones_like(theta)
                for dp in dense[i]:
                    power = power * theta
                    acc_p = acc_p + power * dp[idx]
                value = h[i][idx] + use[idx] * acc_p
                hist[next_save[idx], i, rows[idx]] = np.where(at_end, new[i][idx], value)
            next_save[idx] += 1

    def _pack(self, out_h, out_t, out_status, out_taken, out_rej, hist, out_next, saves):
        lay = self.full_layout
        h = [out_h[i] for i in range(out_h.shape[0])]
        self.final_t = out_t
        outputs = self.deposit(h, out_taken.reshape(-1, 1))
        sol = Solution(states=self.pack(h), outputs=outputs,
                       steps_taken=lay.per_basin_to_grid(out_taken).astype(INT))
        sol.status = lay.per_basin_to_grid(out_status).astype(np.int8)
        sol.t = lay.per_basin_to_grid(out_t[:, 0]).astype(self.dtype)
        sol.steps_rejected = lay.per_basin_to_grid(out_rej).astype(np.int32)
        if hist is not None:
            n_save = len(saves)
            for j in range(n_save):             # stopped early: repeat the final state
                late = np.nonzero(out_next <= j)[0]
                hist[j][:, late] = out_h[:, late]
            sol.history = np.stack([self.pack([hist[j, i] for i in range(out_h.shape[0])])
                                    for j in range(n_save)]) if n_save else \
                np.zeros((0,) + sol.states.shape, self.dtype)
            sol.times = saves.astype(self.dtype)
        return sol


def run(bound: Bound, progress: Progress = None) -> Solution:
    with np.errstate(all="ignore"):
        return _AdaptiveRun(bound, progress).solve()
