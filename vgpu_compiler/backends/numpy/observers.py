"""The reference backend's step-end observers (``peak``, ``trough``, ``first``): the
rules of a lowered field (ir/observers.py), applied to its hidden states.

The runners (fixed_events.py's ``EventRun``, adaptive_events.py's run) call, per
segment of a trajectory (a step, or the part of one before or after an event):

- ``see``: ``peak``/``trough`` at a state (``m = fmax(m, e)``, ``fmin``: a NaN value
  is passed over). The start value (the state's start expression) is ``e`` at t0;
  then every accepted step's end and, at an event, the states just before and just
  after it.
- ``crossing``: ``first``: where the observer is still NaN and COND is false at the
  segment's start and true at its end, the time located on the segment's continuous
  extension by the events' bisection (numpy/events.py ``bisect``; with noise, the
  segment's end), without ending the step.
- ``jump``: at an event's time, ``see`` before and after, and ``first`` takes the event
  time where the reset made COND true.
"""
from __future__ import annotations

import numpy as np

from ...ir.evaluate import Frame
from ...ir.events import BISECTIONS
from .events import bisect
from .interpreter import StageContext


class Observing:
    def __init__(self, run):
        rules = run.field.observer_rules
        self.extremes = [r for r in rules if r.kind != "first"]
        self.firsts = [r for r in rules if r.kind == "first"]
        self.noisy = bool(run.field.noises)
        self.bisections = BISECTIONS[run.dtype.name]

    def _values(self, run, key, exprs, h: list, t, step, mask) -> list:
        ctx = StageContext(run, dict(zip(run.names, h)), t, step)
        values = Frame(run.plan, ctx, run.dtype, run.fixed).run(run.schedule(key, exprs), mask)
        return [np.broadcast_to(v, run.layout.shape) for v in values]

    def see(self, run, h: list, t, step, mask) -> list:
        """``peak``/``trough`` updated on the lanes ``mask`` from the state ``h`` at t."""
        if not self.extremes or not mask.any():
            return h
        values = self._values(run, "observe", [r.expr for r in self.extremes], h, t, step,
                              mask)
        h = list(h)
        for r, v in zip(self.extremes, values):
            pick = np.fmax if r.kind == "peak" else np.fmin
            h[r.index] = np.where(mask, pick(h[r.index], v.astype(run.dtype)), h[r.index])
        return h

    def conditions(self, run, h: list, t, step, mask) -> list:
        return self._values(run, "observe_first", [r.expr for r in self.firsts], h, t, step,
                            mask)

    def hits(self, run, y0: list, y1: list, t_s, t_end, step, mask) -> list:
        """Per ``first``, the lanes of mask where it has not happened and COND goes
        false -> true from y0 (at t_s) to y1 (at t_end)."""
        if not self.firsts or not mask.any():
            return []
        before = self.conditions(run, y0, t_s, step, mask)
        after = self.conditions(run, y1, t_end, step, mask)
        return [mask & np.isnan(y1[r.index]) & ~a & b
                for r, a, b in zip(self.firsts, before, after)]

    def crossing(self, run, y0: list, y1: list, t_s, t_end, h_len, step, mask,
                 interp=None, upto=None) -> list:
        """``first`` located in the segment from (t_s, y0) to (t_end, y1): theta in [0, 1]
        of ``interp`` (the step's continuous extension), on [0, upto] when the segment
        ends at an event at theta ``upto``."""
        hits = self.hits(run, y0, y1, t_s, t_end, step, mask)
        if not any(x.any() for x in hits):
            return y1
        if upto is not None:        # the part of the step before its event
            h_len = h_len * upto
            inner = interp
            interp = lambda theta: inner(theta * upto)      # noqa: E731
        y1 = list(y1)
        for r, hit in zip(self.firsts, hits):
            if not hit.any():
                continue
            if self.noisy:      # noise: at the segment's end
                theta = np.ones(run.layout.shape, run.dtype)
            elif interp is None:
                raise AssertionError("a `first` to locate needs the step's interpolant")
            else:
                theta = bisect(run, interp, ("observe_first", r.index), r.expr, hit, t_s,
                               h_len, step, self.bisections)
            when = np.where(theta == 1, t_end, t_s + theta * h_len).astype(run.dtype)
            y1[r.index] = np.where(hit, np.broadcast_to(when, hit.shape), y1[r.index])
        return y1

    def jump(self, run, before: list, after: list, t_ev, step, mask) -> list:
        """At an event's time: the state just before (``before``) and just after."""
        if not mask.any():
            return after
        seen = self.see(run, before, t_ev, step, mask)
        after = list(after)
        for r in self.extremes + self.firsts:
            after[r.index] = np.where(mask, seen[r.index], after[r.index])
        after = self.see(run, after, t_ev, step, mask)
        if not self.firsts:
            return after
        was = self.conditions(run, before, t_ev, step, mask)
        now = self.conditions(run, after, t_ev, step, mask)
        t_lane = np.broadcast_to(np.asarray(t_ev, run.dtype), run.layout.shape)
        for r, a, b in zip(self.firsts, was, now):
            hit = mask & np.isnan(after[r.index]) & ~a & b
            after[r.index] = np.where(hit, t_lane, after[r.index])
        return after

    def segment(self, run, y0: list, y1: list, t_s, t_end, h_len, step, mask,
                interp=None, upto=None) -> list:
        """A segment's end: ``first`` located in it, then ``peak``/``trough`` at y1."""
        y1 = self.crossing(run, y0, y1, t_s, t_end, h_len, step, mask, interp, upto)
        return self.see(run, y1, t_end, step, mask)
