"""The reference backend's Simulation session (call/session.py): the run's arrays stay
in memory between calls, and each ``advance`` runs the same steps, with the same step
numbers, that one uninterrupted run (runner.py's ``_Run.integrate``) runs."""
from __future__ import annotations

import numpy as np

from ...call.interrupt import held
from ...call.session import Snapshot
from ...errors import BackendError
from ...ir.evaluate import INT, Frame
from .events import interpolant
from .fixed_events import EventRun
from .interpreter import StageContext, _Run
from .observers import Observing


class Session:
    def __init__(self, prepared, data):
        if prepared.template.adaptive is not None or prepared.template.save_at is not None:
            raise BackendError("a Simulation runs fixed-step methods only so far (adaptive "
                               "methods and save_at: use vgpu.solve)")
        self.prepared = prepared
        self._open(data)
        self.h = self.run.start()
        lay = self.run.layout
        self.running = np.ones(lay.shape[0], bool)
        self.taken = np.zeros(lay.shape[0], INT)
        self.step = 0

    def _open(self, data) -> None:
        self.data = data
        bound = self.prepared.bound(data)
        # step-end observers: the events' run (its step again for a `first`'s location)
        rules = bound.field.observer_rules
        self.run = (EventRun if rules else _Run)(bound, None)
        self.observing = Observing(self.run) if rules else None

    def advance(self, step0: int, nsteps: int) -> None:
        """Steps [step0, step0 + nsteps). Each step and its count are done whole (a
        Ctrl-C is held until the step ends): an interrupted advance leaves ``step``, the
        state and the collapse counters of the last step it finished."""
        if step0 == 0:
            with held():
                self._restart()
        run, lay = self.run, self.run.layout
        with np.errstate(all="ignore"):
            for n in range(step0, step0 + nsteps):
                with held():
                    if run.field.collapse is None:
                        new = run.step(self.h, n, lay.active)
                        if self.observing is not None:
                            new = self._observe(self.h, new, n, lay.active)
                        self.h, self.step = new, n + 1
                        continue
                    if not self.running.any():
                        break
                    col = self.running[:, None]
                    new = run.step(self.h, n, lay.active & col)
                    if self.observing is not None:
                        new = self._observe(self.h, new, n, lay.active & col)
                    h = [np.where(col, a, b) for a, b in zip(new, self.h)]
                    voted = run.collapse_vote(h, n, self.running)
                    self.h, self.taken, self.running, self.step = (
                        h, self.taken + self.running, self.running & ~voted, n + 1)
        # the step buffers are the run's (by step parity: the one self.h is in is not
        # written by the next step): keep the state in arrays of its own, so a later
        # set_data (a new _Run) and snapshots see it unchanged
        with held():
            self.h = [np.array(x) for x in self.h]
            self.step = step0 + nsteps

    def _observe(self, h0: list, h1: list, n: int, mask) -> list:
        """Step n's end for the step-end observers (numpy/observers.py); a ``first`` is
        located on the step's Hermite extension, the step taken again (the same numbers)
        on a copy of the run."""
        run, obs = self.run, self.observing
        t_s, t_e, step = run.time(n), run.time(n + 1), INT.type(n)
        dt = np.full(run.layout.shape, run.dtype.type(run.bound.dt), run.dtype)
        interp = None
        if run.noise is None and any(x.any() for x in obs.hits(run, h0, h1, t_s, t_e, step,
                                                                 mask)):
            part = run._part(np.arange(run.layout.shape[0]))
            ks, y1 = part.take(h0, t_s, dt, n, mask)
            if run.end_slope:
                ks = ks + [[x.copy() if np.shape(x) == run.layout.shape else part.full(x)
                            for x in part.derivs(y1, t_e, step, mask, 0)]]
            interp = interpolant(part, run.dense, h0, ks, dt, y1)
            run = part
        return obs.segment(run, h0, [np.array(x) for x in h1], t_s, t_e, dt, step, mask,
                           interp)

    def _restart(self) -> None:
        """What every compiled kernel does before step 0 (and _Run.start does from h0):
        the states with a start expression computed from it, with the current values of
        the others; init(x) the values so made; no basin collapsed."""
        run, lay = self.run, self.run.layout
        ctx = StageContext(run, {}, run.t0, INT.type(0), init={})
        ctx.init = ctx.states
        frame = Frame(run.plan, ctx, run.dtype, run.fixed)
        with np.errstate(all="ignore"):
            for s, x in zip(run.field.states, self.h):
                ctx.states[s.name] = run.full(x if s.init is None else
                                              frame.eval(s.init, lay.active))
        run.init = dict(ctx.states)
        self.h = [run.init[name] for name in run.names]
        self.running = np.ones_like(self.running)
        self.taken = np.zeros_like(self.taken)
        self.step = 0

    def _taken(self) -> np.ndarray:
        if self.run.field.collapse is None:
            return np.full(self.run.layout.shape[0], self.step, INT)
        return self.taken

    def states(self) -> np.ndarray:
        return self.run.pack(self.h)

    def steps_taken(self) -> np.ndarray:
        return self.run.layout.per_basin_to_grid(self._taken()).astype(INT)

    def outputs(self) -> dict:
        with np.errstate(all="ignore"):
            return self.run.deposit(self.h, self._taken())

    def snapshot(self, step: int) -> Snapshot:
        lay, names = self.run.layout, self.run.names
        grid = lambda a: lay.to_grid(a).reshape(-1)      # noqa: E731
        init = self.run.init or dict(zip(names, self.h))
        return Snapshot(step, np.stack([grid(x) for x in self.h]),
                        np.stack([grid(init[k]) for k in names]),
                        grid(np.broadcast_to(self._taken()[:, None], lay.shape)).astype(INT),
                        grid(np.broadcast_to(~self.running[:, None], lay.shape)).astype(bool))

    def restore(self, snap: Snapshot) -> None:
        run, lay = self.run, self.run.layout
        grid = run.bound.grid_shape
        lanes = lambda a: lay.to_lanes(np.asarray(a).reshape(grid))   # noqa: E731
        self.h = [run.full(lanes(x)) for x in snap.state]
        run.init = {k: run.full(lanes(x)) for k, x in zip(run.names, snap.init)}
        self.taken = lanes(snap.taken)[:, 0].astype(INT)
        self.running = ~lanes(snap.done)[:, 0].astype(bool)
        self.step = snap.step

    def set_data(self, data) -> None:
        """New param values: a new run (its param-only values, cached, go), this state."""
        snap = self.snapshot(self.step)
        self._open(data)
        self.restore(snap)

    def set_input(self, name: str, array: np.ndarray) -> None:
        """A new value of input ``name`` (same shape), read from the next step on."""
        inputs = self.run.bound.inputs
        inputs[name] = np.ascontiguousarray(array, self.run.dtype)
        self.data = self.data._replace(inputs={**self.data.inputs, name: inputs[name]})
        self.run.fixed.clear()          # values computed from the old one

    def alias_input(self, name, source, output) -> bool:
        return False                    # the arrays are in memory: the pipeline copies

    def close(self) -> None:
        pass
