"""The numpy reference backend's interpreter of a fixed-step run (``_Run``; adaptive.py
and dense_fixed.py extend it): values are arrays of shape ``(n_basins, lanes)`` (see
``layout.py``), the only Python loops are over steps, stages and the nodes of a
stage's schedule (one numpy call per node, ``ir.evaluate.Schedule``). A step evaluates
the method's step program (``ir.step``): each stage state and the update is one of
its Combinations (``_Run.combine``); no tableau is read here. It computes exactly what
docs/internals.md says, in the working dtype throughout, operation by
operation; for speed it only chooses where results are written: the stage
states, sums and new states, and the derivatives' nodes, go to arrays kept
for the run (numpy's results do not depend on where they land), so a step of
arithmetic and math functions allocates no memory.
"""
from __future__ import annotations

import numpy as np

from ...ir.nodes import CoupledAt, Reduce, Sym
from ...ir.ops import SymKind
from ...ir.step import Combination, step_program
from ...call.bound import Bound, Progress, Solution, saved_steps
from ...ir.evaluate import INT, Context, Frame, Plan, Schedule, check_index
from .layout import Layout
from .noise import Noise


class StageContext(Context):
    """The symbols of one evaluation: a stage's state, time and step, and the call's data."""

    def __init__(self, run: "_Run", states: dict, t, step, init: dict | None = None):
        self.run = run
        self.states = states
        self.t = t
        self.step = step
        self.init = init if init is not None else run.init
        self.coupled: dict[str, np.ndarray] = {}

    def symbol(self, node: Sym):
        kind, name, run = node.kind, node.name, self.run
        if kind is SymKind.STATE:
            return self.states[name]
        if kind is SymKind.PARAM:
            return run.params[name]
        if kind is SymKind.DIM:
            return INT.type(run.bound.dims[name])
        if kind is SymKind.GRID:
            return run.layout.global_index[run.grid_axis[name]]
        if kind is SymKind.BASIN:
            return run.layout.basin_index[run.basin_axis[name]]
        if kind is SymKind.TIME:
            return self.t
        if kind is SymKind.DT:
            return run.dt
        if kind is SymKind.STEP:
            return self.step
        if kind is SymKind.INIT:
            return self.init[name]
        if kind is SymKind.COUPLED:
            return self.coupled[name]
        raise AssertionError(f"unknown symbol kind {kind}")

    def array(self, name: str) -> np.ndarray:
        return self.run.bound.inputs[name]

    def coupled_at(self, node: CoupledAt, index: list):
        return self.run.layout.gather(self.coupled[node.name], index, self.run.edges[node.name])

    def reduce(self, node: Reduce):
        return self.run.layout.reduce(self.coupled[node.name], node.op)


