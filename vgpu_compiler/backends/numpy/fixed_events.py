"""Fixed-step methods with events on the reference backend (docs/language.md, "Events").

Every running row takes step n as the runner always does (vectorised over all of
them); the conditions are evaluated at its end. Only the rows with a lane whose
condition went false -> true take the location path, on a copy of the run made
for those rows (``_part``): the step is taken again from its start (the same
numbers), the event located on its Hermite extension (``ir.events``), the
events happen, and the rest of the step is a partial step from the event time,
checked again, until the step ends at ``t0 + (n+1) * dt``. In a partial step
``dt`` is the partial step's length, in every stage (``take``). With ``save_at``
the rows with a save time in step n take that path too: each (partial) step's
times up to its event (or its end) come from its Hermite extension, at the event
time itself the state after the events (``_save``); a time a lane never reaches
(stopped, collapsed) is its final state. Without a basin every trajectory is a row
of its own (its own event times); in a basin, the basin's step ends at its
lanes' earliest event. A stopped lane keeps its state (its derivatives are taken
as zero, so in a basin its stage states, and the coupled values computed from
them, are its final state).
"""
from __future__ import annotations

import copy

import numpy as np

from ...call.bound import Bound, Progress, Solution, saved_steps
from ...ir.evaluate import INT
from ...ir.events import dense_program
from ...ir.step import step_program
from .adaptive import _subset
from .events import Tracker, interpolant
from .layout import Layout
from .interpreter import _Run
from .noise import Noise
from .observers import Observing


