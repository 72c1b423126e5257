"""The reference backend's Simulation session of an adaptive method (call/session.py).

It runs the attempts of one ``solve`` to t1 (adaptive.py's ``_AdaptiveRun._solve``,
the same operations in the same order, on every row: no compaction, which changes no
value) and keeps the controller between calls: per row its t, dt, FSAL derivative,
counters and flags. ``advance_to(u)`` lets a row attempt while its t < u; an accepted
step that ends after u gives the state at u from its continuous extension (``_save``
with the one time u, exactly what ``save_at=[..., u, ...]`` computes) and is *not*
kept: the row stays at the step's start, and the next advance takes the same step
again (same inputs, same result) and goes on. A step that ends at or before u is kept
as the one run keeps it. The steps taken are therefore those of one run, whatever
the pieces.

Step-end observers (``peak``, ``trough``, ``first``: numpy/observers.py) see each
accepted step that is kept, as the one run's (adaptive_events.py) do: ``first`` located
on its continuous extension, then ``peak``/``trough`` at its end; the step that covers
``u`` is seen when it is kept, by the next advance (a crossing inside it counts from
then). Their value at ``u`` is the one held (a continuous extension of a constant is
that constant, but for the rounding).
"""
from __future__ import annotations

import numpy as np

from ...call.session import Snapshot
from ...errors import BackendError
from ...ir import controller as C
from ...ir.evaluate import INT
from .adaptive import _AdaptiveRun
from .events import interpolant
from .observers import Observing


