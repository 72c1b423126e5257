"""The reference backend's events (``when``, ``stop when``): docs/language.md, "Events".

``Tracker`` holds what events add to a run, per lane of its layout (arrays of
shape ``(rows, lanes)``): the previous value of every condition (events are
edge-triggered), which lanes are frozen (stopped: status 1, or 4 after too many
events in one step), the time each stopped, how often each ``when`` fired, and
the outputs its ``flux`` deposits into. Its methods work on whatever layout the
run has (the whole one, or a subset of rows), so the location path runs only
on the rows that have an event in a step:

- ``conditions``: every condition on a state (no coupled values: events may not
  read them);
- ``locate``: per lane and triggered condition, the samples and then the bisection
  on the step's continuous extension (``ir.events``); per row (a basin), the earliest;
- ``happen``: at the located time, the earliest event of each lane that has it,
  then one pass over every condition in written order (a condition that was
  false before and holds now fires, seeing the assignments before it), the
  64-events limit, stops; then every condition's value becomes the previous one.

The fixed-step runner (``EventRun``, ``fixed_events.py``) and the adaptive one
(``adaptive.py``'s hooks) decide what a step is and call these.
"""
from __future__ import annotations

import numpy as np

from ...ir import controller as C
from ...ir.evaluate import INT, Frame, check_index
from ...ir.events import BISECTIONS, MAX_PER_STEP, SAMPLE_HALVINGS, SAMPLES
from .interpreter import StageContext


