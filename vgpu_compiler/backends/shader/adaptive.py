"""The kernel of an adaptive method (bs3, dopri5, tsit5), or of a fixed-step method run
for ``save_at``: what it adds to a field's kernel description, for every compiled
backend (GLSL: templates/adaptive.glsl.j2; WGSL: adaptive.wgsl.j2; C:
templates/adaptive.c.j2).

``extend(kernel, field)`` adds to the kernel description of lower.py the
buffers that carry a trajectory between dispatches (its ``t``, step size,
FSAL derivative, counters), the ``save_at`` times and history, and the
uniforms of the controller (tolerances, t1, dt0, dtmax, max_steps, attempts
per dispatch): changing any of them never recompiles. ``print_parts`` prints
the error estimate and the continuous extension (ir.step's Combinations, the
same numbers and the same order of operations as the numpy reference), and
the controller's constants (ir/controller.py), in a dialect; the controller, the
first step and the carry between dispatches are built once (codegen/build) and
printed for the dialect's target. The templates lay
it out: a trajectory carries its own t and dt; a basin shares one step size
(its largest error over active lanes). The host side the GPU runners share is
adaptive_host.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field as _field

from ...ir import controller as C
from ...ir import observers as _observers
from ...ir.nodes import Field
from ...ir.step import Combination, step_program
from ...runtime.adaptive import CNT_ROWS as COUNTERS, PAUSED, RUNNING   # (b_cnt rows)
from .kernel import Buffer, Kernel, Uniform


@dataclass(frozen=True)
class AdaptiveParts:
    q: int                      # the pair's lower order
    error: Combination | None   # None: a fixed-step method run for save_at
    dense: tuple[Combination, ...] | None   # None: cubic Hermite through the step's ends
    n_ad: int                   # rows of b_ad: t, dt, then the FSAL derivative per state
    # the kernel writes save_at states (b_hist): a fixed-step method's, one with events, or
    # a field's dense variant (adaptive_host.kernel_field: a call with save_at, a Simulation)
    saves: bool = True
    n_err: int | None = None    # the error norm's states, the first ones (None: all)
    last: int = -1              # the FSAL stage (ir.step's StepProgram.last)
    error2: Combination | None = None   # a second estimate (dop853's norm), or None

    @property
    def fixed(self) -> bool:
        """A fixed-step method (t_n = t0 + n dt, every step accepted), run for save_at."""
        return self.error is None


@dataclass(frozen=True)
class PrintedAdaptive:
    errors: tuple[str, ...]             # per state: sum(w_j k_j) of the error estimate
    dense: tuple[tuple[str, ...], ...]  # per state, per power of theta: sum(w_j k_j)
    last: tuple[str, ...]               # per state: the FSAL stage's k
    root: int                           # the controller's root: q + 1
    consts: dict                        # printed constants
    fixed: bool = False                 # a fixed-step method run for save_at
    saves: bool = True                  # writes save_at states (AdaptiveParts.saves)
    n_err: int = 0                      # the states (the first) the error norm measures
    errors2: tuple[str, ...] = ()       # per state: the second estimate (dop853's norm)
    # the pieces built once (codegen/build), printed in this dialect: the controller's
    # (accept, factor, next, next_plain), and the first step's IR (first_step())
    ctl: dict = _field(default_factory=dict, compare=False)
    first_ir: tuple = ()
    dialect: object = _field(default=None, compare=False, repr=False)
    # the carry between dispatches (codegen/build/carry.py): its IR by piece; printed
    # with the events' rows by carry_load()/carry_store(), or (C) printed here
    carry_ir: dict = _field(default_factory=dict, compare=False)
    carry: dict = _field(default_factory=dict, compare=False)
    registers: tuple = ()               # (C) the field's names held in lane arrays A_name

    def carry_load(self, extra: str = "") -> str:
        from ...codegen.targets import printer
        return printer(self.dialect, {"extra": extra}).text(self.carry_ir["load"])

    def carry_store(self, extra: str = "") -> str:
        from ...codegen.targets import printer
        return printer(self.dialect, {"extra": extra}).text(self.carry_ir["store"])

    def main(self, k, indent: int = 4, **splices) -> str:
        """The kernel's body (codegen/build/adaptive.py), in this dialect: the registers,
        the carry between dispatches, the start, the step attempts (an adaptive method's:
        the stages, the error norm, the controller, accept or reject; a fixed-step
        method's run for save_at), the flux. ``splices``: the pieces its template prints
        (each stage's block ``stage<i>``, the events' pieces, the observers, the
        collapse vote, the basin's follow, the Rosenbrock Jacobian's block ``jac``)."""
        from ...codegen import ir
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd, sts, t = self._field(k), self._stages(k), self.dialect
        solve = None
        if k.ros:
            splices = {**splices, "ros_setup": k.ros.setup(splices.get("jac", "")),
                       **{f"ros_solve{st.index}": k.ros.solve(st.index) for st in sts}}
            solve = lambda s: (ir.Splice(f"ros_solve{s}"),)     # noqa: E731

        def text(stmts, **extra) -> str:
            return printer(t, {**splices, **extra}).text(stmts, indent)

        head = [text(adaptive.registers(t, fd, RUNNING)),
                text(self.carry_ir["load"], extra=splices.get("load_extra", ""))]
        if k.has_basin:
            head.append(text((ir.Splice("basin_follow"),)))
        head.append(text(adaptive.start(t, fd, sts, self.first_ir, RUNNING)))
        parts = ["\n".join(head),
                 text(adaptive.attempts(t, fd, sts, k.dtype, RUNNING, solve))]
        if k.flux:
            parts.append(text(adaptive.flux(fd)))
        parts.append(text((ir.Comment("--- store ---"),)) + "\n"
                     + text(self.carry_ir["store"], extra=splices.get("store_extra", "")))
        return "\n\n".join(parts)

    def error_lanes(self, k, bind: str, kept: bool = False) -> str:
        """(C) the new state vg_new<i>[l] and the error of the step vg_err[l] of every
        running lane (codegen/build/adaptive.error_norm, the shaders'), in one lane loop;
        ``bind``: the lane's state, params and stages' k in locals, printed; ``kept``:
        the last stage kept the new state (its point: FSAL) in vg_new<i>. A basin folds
        vg_err after it (the template's fold)."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd = self._field(k)
        n = len(fd.states)
        if kept:
            fd = dataclasses.replace(fd, update=())
        stmts = adaptive.error_norm(dataclasses.replace(fd, basin=False), n)
        arrays = self._lane_arrays(n)
        head, stmts = stmts[:1], stmts[1:]         # (its comment, above the loop)
        loop = lanes.lane_loop((ir.Let("u_dt", ir.FLOAT, ir.Var("vg_use")), ir.Splice("bind"),
                                *stmts), arrays, skip=ir.ne(ir.Var("vg_status"), ir.i(RUNNING)))
        return printer(self.dialect, {"bind": bind}).text((*head, loop))

    def save_lanes(self, k) -> str:
        """(C) the save_at times inside the accepted step of every lane, on the continuous
        extension (codegen/build/adaptive.dense_saves, the shaders'), in one lane loop;
        none where the call has no save_at times. With events, up to the events' time
        (the step's end, or the event's: there the state after the events), the
        extension from the step's start state kept in vg_ys<i>."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd = self._field(k)
        n, V = len(fd.states), ir.Var
        arrays = self._lane_arrays(n)
        end = ir.Select(V("vg_cut"), V("u_t1"), ir.add(V("t_n"), V("u_dt")))
        if fd.events:
            note = ("save_at times inside the accepted step, up to its events' time (the "
                    "step's end,\nor the event time: there the state after the events)")
            start, end = V("vg_tstart"), ir.Select(V("vg_moved"), V("vg_t"), end)
            saves = adaptive.dense_saves(
                fd, tuple(V(f"vg_ys{j}") for j in range(n)),
                tuple(ir.Select(V("vg_moved"), V(s), V(f"vg_n{j}"))
                      for j, s in enumerate(fd.states)))
        else:
            note = "save_at times inside the accepted step: the continuous extension"
            start, saves = V("vg_t"), adaptive.dense_saves(fd)
        loop = lanes.lane_loop((
            ir.Comment(note), ir.Let("u_dt", ir.FLOAT, V("vg_use")),
            ir.Let("t_n", ir.FLOAT, start), ir.Let("vg_tn", ir.FLOAT, end), saves),
            arrays, skip=ir.not_(V("vg_ok")),
            registers=(*fd.states, *(name for ks in fd.stage_k for name in ks)))
        return printer(self.dialect).text((ir.If(ir.gt(ir.Var("u_nsave"), ir.i(0)), (loop,),
                                                 comment="(no save_at times: no lane loop)"),))

    @staticmethod
    def _lane_arrays(n: int) -> dict:
        """(C) the lane arrays of a trajectory's scalars (codegen/lanes.py), ``n`` states."""
        names = ("vg_use", "vg_t", "vg_cut", "vg_ok", "vg_next", "vg_moved", "vg_tstart",
                 "vg_status", "vg_taken", "vg_err", "vg_sing", "vg_lstat")
        return {**{a: a for a in names}, "vg_active": "A_act", "lane": "A_lane",
                **{f"vg_n{j}": f"vg_new{j}" for j in range(n)},
                **{f"vg_{a}{j}": f"vg_{a}{j}" for j in range(n) for a in ("ys", "f", "F0_")}}

    def start_save_lanes(self, k) -> str:
        """(C) the save_at times at t0 of every lane (codegen/build/adaptive.start_saves)."""
        from ...codegen import lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd = self._field(k)
        (guard,) = adaptive.start_saves(fd)
        loop = lanes.lane_loop(guard.then, self._lane_arrays(len(fd.states)),
                               registers=fd.states)
        return printer(self.dialect).text((dataclasses.replace(
            guard, then=(loop,), comment="(no save_at times: no lane loop)"),))

    def events_t0_lanes(self, k, bind: str, q0: str, conds0: str) -> str:
        """(C) every lane's events' conditions at t0 (codegen/build/adaptive.events_at_t0):
        ``bind``, ``q0``, ``conds0``: the lane's scalars, q_* and the conditions, printed."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        loop = lanes.lane_loop((ir.Splice("bind"), *adaptive.events_at_t0()),
                               ("vg_prev", "vg_window"),
                               comment="events: every condition at t0")
        return printer(self.dialect, {"bind": bind, "q0": q0, "conds0": conds0}).text((loop,))

    def hermite_lanes(self, k) -> str:
        """(C, a fixed-step method run for save_at, no events) the save_at times inside
        the step vg_taken of every running lane: the cubic Hermite interpolant
        (codegen/build/adaptive.hermite_saves)."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd, V = self._field(k), ir.Var

        def at(n):
            return ir.add(V("u_t0"), ir.mul(ir.call("to_float", n), V("u_dt")))
        loop = lanes.lane_loop((
            ir.Comment("save_at times inside the step: the cubic Hermite interpolant"),
            ir.Let("t_n", ir.FLOAT, at(V("vg_taken"))),
            ir.Let("vg_tn", ir.FLOAT, at(ir.add(V("vg_taken"), ir.i(1)))),
            adaptive.hermite_saves(fd)), self._lane_arrays(len(fd.states)),
            skip=ir.ne(V("vg_status"), ir.i(RUNNING)), registers=(*fd.states, *fd.k0))
        return printer(self.dialect).text((ir.If(ir.gt(V("u_nsave"), ir.i(0)), (loop,),
                                                 comment="(no save_at times: no lane loop)"),))

    def stage_lanes(self, k, st, combos, lane: str, time: str, bind: str, coupled: str = "",
                    skip: str | None = None, news=(), stopped: bool = True,
                    loop: bool = True) -> str:
        """(C) stage ``st`` of every lane where ``skip`` does not hold (None: every lane),
        one lane loop: the basin's coupled values first (``coupled``, printed: its lanes
        share t, dt and the step count, lane 0's), then each lane's derivatives into its
        lane arrays A_k (zero on a stopped lane, unless ``stopped`` is false: no stopped
        lane uses them; events.frozen_k), and ``news`` (this stage's points) as the new
        state vg_new<j>. ``lane``: the lane's u_dt, t_n and nstep, declared (printed);
        ``bind``: its state, params and k in locals (printed); ``combos``: the stage's
        points; ``time``: tt's value. ``loop`` false: lane l's part alone."""
        from ...codegen import ir, lanes
        from ...codegen.build import blocks
        from ...codegen.build import events as ev
        from ...codegen.targets import printer
        F, at = ir.FLOAT, ir.Var("l")
        noise = tuple(k.noise_vars) if st.index == 0 else ()
        frozen = ev.frozen_k(k, st.index, noise, "a stopped lane's derivatives are zero") \
            if k.events and stopped else ()
        body = (*((ir.Line(lane),) if lane else ()),
                ir.Let("tt", F, ir.Raw(time)),
                ir.Line("(void)t_n; (void)tt; (void)nstep; (void)u_dt;"),
                ir.Splice("bind"),
                *(ir.Let(x["target"], F, ir.Raw(x["expr"])) if isinstance(x, dict) else
                  ir.Let(x.target, F, ir.Raw(x.expr)) for x in combos),
                *blocks.statements(st.block),
                *frozen,
                *(ir.Assign(ir.Index(f"A_{n}", at), ir.Var(n))
                  for n in (*k.stage_k[st.index], *noise)),
                *(ir.Assign(ir.Index(f"vg_new{j}", at), ir.Var(y),
                            comment="(the new state: this stage's point)")
                  for j, y in enumerate(news)))
        p = printer(self.dialect, {"bind": bind, "coupled": coupled})
        if not loop:
            return p.text(lanes.lane_arrays(body, ("vg_lstat",)))
        head = (ir.Let("tt", F, ir.Raw(time)), ir.Line("(void)tt;"), ir.Splice("coupled")) \
            if st.block.coupled else ()
        return p.text((ir.Block((*head, lanes.lane_loop(
            body, ("vg_lstat",), skip=None if skip is None else ir.Raw(skip))),
            comment=f"stage {st.index}, {st.comment}"),))

    def fold_lanes(self, k, arr: str, largest: bool, into: str = "") -> str:
        """(C) the largest (NaN: NaN) or smallest value of lane array ``arr`` over the
        basin's active lanes in lane order (the numpy reference's), on every lane of
        ``into`` (default: ``arr`` itself)."""
        from ...codegen import ir
        from ...codegen.targets import printer
        V, acc, x = ir.Var, ir.Var("vg_acc"), ir.Var("x")
        nan = ir.or_(ir.call("isnan", acc), ir.call("isnan", x))
        better = ir.gt(x, acc) if largest else ir.lt(x, acc)
        body = (ir.Let("vg_acc", ir.FLOAT, V(self.consts["zero"]) if largest
                       else ir.Raw(self.dialect.inf), mutable=True),
                ir.Loop("vg_j", ir.i(0), V("vg_nactive"), (
                    ir.Let("vg_at", ir.INT, ir.Raw(k.box)),
                    ir.Let("x", ir.FLOAT, ir.Index(arr, V("vg_at"))),
                    ir.Assign(acc, ir.Select(nan, ir.add(acc, x), ir.Select(better, x, acc))))),
                ir.Loop("l", ir.i(0), V("VG_W"), (
                    ir.Assign(ir.Index(into or arr, V("l")), acc),)))
        which = "largest" if largest else "smallest"
        return printer(self.dialect).text((ir.Block(body, comment=(
            f"the basin's {which} {arr} over its active lanes, on every lane"
            + (f" ({into})" if into else ""))),))

    def ros_lanes(self, k, body, bind: str) -> str:
        """(C) a Rosenbrock attempt of the block's running lanes, one lane at a time: the
        stages and their solves of codegen/build/adaptive.stages (GLSL's and WGSL's), laid
        out in one lane loop (codegen/lanes.py), stage 0's k read from its lane arrays
        A_k and every stage's k written back. ``body``: the template's printer of a
        field's block; ``bind``: the lane's state and params in locals, printed."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.build import events as ev
        from ...codegen.targets import printer
        fd, sts, t, at = self._field(k), self._stages(k), self.dialect, ir.Var("l")
        p = printer(t)
        frozen = {f"frozen{st.index}": p.text(lanes.lane_arrays((dataclasses.replace(
            ev.frozen_k(k, st.index)[0], comment="a stopped lane's K is zero (its state "
                                                 "stays)"),), ("vg_lstat",)))
                  for st in sts} if fd.when else {}
        splices = {"bind": bind, **frozen,
                   "ros_setup": k.ros.setup(body(k.ros.jac, k, 0)),
                   **{f"ros_solve{st.index}": k.ros.solve(st.index) for st in sts},
                   **{f"stage{st.index}": body(k.stages[st.index].block, k, 0) for st in sts[1:]}}
        attempt = (
            ir.Let("u_dt", ir.FLOAT, ir.Var("vg_use")), ir.Let("t_n", ir.FLOAT, ir.Var("vg_t")),
            ir.Let("nstep", ir.INT, ir.Var("vg_taken")), ir.Splice("bind"),
            *(ir.Let(n, ir.FLOAT, ir.Index(f"A_{n}", at), mutable=True) for n in fd.k0),
            *adaptive.stages(t, fd, sts, lambda s: (ir.Splice(f"ros_solve{s}"),), fd.when),
            *(ir.Assign(ir.Index(f"A_{n}", at), ir.Var(n)) for ks in fd.stage_k for n in ks))
        loop = lanes.lane_loop(attempt, self._lane_arrays(len(fd.states)),
                               skip=ir.ne(ir.Var("vg_status"), ir.i(RUNNING)),
                               comment="rodas4: lane by lane")
        return printer(t, splices).text((loop,))

    def ros_restart_lanes(self, k, body, bind: str) -> str:
        """(C) after the attempt's update (a lane's state and time the new ones): a
        Rosenbrock method is not FSAL, F at the new state into stage 0's k (with events a
        lane whose step ended at one has the events' restart's), a rejected attempt's F
        at the step's start back (codegen/build/adaptive.ros_restart, ros_reject)."""
        from ...codegen import ir, lanes
        from ...codegen.build import adaptive
        from ...codegen.targets import printer
        fd, sts, t, at = self._field(k), self._stages(k), self.dialect, ir.Var("l")
        run, ok = ir.ne(ir.Var("vg_status"), ir.i(RUNNING)), ir.Var("vg_ok")
        skip = ir.or_(run, ir.and_(ok, ir.Var("vg_moved"))) if fd.when else run
        restart = adaptive.ros_restart(fd, sts, ir.Var("vg_t"), ir.Var("vg_taken"), fd.states)
        arrays = self._lane_arrays(len(fd.states))
        reject = lanes.lane_arrays(adaptive.ros_reject(fd), arrays, registers=fd.k0)
        body_ = (
            ir.If(ir.not_(ok), (*reject, ir.Continue())),
            ir.Let("u_dt", ir.FLOAT, ir.Var("vg_use")), ir.Splice("bind"),
            *(ir.Let(n, ir.FLOAT, None, mutable=True) for n in fd.k0),
            restart,
            *(ir.Assign(ir.Index(f"A_{n}", at), ir.Var(n)) for n in fd.k0))
        loop = lanes.lane_loop(body_, arrays, skip=skip, comment=(
            "rodas4 is not FSAL: F at the new state, or back to F0"))
        return printer(t, {"bind": bind, "stage0": body(k.stages[0].block, k, 0)}
                       ).text((loop,))

    @staticmethod
    def _stages(k) -> tuple:
        from ...codegen.build import adaptive
        return tuple(adaptive.StageText(
            index=st.index, c=float(k.kernel.stages[st.index].c),
            combos=tuple((x.target, x.expr) for x in st.combos),
            time=st.time if "tt" in st.words else None) for st in k.stages)

    def _field(self, k):
        from ...codegen.build import adaptive
        parts, n = k.adaptive, len(k.states)

        def terms(comb, j):
            return tuple((k.stage_k[s][j], w) for s, w in comb.terms)

        est = {} if self.fixed else dict(
            errors=tuple(terms(parts.error, j) for j in range(n)),
            dense=tuple(tuple(terms(p, j) for p in parts.dense) for j in range(n)),
            last=self.last, n_err=self.n_err, q=parts.q,
            errors2=() if parts.error2 is None else tuple(terms(parts.error2, j)
                                                          for j in range(n)))
        return adaptive.Field(
            states=tuple(s[0] for s in k.states), k0=tuple(k.stage_k[0]),
            trial=tuple(s[1] for s in k.states), stage_k=tuple(map(tuple, k.stage_k)),
            update=tuple(x.expr for x in k.update), **est,
            saves=self.saves, events=bool(k.events), firsts=bool(k.events and k.ev.firsts),
            when=bool(k.events and len(k.events)),
            ros=bool(k.ros), basin=bool(k.has_basin), collapse=bool(k.collapse),
            observe=bool(k.observe), fixed=self.fixed, params=tuple(k.pt_params),
            init=tuple((x.target, x.expr, x.comment) for x in k.init or ()),
            init_names=tuple(k.init_names) if k.uses_init else (),
            noise=bool(k.events and k.ev.noise_draws),
            lean=int(k.ev.lean or 0) if k.events and self.fixed else 0,
            reads_start=bool(k.events and (k.ev.noise_draws or k.ev.reads_dt
                                           or "nstep" in k.stages[0].words)))

    def first_step(self, trial: str, folds: dict | None = None) -> str:
        """The first step (codegen/build/first_step.py) with ``trial``, the field's stage
        1 at the trial point as its template prints it; (C) laid out in lane loops, with
        ``folds``: the basin folds' text by splice name ("fold vg_h0", "fold vg_h")."""
        from ...codegen import lanes
        from ...codegen.build.controller import LANE_ARRAYS
        from ...codegen.targets import printer
        stmts = self.first_ir
        if self.dialect.lane_block:
            stmts = lanes.lane_loops(stmts, LANE_ARRAYS, registers=self.registers)
        return printer(self.dialect, {"trial": trial, **(folds or {})}).text(stmts)


def extend(kernel: Kernel, field: Field) -> Kernel:
    program = step_program(field.solver.tableau)
    n = len(field.states)
    buffers = list(kernel.buffers)
    F = "float"
    extra = [("ad", "b_ad", F, False, "t, dt, then the FSAL derivative per state"),
             ("cnt", "b_cnt", "int", False, "steps taken, rejected, status, after a reject, "
                                               "next save"),
             ("run", "b_run", "uint", False, "trajectories still running after the dispatch"),
             ("save", "b_save", F, True, "save_at times"),
             ("hist", "b_hist", F, False, "save_at states: (time, state, trajectory)")]
    for role, name, typ, ro, comment in extra:
        buffers.append(Buffer(len(buffers), role, name, typ, readonly=ro, comment=comment))
    uniforms = list(kernel.uniforms) + [
        Uniform(F, "u_t1", "end time", "t1"), Uniform(F, "u_rtol", "relative tolerance", "rtol"),
        Uniform(F, "u_atol", "absolute tolerance", "atol"),
        Uniform(F, "u_dt0", "first step (0: Hairer's choice)", "dt0"),
        Uniform(F, "u_dtmax", "largest step", "dtmax"),
        Uniform(F, "u_gap", "a step ending this close to t1 is cut to end at t1", "gap"),
        Uniform("int", "u_max_steps", "most accepted steps", "max_steps"),
        Uniform("int", "u_attempts", "most step attempts in this dispatch", "attempts"),
        Uniform("int", "u_nsave", "save_at times", "nsave"),
        Uniform(F, "u_pause", "no attempt from this time on (a Simulation's until; t1)",
                "pause")]
    saves = (field.solver.adaptive is None or field.solver.dense
             or _observers.located(field))      # events, or an observer `first`
    parts = AdaptiveParts(q=max(program.q, 1), error=program.error, dense=program.dense,
                          n_ad=2 + n, saves=bool(saves),
                          n_err=None if field.error_states is None else field.n_error,
                          last=program.last, error2=program.error2)
    return dataclasses.replace(kernel, buffers=tuple(buffers), uniforms=tuple(uniforms),
                               adaptive=parts)


def print_parts(printed, dialect) -> PrintedAdaptive:
    """The adaptive pieces of a printed kernel, in its dialect."""
    k = printed.kernel
    parts, lit = k.adaptive, dialect.float_literal
    n_states = len(k.states)
    n_err = n_states if parts.n_err is None else parts.n_err   # (a joined field's own)

    def weighted(comb: Combination, i: int) -> str:
        terms = [k.stage_k[j][i] if w == 1 else f"{lit(float(w))} * {k.stage_k[j][i]}"
                 for j, w in comb.terms]
        return " + ".join(terms) if terms else lit(0.0)

    consts = {"two": lit(2.0), "three": lit(3.0), "safety": lit(C.SAFETY), "fmin": lit(C.FACTOR_MIN), "fmax": lit(C.FACTOR_MAX),
              "under": lit(C.UNDERFLOW[k.dtype]), "n": lit(float(n_err)),
              "one": lit(1.0), "zero": lit(0.0), "small": lit(1e-5), "tiny": lit(1e-15),
              "h_small": lit(1e-6), "h_frac": lit(1e-3), "hundred": lit(100.0),
              "cent": lit(0.01), "inv_root": lit(1.0 / (parts.q + 1)),
              "neg_root": lit(-1.0 / (parts.q + 1)),
              "lo": lit(1e-8), "hi": lit(1e8), "running": str(RUNNING),
              "end": str(C.REACHED_END), "max": str(C.MAX_STEPS), "paused": str(PAUSED),
              "underflow": str(C.STEP_UNDERFLOW), "sing": lit(C.singular_error(parts.q))}
    built = _built(k, dialect, parts.q, n_err)
    if parts.fixed:
        return PrintedAdaptive(errors=(), dense=(), last=(), root=2, consts=consts, fixed=True,
                               n_err=n_err, **built)
    return PrintedAdaptive(**built,
        errors=tuple(weighted(parts.error, i) for i in range(n_states)),
        dense=tuple(tuple(weighted(p, i) for p in parts.dense) for i in range(n_states)),
        last=tuple(k.stage_k[parts.last][i] for i in range(n_states)),
        root=parts.q + 1, consts=consts, saves=parts.saves, n_err=n_err,
        errors2=() if parts.error2 is None else tuple(weighted(parts.error2, i)
                                                      for i in range(n_states)))


def _built(k, dialect, q: int, n_err: int) -> dict:
    """The pieces of codegen/build for this kernel: the controller printed, the first
    step as IR (its template prints the trial stage it splices in), the carry (as IR
    where the events' rows go inside it; printed in lane arrays for C)."""
    from ...codegen import lanes
    from ...codegen.build import carry, controller, first_step
    from ...codegen.targets import printer
    fd = first_step.Field(states=tuple(s[0] for s in k.states),
                          k0=tuple(k.stage_k[0]), trial=tuple(s[1] for s in k.states),
                          k1=tuple(k.stage_k[1]) if len(k.stage_k) > 1 else (),
                          n_err=n_err, basin=bool(k.has_basin))
    first = first_step.first_step(dialect, fd, q) if fd.k1 else ()
    cf = carry.Field(states=fd.states, params=tuple(k.pt_params), k0=fd.k0)
    out = dict(ctl=controller.printed(dialect, q, k.dtype, RUNNING), first_ir=first,
               dialect=dialect)
    if not dialect.lane_block:
        out["carry_ir"] = {"load": carry.load(cf), "store": carry.store_all(cf, RUNNING)}
        return out
    regs = (*fd.states, *cf.params, *fd.k0)         # C: lane arrays A_name[l]
    arrays = (carry.TIME, carry.STEP, *carry.COUNTERS)
    p = printer(dialect)
    pieces = {"load_state": carry.load_state(cf),
              "resume": carry.resume(cf, paused=PAUSED, running=RUNNING),
              "store": carry.store(cf)}
    out["carry"] = {name: p.text(lanes.lane_arrays(v, arrays, registers=regs))
                    for name, v in pieces.items()}
    out["registers"] = (*regs, *fd.k1)
    return out