class AdaptiveSession:
    def __init__(self, prepared, data):
        t = prepared.template
        if t.save_at is not None:
            raise BackendError("a Simulation takes no save_at (advance(until=...) reads "
                               "the states at any time)")
        self.prepared = prepared
        self.run = _AdaptiveRun(prepared.bound(data), None)
        rules = self.run.field.observer_rules
        self.observing = Observing(self.run) if rules else None
        self.held = [r.index for r in rules]    # the rows of peak, trough and first
        self._begin()

    # --- the start (as _solve's) -------------------------------------------------------
    def _begin(self) -> None:
        run = self.run
        lay, d = run.layout, run.dtype.type
        n_rows = lay.shape[0]
        with np.errstate(all="ignore"):
            self.h = [np.array(x) for x in run.start()]
            self.t = np.full((n_rows, 1), d(run.bound.t0))
            self.taken = np.zeros((n_rows, 1), INT)
            self.rejected = np.zeros(n_rows, INT)
            self.after_reject = np.zeros((n_rows, 1), bool)
            self.status = np.zeros(n_rows, np.int8)
            self.running = np.ones(n_rows, bool)
            if run.bound.adaptive.t1 == run.bound.t0:
                self.running[:] = False
            mask = lay.active
            self.k0 = [x.copy() for x in run.F(self.h, self.t, self.taken, mask, 0)]
            self.dt = (run.first_step(self.h, self.k0, self.t, mask) if self.running.any()
                       else np.zeros_like(self.t))
        self.until = d(run.bound.t0)
        self.at = [x.copy() for x in self.h]

    # --- running -----------------------------------------------------------------------
    def advance_to(self, until: float) -> None:
        with np.errstate(all="ignore"):
            self._advance_to(self.run.dtype.type(until))

    def _advance_to(self, u) -> None:
        run = self.run
        lay, d, prog = run.layout, run.dtype.type, run.program
        a = run.bound.adaptive
        saves = np.array([u], run.dtype)
        at = np.zeros((1, len(self.h)) + lay.shape, run.dtype)
        covered = np.zeros(lay.shape[0], bool)      # rows whose value at u is in ``at``
        rows = np.arange(lay.shape[0])
        h, k0, t, dt, taken = self.h, self.k0, self.t, self.dt, self.taken
        rejected, after_reject = self.rejected, self.after_reject
        status, running = self.status, self.running
        while True:
            go = running & (t[:, 0] < u) & ~covered
            if not go.any():
                break
            mask = lay.active & go[:, None]
            step_dt = np.minimum(dt, run.dtmax)
            cut = t + step_dt >= run.t1 - run.gap
            use = np.where(cut, run.t1 - t, step_dt).astype(run.dtype)
            run.dt = run.dt_0d = use
            ks = [k0]
            for st in prog.stages[1:]:
                terms = run._terms(st.state)
                hs = run.combine(h, ks, terms, run.stage_state)
                ks.append(run.F(hs, t + d(float(st.c)) * use, taken, mask, st.index))
            new = run.combine(h, ks, run.update, run.new_state[0])
            err_lane = run.error_norm(h, new, ks, use)
            err = np.where(run.counted(), err_lane, d(0)).max(axis=1, keepdims=True)
            finite = np.isfinite(err)
            ok = go[:, None] & finite & (err <= 1)
            reject = go[:, None] & ~ok
            proposed = np.minimum(use * C.factor(err, prog.q, after_reject), run.dtmax)
            t_new = np.where(cut, run.t1, t + use).astype(run.dtype)
            # an accepted step that ends after u: the value at u, and the step is not kept
            over = ok[:, 0] & (t_new[:, 0] > u)
            if over.any():
                nxt = np.zeros(lay.shape[0], np.int64)
                run._save(at, saves, nxt, over, rows, h, new, ks, t, t_new, use)
                covered |= over
            accept = ok & ~over[:, None]
            acc = accept[:, 0]
            moved = go & ~over          # the rows whose attempt counts now
            if acc.any():
                last = ks[prog.last] if prog.fsal else None
                if self.observing is not None:      # a kept step: first located in it,
                    obs = self.observing                # then peak, trough at its end
                    interp = (interpolant(run, run.dense, h, ks, use, new) if obs.firsts
                              else None)
                    new = obs.segment(run, h, new, t, t_new, use, taken, lay.active & accept,
                                      interp)
                h = [np.where(accept, nw, old) for nw, old in zip(new, h)]
                if last is not None:
                    k0 = [np.where(accept, kl, old) for kl, old in zip(last, k0)]
                t = np.where(accept, t_new, t)
                taken = taken + accept
                if not prog.fsal:
                    k0 = [np.where(accept, kn, old) for kn, old in
                          zip(run.F(h, t, taken, lay.active & accept, 0), k0)]
                k0 = [x.copy() for x in k0]
                ended = acc & cut[:, 0]
                running = running & ~ended
                if run.field.collapse is not None:
                    running &= ~(acc & run._collapsed(h, t, taken, mask & accept))
                hit_max = running & acc & (taken[:, 0] >= a.max_steps)
                status[hit_max] = C.MAX_STEPS
                running = running & ~hit_max
            rejected = rejected + reject[:, 0]
            after_reject = np.where((running & moved)[:, None], reject, after_reject)
            live = running & moved
            under = live & ~acc & ~finite[:, 0] | (live & C.underflow(
                proposed, t, run.dtype)[:, 0] & ~(acc & cut[:, 0]))
            status[under] = C.STEP_UNDERFLOW
            running = running & ~under
            dt = np.where((running & moved)[:, None], proposed, dt)
        self.h, self.k0, self.t, self.dt, self.taken = h, k0, t, dt, taken
        self.rejected, self.after_reject = rejected, after_reject
        self.status, self.running = status, running
        self.at = [x if i in self.held else np.where(covered[:, None], at[0, i], x)
                   for i, x in enumerate(h)]
        self.until = u

    # --- reading -----------------------------------------------------------------------
    def states(self) -> np.ndarray:
        return self.run.pack(self.at)

    def _grid(self, per_row) -> np.ndarray:
        return self.run.layout.per_basin_to_grid(per_row)

    def times(self) -> np.ndarray:
        t = np.where(self.running, self.until, self.t[:, 0]).astype(self.run.dtype)
        return self._grid(t).astype(self.run.dtype)

    def status_codes(self) -> np.ndarray:
        return self._grid(self.status).astype(np.int8)

    def steps_taken(self) -> np.ndarray:
        return self._grid(self.taken[:, 0]).astype(INT)

    def steps_rejected(self) -> np.ndarray:
        return self._grid(self.rejected).astype(np.int32)

    def outputs(self) -> dict | None:
        """The flux on the final states once every trajectory has ended (None before)."""
        if self.running.any():
            return None
        run = self.run
        run.final_t = np.where(self.running, self.until, self.t[:, 0]).astype(
            run.dtype).reshape(-1, 1)
        with np.errstate(all="ignore"):
            return run.deposit(self.at, self.taken[:, 0].reshape(-1, 1))

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self, step: int) -> Snapshot:
        run, lay = self.run, self.run.layout
        grid = lambda a: lay.to_grid(a).reshape(-1)      # noqa: E731
        row = lambda a: self._grid(np.asarray(a).reshape(-1)).reshape(-1)   # noqa: E731
        names = run.names
        init = run.init or dict(zip(names, self.h))
        ctl = {"until": np.asarray(self.until, run.dtype),
               "t": row(self.t).astype(run.dtype), "dt": row(self.dt).astype(run.dtype),
               "k0": np.stack([grid(np.broadcast_to(x, lay.shape)) for x in self.k0]),
               "at": np.stack([grid(x) for x in self.at]),
               "taken": row(self.taken).astype(np.int32),
               "rejected": row(self.rejected).astype(np.int32),
               "status": row(self.status).astype(np.int8),
               "again": row(self.after_reject).astype(bool),
               "running": row(self.running).astype(bool)}
        return Snapshot(step, np.stack([grid(x) for x in self.h]),
                        np.stack([grid(init[k]) for k in names]),
                        ctl["taken"].copy(), ~ctl["running"], ctl)

    def restore(self, snap: Snapshot) -> None:
        run, lay = self.run, self.run.layout
        shape = run.bound.grid_shape
        ctl = snap.controller
        if ctl is None:
            raise BackendError("the checkpoint holds no adaptive controller")
        lanes = lambda a: lay.to_lanes(np.asarray(a).reshape(shape))    # noqa: E731
        first = lambda a: lanes(a)[:, :1]                               # noqa: E731
        self.h = [run.full(lanes(x)) for x in snap.state]
        run.init = {k: run.full(lanes(x)) for k, x in zip(run.names, snap.init)}
        run._full_init = run.init
        self.k0 = [run.full(lanes(x)) for x in ctl["k0"]]
        self.at = [run.full(lanes(x)) for x in ctl["at"]]
        self.t = first(ctl["t"]).astype(run.dtype)
        self.dt = first(ctl["dt"]).astype(run.dtype)
        self.taken = first(ctl["taken"]).astype(INT)
        self.rejected = first(ctl["rejected"])[:, 0].astype(INT)
        self.status = first(ctl["status"])[:, 0].astype(np.int8)
        self.after_reject = first(ctl["again"]).astype(bool)
        self.running = first(ctl["running"])[:, 0].astype(bool)
        self.until = run.dtype.type(ctl["until"])

    def close(self) -> None:
        pass