class Tracker:
    def __init__(self, run, outputs: dict):
        f = run.field
        self.events = f.events
        self.n_when = f.n_when
        self.noisy = bool(f.noises)
        self.outputs = outputs                  # name -> array, the deposits of `when` flux
        self.bisections = BISECTIONS[run.dtype.name]

    # --- per-lane arrays of one layout --------------------------------------------
    def fresh(self, run) -> dict:
        shape = run.layout.shape
        return {"prev": [np.zeros(shape, bool) for _ in self.events],
                "frozen": ~run.layout.active,
                "status": np.zeros(shape, np.int8),
                "t_stop": np.zeros(shape, run.dtype),
                "taken": np.zeros(shape, np.int32),    # a stopped lane's own steps
                "counts": np.zeros((self.n_when,) + shape, np.int32),
                "in_step": np.zeros(shape, np.int32)}

    @staticmethod
    def take(lanes: dict, rows) -> dict:
        return {k: ([x[rows] for x in v] if isinstance(v, list)
                    else v[:, rows] if k == "counts" else v[rows]) for k, v in lanes.items()}

    @staticmethod
    def put(lanes: dict, rows, part: dict) -> None:
        for k, v in part.items():
            if isinstance(v, list):
                for whole, sub in zip(lanes[k], v):
                    whole[rows] = sub
            elif k == "counts":
                lanes[k][:, rows] = v
            else:
                lanes[k][rows] = v

    # --- evaluation ------------------------------------------------------------------
    def frame(self, run, h: list, t, step) -> Frame:
        ctx = StageContext(run, dict(zip(run.names, h)), t, step)
        return Frame(run.plan, ctx, run.dtype, run.fixed)

    def conditions(self, run, h: list, t, step, mask) -> list:
        """Every event's condition on state h (bool arrays of the layout's shape)."""
        schedule = run.schedule("events", [e.cond for e in self.events])
        values = self.frame(run, h, t, step).run(schedule, mask)
        return [np.broadcast_to(v, run.layout.shape) for v in values]

    def triggered(self, lanes: dict, ends: list, mask) -> list:
        """Per condition, the lanes (of mask, not frozen) where it went false -> true."""
        live = mask & ~lanes["frozen"]
        return [live & ~p & c for p, c in zip(lanes["prev"], ends)]

    # --- location ----------------------------------------------------------------------
    def locate(self, run, interp, trig: list, t_s, h_len, step, basin: bool):
        """(theta of each row's earliest event, shape (rows, 1) for a basin, else (rows,
        lanes); per condition, its located theta on each lane, inf where it did not
        trigger). ``interp(theta)`` is the state on the continuous extension."""
        shape = run.layout.shape
        thetas = []
        for e, hit in enumerate(trig):
            theta = np.full(shape, np.inf, run.dtype)
            if hit.any():
                found = (np.ones(shape, run.dtype) if self.noisy   # noise: the step's end
                         else self._bisect(run, interp, e, hit, t_s, h_len, step))
                theta = np.where(hit, found, theta)
            thetas.append(theta)
        own = np.minimum.reduce(thetas) if thetas else np.full(shape, np.inf, run.dtype)
        earliest = own.min(axis=1, keepdims=True) if basin else own
        return earliest, thetas

    def _bisect(self, run, interp, e: int, hit, t_s, h_len, step):
        return bisect(run, interp, ("event", e), self.events[e].cond, hit, t_s, h_len, step,
                      self.bisections)

    # --- what happens at an event's time -------------------------------------------------
    def happen(self, run, lanes: dict, h: list, t_ev, step, thetas, earliest, here) -> list:
        """At time t_ev (state h there, before any assignment) in the rows ``here``: each
        lane whose own earliest event is at the row's earliest theta fires it, then one
        pass over every condition in written order; then every condition's value is
        the previous one. Returns the state after."""
        mask = here & ~lanes["frozen"]
        first = np.full(run.layout.shape, -1)
        for e in reversed(range(len(self.events))):
            first = np.where(thetas[e] == earliest, e, first)
        fired_first = mask & (first >= 0)
        h = [x.copy() for x in h]
        for e in range(len(self.events)):
            h = self._fire(run, lanes, e, fired_first & (first == e), h, t_ev, step)
        mask = mask & ~lanes["frozen"]
        if mask.any():
            for e, event in enumerate(self.events):
                armed = mask & ~lanes["frozen"] & ~lanes["prev"][e] & (first != e)
                if not armed.any():
                    continue
                now = self.conditions_one(run, e, h, t_ev, step, armed)
                h = self._fire(run, lanes, e, armed & now, h, t_ev, step)
        after = self.conditions(run, h, t_ev, step, here)
        for e in range(len(self.events)):
            lanes["prev"][e] = np.where(here, after[e], lanes["prev"][e])
        return h

    def conditions_one(self, run, e: int, h: list, t, step, mask):
        schedule = run.schedule(("event", e), [self.events[e].cond])
        return np.broadcast_to(self.frame(run, h, t, step).run(schedule, mask)[0],
                               run.layout.shape)

    def _fire(self, run, lanes: dict, e: int, m, h: list, t_ev, step) -> list:
        """Event e on the lanes m (not frozen): past 64 events in this step a lane ends
        with status 4 and its state before; else the assignments (all values first),
        the flux deposits, the count; a stop freezes the lane with status 1."""
        m = m & ~lanes["frozen"]
        if not m.any():
            return h
        over = m & (lanes["in_step"] >= MAX_PER_STEP)
        if over.any():
            self._freeze(lanes, over, C.TOO_MANY_EVENTS, t_ev, step)
            m = m & ~over
            if not m.any():
                return h
        lanes["in_step"] += m
        event = self.events[e]
        if event.stop:
            self._freeze(lanes, m, C.STOPPED, t_ev, step)
            return h
        frame = self.frame(run, h, t_ev, step)
        values = [np.broadcast_to(frame.eval(v, m), run.layout.shape) for _, v in event.assigns]
        for fl in event.flux:
            self._deposit(run, frame, fl, m)
        lanes["counts"][event.block] += m
        h = list(h)
        for (k, _), v in zip(event.assigns, values):
            h[k] = np.where(m, v.astype(run.dtype), h[k])
        return h

    def _deposit(self, run, frame: Frame, fl, m) -> None:
        out = self.outputs[fl.output]
        shape = run.layout.shape
        index = [frame.eval(i, m) for i in fl.index]
        value = np.broadcast_to(frame.eval(fl.value, m), shape).astype(run.dtype)
        check_index(fl.output, "output", out.shape, index, m, fl.span)
        where = [np.broadcast_to(i, shape)[m] for i in index]
        flat = np.ravel_multi_index(where, out.shape) if out.ndim else where
        np.add.at(out.reshape(-1), flat, value[m])

    @staticmethod
    def _freeze(lanes: dict, m, code: int, t_ev, step) -> None:
        """Stop the lanes m at t_ev in step ``step`` (the steps before it), which counts
        in the lane's own steps_taken."""
        lanes["frozen"] = lanes["frozen"] | m
        lanes["taken"] = np.where(m, np.broadcast_to(step, m.shape) + 1, lanes["taken"])
        lanes["status"] = np.where(m, np.int8(code), lanes["status"])
        lanes["t_stop"] = np.where(m, np.broadcast_to(t_ev, m.shape), lanes["t_stop"])