class _Run:
    def __init__(self, bound: Bound, progress: Progress):
        f = bound.field
        self.bound, self.field, self.progress = bound, f, progress
        self.names = f.state_names
        self.dtype = np.dtype(bound.dtype)
        basin = None if f.basin is None else tuple(int(a.extent) for a in f.basin)
        self.layout = Layout(bound.grid_shape, basin, bound.origin)
        self.grid_axis = {a.index: k for k, a in enumerate(f.grid)}
        self.basin_axis = {a.index: k for k, a in enumerate(f.basin or ())}
        self.edges = {c.name: c.edge for c in f.coupled}
        self.dt = self.dtype.type(bound.dt)
        self.dt_0d = np.asarray(self.dt)            # dt as the stage sums use it
        self.t0 = self.dtype.type(bound.t0)
        self.params = {k: self._param(v) for k, v in bound.params.items()}
        program = step_program(f.solver.tableau)
        # per stage: (the terms of its state's Combination, c_s * dt: the same every step)
        self.stages = [(self._terms(st.state), self.dtype.type(float(st.c)) * self.dt)
                       for st in program.stages]
        self.update = self._terms(program.update)
        # arrays kept for the run, written by every step (see combine and buffers_for)
        self.scratch = self.arrays(2)                      # for the stage sums
        self.stage_state = self.arrays(len(f.states))
        self.new_state = [self.arrays(len(f.states)) for _ in range(2)]   # by step parity
        self.into: list[dict] = []
        self.plan = Plan()
        self.fixed: dict = {}
        self.init: dict = {}
        self.schedules: dict = {}
        self.state_roots = [i for i, d in enumerate(f.derivs)
                            if isinstance(d, Sym) and d.kind is SymKind.STATE]
        self.noise = Noise(self) if f.noises else None      # stochastic fields: noise.py

    def arrays(self, n: int) -> list:
        return [np.empty(self.layout.shape, self.dtype) for _ in range(n)]

    def schedule(self, key, exprs: list) -> Schedule:
        """The straight-line schedule of ``exprs``, built at first use: nodes enter the
        plan in the order evaluation reaches them, one slot per interned node (a
        read or an int division is one node per place in the text, so an error
        names the read that failed)."""
        if key not in self.schedules:
            roots = [self.plan.add(e) for e in exprs]
            self.schedules[key] = self.plan.schedule(roots, self.dtype)
        return self.schedules[key]

    def _param(self, v):
        if isinstance(v, np.ndarray) and v.ndim:
            return self.layout.to_lanes(v.astype(self.dtype))
        return self.dtype.type(v)

    def _terms(self, combination: Combination) -> list:
        """(j, weight) for the terms of a Combination, in increasing j, each weight
        rounded to the working dtype once, as a 0-d array (numpy multiplies an
        array by those faster than by a scalar: same product); None for a weight
        1, since ``1 * k`` is ``k`` exactly."""
        terms = [(j, self.dtype.type(float(w))) for j, w in combination.terms]
        return [(j, None if w == 1 else np.asarray(w)) for j, w in terms]

    def time(self, n):
        return self.t0 + np.asarray(n).astype(self.dtype) * self.dt

    def full(self, v) -> np.ndarray:
        """``v`` on every lane, as an array of its own in the working dtype."""
        return np.broadcast_to(v, self.layout.shape).astype(self.dtype)

    # --- one evaluation ---------------------------------------------------------
    def frame(self, states: dict, t, step, mask) -> tuple[Frame, StageContext]:
        """A frame for this state, with the coupled values computed first (every lane)."""
        ctx = StageContext(self, states, t, step)
        frame = Frame(self.plan, ctx, self.dtype, self.fixed)
        for c in self.field.coupled:
            schedule = self.schedule(("coupled", c.name), [c.expr])
            ctx.coupled[c.name] = self.full(frame.run(schedule, mask)[0])
        return frame, ctx

    def derivs(self, h: list, t, step, mask, stage: int) -> list:
        states = dict(zip(self.names, h))
        frame, _ = self.frame(states, t, step, mask)
        schedule = self.schedule("derivs", self.field.derivs)
        ks = frame.run(schedule, mask, self.into[stage] if self.into else None)
        if not self.into:
            self.into = self.buffers_for(frame.values)
        for i in self.state_roots:      # dx/dt = y: k must outlive the next stage's y
            ks[i] = ks[i].copy()
        return ks

    def buffers_for(self, values: list) -> list[dict]:
        """Per stage, where the derivatives' op nodes that cover every lane write their
        values, in arrays kept for the run: one per stage for the derivatives
        themselves (they live until the step is done); the other nodes share
        theirs once the last reader of a value has run (few arrays, hot in
        cache), unless a run-time check may read the values afterwards."""
        sched, plan = self.schedules["derivs"], self.plan
        last = {k: n for n, (s, *_) in enumerate(sched.steps) for k in plan.kids[s]}
        free: dict = {}                 # dtype -> arrays no later step reads
        shared: dict = {}
        roots: dict = {}
        for n, (s, _, _, ufunc) in enumerate(sched.steps):
            for k in set(plan.kids[s]):
                if k in shared and last[k] == n and not sched.traps:
                    free.setdefault(shared[k].dtype, []).append(shared[k])
            if not (ufunc and np.shape(values[s]) == self.layout.shape):
                continue
            if s in sched.roots:
                roots[s] = values[s]
            else:
                pool = free.get(values[s].dtype)
                shared[s] = pool.pop() if pool else np.empty_like(values[s])
        return [{**shared, **{s: np.empty_like(v) for s, v in roots.items()}} for _ in self.stages]

    def combine(self, h: list, ks: list, terms: list, into: list) -> list:
        """One Combination of the step program (``_terms``): h + dt * (sum of w_j * k_j,
        in increasing j), written to ``into``; h itself when it has no terms.

        The stage states, the new states and the sums in between live in arrays
        kept for the run (numpy's results do not depend on where it writes them):
        no memory is allocated per stage, so none is returned to the system and
        faulted back in again.
        """
        if not terms:
            return h
        acc, term = self.scratch
        mul, add = np.multiply, np.add                  # the last argument is ``out``
        for i, (hi, dst) in enumerate(zip(h, into)):
            total = None
            for j, cj in terms:
                k = ks[j][i]
                if cj is not None:
                    k = mul(cj, k, acc if total is None else term)
                total = k if total is None else add(total, k, acc)
            add(hi, mul(self.dt_0d, total, acc), dst)
        return into

    def step(self, h: list, n: int, mask) -> list:
        """The state after step n, in the buffers of step n's parity (h is not one of them)."""
        t_n = self.time(n)
        step = INT.type(n)
        ks: list = []
        for terms, cdt in self.stages:
            hs = self.combine(h, ks, terms, self.stage_state)
            ks.append(self.derivs(hs, t_n + cdt, step, mask, len(ks)))
        new = self.combine(h, ks, self.update, self.new_state[n % 2])
        return new if self.noise is None else self.noise.add(h, list(new), n, mask)

    # --- the whole run ------------------------------------------------------------
    def start(self) -> list:
        """The starting state: h0 for free states, start expressions for the others."""
        lay, f = self.layout, self.field
        ctx = StageContext(self, {}, self.t0, INT.type(0), init={})
        ctx.init = ctx.states
        frame = Frame(self.plan, ctx, self.dtype, self.fixed)
        h0 = None if self.bound.h0 is None else lay.to_lanes(self.bound.h0)
        column = 0
        for s in f.states:
            if s.init is None:
                ctx.states[s.name] = self.full(h0[..., column])
                column += 1
            else:
                ctx.states[s.name] = self.full(frame.eval(s.init, lay.active))
        self.init = dict(ctx.states)
        return [self.init[name] for name in f.state_names]

    def collapse_vote(self, h: list, n: int, running: np.ndarray) -> np.ndarray:
        """Basins (among ``running``) whose active lanes all hold the condition after step n."""
        lay = self.layout
        mask = lay.active & running[:, None]
        states = dict(zip(self.names, h))
        frame, _ = self.frame(states, self.time(n + 1), INT.type(n + 1), mask)
        schedule = self.schedule("collapse", [self.field.collapse])
        cond = np.broadcast_to(frame.run(schedule, mask)[0], lay.shape)
        return running & np.all(cond | ~lay.active, axis=1)

    def integrate(self, h: list) -> tuple[list, np.ndarray, list]:
        steps, lay, every = self.bound.steps, self.layout, self.bound.save_every
        running = np.ones(lay.shape[0], bool)
        taken = np.zeros(lay.shape[0], INT)
        history = [h] if every else []
        tick, reported = max(1, steps // 100), 0
        for n in range(steps):
            if self.field.collapse is None:           # every basin runs every step
                h = self.step(h, n, lay.active)
            else:
                if not running.any():
                    break
                col = running[:, None]
                new = self.step(h, n, lay.active & col)
                h = [np.where(col, a, b) for a, b in zip(new, h)]
                taken += running
                running = running & ~self.collapse_vote(h, n, running)
            if every and ((n + 1) % every == 0 or n + 1 == steps):
                history.append([x.copy() for x in h])
            if self.progress is not None and ((n + 1) % tick == 0 or n + 1 == steps):
                self.progress(n + 1, steps)
                reported = n + 1
        if self.field.collapse is None:
            taken[:] = steps
        if every:
            history += [h] * (len(saved_steps(steps, every)) - len(history))
        if self.progress is not None and reported != steps:
            self.progress(steps, steps)       # every basin collapsed early
        return h, taken, history

    def deposit(self, h: list, taken: np.ndarray) -> dict[str, np.ndarray]:
        """Flux: once per active lane, on its final state, summed into the outputs."""
        lay = self.layout
        outputs = {k: np.zeros(s, self.dtype) for k, s in self.bound.output_shapes.items()}
        if not self.field.flux:
            return outputs
        steps = taken.reshape(-1, 1)
        states = dict(zip(self.names, h))
        frame, _ = self.frame(states, self.time(steps), steps, lay.active)
        for fl in self.field.flux:
            out = outputs[fl.output]
            index = [frame.eval(e, lay.active) for e in fl.index]
            value = self.full(frame.eval(fl.value, lay.active))
            check_index(fl.output, "output", out.shape, index, lay.active, fl.span)
            where = [np.broadcast_to(i, lay.shape)[lay.active] for i in index]
            flat = np.ravel_multi_index(where, out.shape) if out.ndim else where
            np.add.at(out.reshape(-1), flat, value[lay.active])
        return outputs

    def solve(self) -> Solution:
        lay = self.layout
        h, taken, history = self.integrate(self.start())
        outputs = self.deposit(h, taken)
        sol = Solution(states=self.pack(h), outputs=outputs,
                       steps_taken=lay.per_basin_to_grid(taken).astype(INT))
        if self.bound.save_every:
            saved = saved_steps(self.bound.steps, self.bound.save_every)
            sol.history = np.stack([self.pack(x) for x in history])
            sol.times = np.stack([self.time(m) for m in saved]).astype(self.dtype)
        return sol

    def pack(self, h: list) -> np.ndarray:
        states = np.stack([self.layout.to_grid(x) for x in h], axis=-1)
        return states[..., 0] if len(h) == 1 else states