class EventRun(_Run):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        f = self.field
        self.basin = f.basin is not None
        if not self.basin:          # every trajectory a row of its own
            self.layout = Layout(bound.grid_shape, (1,) * len(bound.grid_shape), bound.origin)
            self.params = {k: self._param(v) for k, v in bound.params.items()}
            self.scratch = self.arrays(2)
            self.stage_state = self.arrays(len(f.states))
            self.new_state = [self.arrays(len(f.states)) for _ in range(2)]
            if self.noise is not None:
                self.noise = Noise(self)
        dense, self.end_slope = dense_program(f.solver.tableau)
        self.dense = [self._terms(p) for p in dense]
        self.program = step_program(f.solver.tableau)
        self.outputs_at_events = {k: np.zeros(s, self.dtype)
                                  for k, s in bound.output_shapes.items()}
        self.tracker = Tracker(self, self.outputs_at_events)
        # step-end observers (numpy/observers.py), None without them
        self.observing = Observing(self) if f.observer_rules else None
        self.frozen = None          # lanes whose derivatives are zero (stopped)
        self.final_t = None
        self.saves = None           # save_at: the times, the history, each lane's next
        if bound.save_at is not None:
            self.saves = bound.save_at.astype(self.dtype)
            self.hist = np.zeros((len(self.saves), len(f.states)) + self.layout.shape,
                                 self.dtype)
            self.next_save = np.zeros(self.layout.shape, np.int64)

    def derivs(self, h: list, t, step, mask, stage: int) -> list:
        ks = super().derivs(h, t, step, mask, stage)
        if self.frozen is None or not self.frozen.any():
            return ks
        zero = self.dtype.type(0)
        return [np.where(self.frozen, zero, k) for k in ks]

    def time(self, n):
        if self.final_t is not None:
            return self.final_t
        return super().time(n)

    # --- a step from t_s of length h_len (arrays) on this run's layout -------------------
    def take(self, y: list, t_s, h_len, n: int, mask) -> tuple[list, list]:
        """(the stages' k, each on every lane, the end state) of one step of length
        h_len: ``dt`` (as the field reads it) is h_len in every stage, so the values kept
        for the run that read dt (``fixed``) are computed again for it."""
        self.dt = self.dt_0d = h_len
        self.fixed = {}
        step = INT.type(n)
        ks: list = []
        for st in self.program.stages:
            terms = self._terms(st.state)
            hs = self.combine(y, ks, terms, self.stage_state)
            k = self.derivs(hs, t_s + self.dtype.type(float(st.c)) * h_len, step, mask, len(ks))
            ks.append([x.copy() if np.shape(x) == self.layout.shape else self.full(x) for x in k])
        new = [x.copy() for x in self.combine(y, ks, self.update, self.new_state[0])]
        return ks, new

    def _part(self, rows: np.ndarray) -> "EventRun":
        """A copy of this run for some rows only (its own buffers; plan and schedules
        shared)."""
        part = copy.copy(self)
        part.layout = _subset(self.layout, rows)
        part.params = {k: (v[rows] if isinstance(v, np.ndarray) and v.ndim else v)
                       for k, v in self.params.items()}
        part.init = {k: v[rows] for k, v in self.init.items()}
        part.scratch = part.arrays(2)
        part.stage_state = part.arrays(len(self.field.states))
        part.new_state = [part.arrays(len(self.field.states)) for _ in range(2)]
        part.into, part.fixed = [], {}
        return part

    # --- the whole run -------------------------------------------------------------------
    def integrate(self, h: list) -> tuple[list, np.ndarray, list]:
        steps, lay, every = self.bound.steps, self.layout, self.bound.save_every
        tr = self.tracker
        lanes = self.lanes = tr.fresh(self)
        t0 = self.time(0)
        lanes["prev"] = [c.copy() for c in tr.conditions(self, h, t0, INT.type(0), lay.active)]
        if self.saves is not None:      # save_at times at t0: the start
            self._save(lay.active, lambda theta: h, t0, self.dtype.type(1), t0, h, self.next_save,
                       self.hist)
        running = np.ones(lay.shape[0], bool)       # rows (basins) not collapsed
        taken = np.zeros(lay.shape, INT)
        history = [h] if every else []
        tick, reported = max(1, steps // 100), 0
        for n in range(steps):
            live_rows = running & ~np.all(lanes["frozen"], axis=1)
            if not live_rows.any():
                break
            self.frozen = lanes["frozen"]
            col = live_rows[:, None]
            mask = lay.active & col
            new = self.step(h, n, mask)
            taken += mask & ~lanes["frozen"]
            t_end = self.time(n + 1)
            ends = tr.conditions(self, new, t_end, INT.type(n), mask)
            trig = tr.triggered(lanes, ends, mask)
            hit = np.zeros(lay.shape, bool)
            for x in trig:
                hit |= x
            ev_rows = hit.any(axis=1) & live_rows
            if self.saves is not None:      # a save_at time in the step: taken there too
                ev_rows |= self._due(t_end, mask & ~lanes["frozen"]).any(axis=1)
            obs = self.observing
            if obs is not None and self.noise is None:  # a `first` to locate: that path too
                for x in obs.hits(self, h, new, self.time(n), t_end, INT.type(n),
                                  mask & ~lanes["frozen"]):
                    ev_rows |= x.any(axis=1)
            plain = (col & ~ev_rows[:, None]) & ~lanes["frozen"]
            h_start = h
            h = [np.where(plain, a, b) for a, b in zip(new, h)]
            if obs is not None:
                h = obs.segment(self, h_start, h, self.time(n), t_end, self.dt, INT.type(n),
                                plain)
            for e in range(len(tr.events)):
                lanes["prev"][e] = np.where(plain, ends[e], lanes["prev"][e])
            if ev_rows.any() and self.noise is not None:
                h = self._events_at_end(ev_rows, trig, new, h, t_end, n)
            elif ev_rows.any():
                h = self._events_in_step(np.nonzero(ev_rows)[0], h_start, h, n)
            if self.field.collapse is not None:
                running = running & ~self.collapse_vote(h, n, live_rows)
            if every and ((n + 1) % every == 0 or n + 1 == steps):
                history.append([x.copy() for x in h])
            if self.progress is not None and ((n + 1) % tick == 0 or n + 1 == steps):
                self.progress(n + 1, steps)
                reported = n + 1
        if every:
            history += [h] * (len(saved_steps(steps, every)) - len(history))
        if self.progress is not None and reported != steps:
            self.progress(steps, steps)
        self.frozen = None
        return h, taken, history

    def _events_at_end(self, ev_rows, trig: list, new: list, h: list, t_end, n: int) -> list:
        """With noise: the events of step n happen at its end, no location."""
        tr, lanes = self.tracker, self.lanes
        lanes["in_step"][:] = 0
        here = self.layout.active & ev_rows[:, None]
        inf = self.dtype.type(np.inf)
        thetas = [np.where(x, self.dtype.type(1), inf) for x in trig]
        ones = np.ones(self.layout.shape, self.dtype)
        live = here & ~lanes["frozen"]
        y = [np.where(live, a, b) for a, b in zip(new, h)]
        t = np.full(self.layout.shape, t_end, self.dtype)
        obs = self.observing
        if obs is not None:
            y = obs.segment(self, h, y, self.time(n), t_end, self.dt, INT.type(n), live)
        before = y
        y = tr.happen(self, lanes, y, t, INT.type(n), thetas, ones, here)
        if obs is not None:
            y = obs.jump(self, before, y, t, INT.type(n), live)
        return [np.where(here, a, b) for a, b in zip(y, h)]

    def _events_in_step(self, rows: np.ndarray, h_start: list, h: list, n: int) -> list:
        """Step n again for these rows, with its events: located, happening, and the
        rest of the step after each; the save_at times in each (partial) step, up to its
        event; the results written back into h and the lanes."""
        tr, d = self.tracker, self.dtype.type
        part = self._part(rows)
        lanes = tr.take(self.lanes, rows)
        lanes["in_step"][:] = 0
        shape = part.layout.shape
        saving = self.saves is not None
        if saving:
            next_save, hist = self.next_save[rows], self.hist[:, :, rows]
        t_end = np.full(shape, self.time(n + 1), self.dtype)
        t_s = np.full(shape, self.time(n), self.dtype)
        h_len = np.full(shape, d(self.bound.dt), self.dtype)
        y = [x[rows] for x in h_start]
        pending = np.ones(shape, bool) & part.layout.active
        step = INT.type(n)
        while True:
            rows_on = pending.any(axis=1)
            if not rows_on.any():
                break
            part.frozen = lanes["frozen"]
            mask = part.layout.active & rows_on[:, None]
            ks, y1 = part.take(y, t_s, h_len, n, mask)
            ends = tr.conditions(part, y1, t_end, step, mask)
            trig = tr.triggered(lanes, ends, mask)
            hit = np.zeros(shape, bool)
            for x in trig:
                hit |= x
            here = mask & hit.any(axis=1, keepdims=True)
            done = mask & ~here
            live = mask & ~lanes["frozen"]      # (before this part's events)
            due = saving and self._due(t_end, live, next_save).any()
            y_start = y
            obs, ended = self.observing, done & ~lanes["frozen"]
            y = [np.where(ended, a, b) for a, b in zip(y1, y)]
            for e in range(len(tr.events)):
                lanes["prev"][e] = np.where(done, ends[e], lanes["prev"][e])
            pending &= ~done
            firsts = obs is not None and any(
                x.any() for x in obs.hits(part, y_start, y, t_s, t_end, step, ended))
            if not here.any() and not due and not firsts:
                if obs is not None:
                    y = obs.see(part, y, t_end, step, ended)
                continue
            if self.end_slope:
                ks = ks + [[x.copy() if np.shape(x) == shape else part.full(x) for x in
                            part.derivs(y1, t_end, step, mask, 0)]]
            interp = interpolant(part, self.dense, y_start, ks, h_len, y1)
            if obs is not None:
                y = obs.segment(part, y_start, y, t_s, t_end, h_len, step, ended, interp)
            if not here.any():
                if saving:
                    self._save(live, interp, t_s, h_len, t_end, y, next_save, hist)
                continue
            earliest, thetas = tr.locate(part, interp, trig, t_s, h_len, step, self.basin)
            earliest = np.broadcast_to(earliest, shape)
            at_end = earliest == 1
            t_ev = np.where(at_end, t_end, t_s + earliest * h_len).astype(self.dtype)
            y_ev = interp(np.where(here, earliest, 1).astype(self.dtype))
            y_ev = [np.where(lanes["frozen"], a, b) for a, b in zip(y, y_ev)]
            moving_lanes = here & ~lanes["frozen"]
            if obs is not None:
                y_ev = obs.segment(part, y_start, y_ev, t_s, t_ev, h_len, step, moving_lanes,
                                   interp, upto=earliest)
            y_after = tr.happen(part, lanes, y_ev, t_ev, step, thetas, earliest, here)
            if obs is not None:
                y_after = obs.jump(part, y_ev, y_after, t_ev, step, moving_lanes)
            y = [np.where(here, a, b) for a, b in zip(y_after, y)]
            if saving:      # up to the event (there: the state after it), or the step's end
                self._save(live, interp, t_s, h_len, np.where(here, t_ev, t_end), y,
                           next_save, hist)
            finished = here & (at_end | lanes["frozen"])
            pending &= ~finished
            moving = here & ~finished
            t_s = np.where(moving, t_ev, t_s)
            h_len = np.where(moving, t_end - t_ev, h_len).astype(self.dtype)
        tr.put(self.lanes, rows, lanes)
        if saving:
            self.next_save[rows], self.hist[:, :, rows] = next_save, hist
        out = [x.copy() for x in h]
        for whole, sub in zip(out, y):
            whole[rows] = sub
        return out

    # --- save_at ---------------------------------------------------------------------------
    def _due(self, t_up, lanes, next_save=None) -> np.ndarray:
        """The lanes (of ``lanes``) with a save_at time at or before t_up still to save."""
        nxt = self.next_save if next_save is None else next_save
        n_save = len(self.saves)
        s = self.saves[np.minimum(nxt, n_save - 1)]
        reached = s >= t_up if self.bound.dt < 0 else s <= t_up   # in the run's direction
        return lanes & (nxt < n_save) & reached

    def _save(self, lanes, interp, t_s, h_len, t_up, y_up: list, next_save, hist) -> None:
        """The save_at times in (the last saved, t_up] of the lanes ``lanes``, from the
        (partial) step from t_s of length h_len: ``interp`` at theta = (s - t_s) / h_len,
        at t_up itself the state ``y_up`` (after that time's events)."""
        n_save = len(self.saves)
        while True:
            due = self._due(t_up, lanes, next_save)
            if not due.any():
                return
            s = self.saves[np.minimum(next_save, n_save - 1)]
            theta = np.where(due, (s - t_s) / h_len, 1).astype(self.dtype)
            y = interp(theta)
            at_up = s == t_up
            where = np.nonzero(due)
            for i in range(len(y_up)):
                value = np.where(at_up, y_up[i], np.broadcast_to(y[i], due.shape))
                hist[next_save[where], i, where[0], where[1]] = value[where]
            next_save += due

    def solve(self) -> Solution:
        lay = self.layout
        h, taken, history = self.integrate(self.start())
        lanes = self.lanes
        stopped = lanes["status"] != 0
        self.final_t = np.where(stopped, lanes["t_stop"], super().time(taken)).astype(self.dtype)
        outputs = self.deposit(h, taken)
        for k, v in self.outputs_at_events.items():
            outputs[k] = (outputs[k] + v).astype(self.dtype)
        sol = Solution(states=self.pack(h), outputs=outputs,
                       steps_taken=lay.to_grid(taken).astype(INT))
        sol.status = lay.to_grid(lanes["status"]).astype(np.int8)
        sol.t = lay.to_grid(self.final_t).astype(self.dtype)
        sol.event_counts = np.stack([lay.to_grid(c) for c in lanes["counts"]], axis=-1) \
            if self.tracker.n_when else np.zeros(self.bound.grid_shape + (0,), np.int32)
        sol.event_counts = sol.event_counts.astype(np.int32)
        if self.saves is not None:      # not reached (stopped, collapsed): the final state
            for j in range(len(self.saves)):
                late = self.next_save <= j
                for i in range(len(h)):
                    self.hist[j, i][late] = h[i][late]
            shape = (0,) + sol.states.shape
            sol.history = (np.stack([self.pack(list(x)) for x in self.hist]) if len(self.saves)
                           else np.zeros(shape, self.dtype))
            sol.times = self.saves.copy()
        if self.bound.save_every:
            saved = saved_steps(self.bound.steps, self.bound.save_every)
            sol.history = np.stack([self.pack(x) for x in history])
            sol.times = np.stack([super(EventRun, self).time(m) for m in saved]
                                 ).astype(self.dtype)
        return sol


def run(bound: Bound, progress: Progress = None) -> Solution:
    with np.errstate(all="ignore"):
        return EventRun(bound, progress).solve()