def bisect(run, interp, key, cond, hit, t_s, h_len, step, bisections: int):
    """theta of the first crossing of ``cond`` the samples see (ir.events.SAMPLES) on the
    lanes ``hit``: the condition at every sample j / SAMPLES, the first where it holds
    (1 if none before) giving the bracket [(j - 1) / SAMPLES, j / SAMPLES], then
    bisection of it (an event's, and an observer's ``first``: numpy/observers.py)."""
    d = run.dtype.type
    shape = run.layout.shape
    lo, hi = np.zeros(shape, run.dtype), np.ones(shape, run.dtype)
    schedule = run.schedule(key, [cond])

    def holds(theta, lanes):
        y = interp(theta)
        ctx = StageContext(run, dict(zip(run.names, y)), t_s + theta * h_len, step)
        value = Frame(run.plan, ctx, run.dtype, run.fixed).run(schedule, lanes)[0]
        return lanes & np.broadcast_to(value, shape)

    todo = hit.copy()
    for j in range(1, SAMPLES):     # (every sample on every lane of hit, as the kernels)
        now = holds(np.full(shape, d(j / SAMPLES), run.dtype), hit) & todo
        hi = np.where(now, d(j / SAMPLES), hi)
        lo = np.where(now, d((j - 1) / SAMPLES), lo)
        todo &= ~now
    lo = np.where(todo, d((SAMPLES - 1) / SAMPLES), lo)
    half = d(0.5)
    for _ in range(bisections - SAMPLE_HALVINGS):
        mid = (lo + hi) * half
        value = holds(mid, hit)
        hi = np.where(value, mid, hi)
        lo = np.where(hit & ~value, mid, lo)
    return hi


def interpolant(run, dense: list, y: list, ks: list, h_len, end: list):
    """theta -> the state y + h_len * sum_p theta^(p+1) * D_p (``dense``: per power, the
    run's terms of its Combination over ``ks``); at theta = 1 exactly ``end``, the
    step's end state."""
    sums = [[run_weighted(run, ks, terms, i) for terms in dense] for i in range(len(y))]

    def at(theta):
        out = []
        for i, yi in enumerate(y):
            acc = np.zeros(run.layout.shape, run.dtype)
            power = np.ones_like(theta)
            for dp in sums[i]:
                power = power * theta
                acc = acc + power * dp
            value = yi + h_len * acc
            out.append(np.where(theta == 1, end[i], value))
        return out
    return at


def run_weighted(run, ks: list, terms: list, i: int):
    """sum(w_j * k_j[i]) over a Combination's terms (in increasing j)."""
    total = None
    for j, w in terms:
        k = ks[j][i] if w is None else w * ks[j][i]
        total = k if total is None else total + k
    return total if total is not None else np.zeros(run.layout.shape, run.dtype)


__all__ = ["Tracker", "bisect", "interpolant", "run_weighted", "INT"]
