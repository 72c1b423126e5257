"""Adaptive methods with events on the reference backend (docs/language.md, "Events").

After an accepted step from t to t + dt, every condition is evaluated at its end;
the rows (trajectories, or basins) with one that went false -> true locate it on
the method's continuous extension (the ``save_at`` one) by bisection, the events
happen at the located time, and the row continues from there with its current
step size (the controller's proposal): the step ends early, ``t`` is the event
time, and F is evaluated again at the new state. A step that ends at an event
counts as accepted. "One step" for the 64-events limit is the span of the step
in which the first of them was located: events located before that span's end
count together (a Zeno accumulation ends with status 4 there).
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...ir.evaluate import INT
from .adaptive import _AdaptiveRun
from .events import Tracker, interpolant
from .observers import Observing


class _AdaptiveEventRun(_AdaptiveRun):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        self.outputs_at_events = {k: np.zeros(s, self.dtype)
                                  for k, s in bound.output_shapes.items()}
        self.tracker = Tracker(self, self.outputs_at_events)
        self.basin = self.field.basin is not None
        self.frozen = None
        # step-end observers (numpy/observers.py), None without them
        self.observing = Observing(self) if self.field.observer_rules else None

    def derivs(self, h: list, t, step, mask, stage: int) -> list:
        ks = super().derivs(h, t, step, mask, stage)
        if self.frozen is None or not self.frozen.any():
            return ks
        zero = self.dtype.type(0)
        return [np.where(self.frozen, zero, k) for k in ks]

    # --- hooks of _AdaptiveRun._solve -------------------------------------------------
    def begin(self, h: list, t, taken) -> None:
        tr = self.tracker
        self.lanes = tr.fresh(self)
        self.out_lanes = tr.fresh(self)
        self.window = np.full((self.layout.shape[0], 1), -np.inf, self.dtype)
        self.lanes["prev"] = [c.copy() for c in
                              tr.conditions(self, h, t, taken, self.layout.active)]
        self.frozen = self.lanes["frozen"]

    def finish_rows(self, which: np.ndarray, rows: np.ndarray) -> None:
        self.tracker.put(self.out_lanes, rows, self.tracker.take(self.lanes, which))

    def compact(self, keep: np.ndarray) -> None:
        self.lanes = self.tracker.take(self.lanes, keep)
        self.window = self.window[keep]
        self.frozen = self.lanes["frozen"]

    def counted(self) -> np.ndarray:
        return self.layout.active & ~self.lanes["frozen"]

    def all_stopped(self) -> np.ndarray:
        return np.all(self.lanes["frozen"], axis=1)

    def events_in_step(self, h, new, ks, t, t_new, use, accept, taken, cut):
        """(state after the step and its events, the time reached, whether the row
        reached t1, the rows whose step ended at an event)."""
        tr, lanes, lay = self.tracker, self.lanes, self.layout
        shape = lay.shape
        mask = lay.active & accept
        ends = tr.conditions(self, new, t_new, taken, mask)
        trig = tr.triggered(lanes, ends, mask)
        hit = np.zeros(shape, bool)
        for x in trig:
            hit |= x
        here = mask & hit.any(axis=1, keepdims=True)
        plain = mask & ~here
        for e in range(len(tr.events)):
            lanes["prev"][e] = np.where(plain, ends[e], lanes["prev"][e])
        moved = here.any(axis=1, keepdims=True)
        obs = self.observing
        if obs is not None:         # the accepted steps without an event: their ends
            live = plain & ~lanes["frozen"]
            interp = interpolant(self, self.dense, h, ks, use, new)
            new = obs.segment(self, h, new, t, t_new, use, taken, live, interp)
        if not moved.any():
            return new, t_new, cut, moved
        new = [np.where(lanes["frozen"], a, b) for a, b in zip(h, new)]
        interp = interpolant(self, self.dense, h, ks, use, new)
        earliest, thetas = tr.locate(self, interp, trig, t, use, taken, self.basin)
        earliest = np.broadcast_to(earliest, shape)
        row_theta = earliest.min(axis=1, keepdims=True)
        at_end = row_theta == 1
        t_ev = np.where(at_end, t_new, t + row_theta * use).astype(self.dtype)
        # the 64-events span: a new one starts at an event past the current one's end
        fresh = moved & (t_ev > self.window)
        lanes["in_step"] = np.where(fresh, 0, lanes["in_step"])
        self.window = np.where(fresh, t + use, self.window).astype(self.dtype)
        y_ev = interp(np.where(here, earliest, 1).astype(self.dtype))
        y_ev = [np.where(lanes["frozen"], a, b) for a, b in zip(h, y_ev)]
        t_lane = np.broadcast_to(t_ev, shape)
        if obs is not None:
            live = here & ~lanes["frozen"]
            y_ev = obs.segment(self, h, y_ev, t, t_lane, use, taken, live, interp,
                               upto=np.where(here, earliest, 1).astype(self.dtype))
        y_after = tr.happen(self, lanes, y_ev, t_lane, taken, thetas, earliest, here)
        if obs is not None:
            y_after = obs.jump(self, y_ev, y_after, t_lane, taken, live)
        new = [np.where(here, a, b) for a, b in zip(y_after, new)]
        t_new = np.where(moved, t_ev, t_new).astype(self.dtype)
        cut = cut & ~(moved & ~at_end)
        self.frozen = lanes["frozen"]
        return new, t_new, cut, moved

    def _pack(self, out_h, out_t, out_status, out_taken, out_rej, hist, out_next, saves):
        lay, lanes = self.full_layout, self.out_lanes
        stopped = lanes["status"] != 0
        row_t = np.broadcast_to(out_t, lay.shape)
        lane_t = np.where(stopped, lanes["t_stop"], row_t).astype(self.dtype)
        out_t_lanes = lane_t
        self.frozen = None
        self.lane_t = lane_t            # deposit's `t`: each lane's own final time
        sol = super()._pack(out_h, out_t, out_status, out_taken, out_rej, hist, out_next, saves)
        # per lane: a stopped lane's status and time (deposit's `t` is per row: redo it)
        sol.status = np.where(lay.to_grid(stopped), lay.to_grid(lanes["status"]),
                              sol.status).astype(np.int8)
        sol.t = lay.to_grid(out_t_lanes).astype(self.dtype)
        # a lane that stopped early in a basin: its own steps (the one it stopped in counts)
        sol.steps_taken = np.where(lay.to_grid(stopped), lay.to_grid(lanes["taken"]),
                                   sol.steps_taken).astype(np.int32)
        for k, v in self.outputs_at_events.items():
            sol.outputs[k] = (sol.outputs[k] + v).astype(self.dtype)
        sol.event_counts = (np.stack([lay.to_grid(c) for c in lanes["counts"]], axis=-1)
                            if self.tracker.n_when else
                            np.zeros(self.bound.grid_shape + (0,), np.int32)).astype(np.int32)
        return sol

    def time(self, n):
        lane_t = getattr(self, "lane_t", None)
        return self.final_t if lane_t is None else lane_t


def run(bound: Bound, progress: Progress = None) -> Solution:
    with np.errstate(all="ignore"):
        return _AdaptiveEventRun(bound, progress).solve()


__all__ = ["run", "INT"]
