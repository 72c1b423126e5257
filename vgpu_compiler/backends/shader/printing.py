"""Printing a kernel description (kernel.py) with a dialect (dialect.py).

``print_kernel(kernel, dialect)`` turns the kernel's IR statements, step
combinations, neutral types and reductions into the text pieces the dialect's
templates lay out, and collects what only printing knows: the helpers called,
the run-time error sites (their ids are in the text), the guard under which
reads proven in range run unchecked (``Printer.guards``), and the loop
iterations of the helpers called per step (llvmpipe's loop limiter). The result,
a ``PrintedKernel``, reads like the kernel plus these; ``meta()`` is what the
runtime needs besides the text (JSON-able; the disk cache keeps it).
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import asdict, dataclass

from ...ir.step import Combination
from . import events as _ev
from . import noise as _noise
from . import rosenbrock as _ros
from .dialect import Dialect, mangle
from .kernel import INIT, Assign, Block, CoupledBlock, Kernel, Reduction, Stage, spell
from .render import Printer


@dataclass(frozen=True)
class PrintedReduction:
    var: str
    scratch: str
    source: str
    combine: str        # format with {0}, {1}
    neutral: str        # value of idle lanes
    mean: bool
    step: str           # one step of the tree: scratch[i] = combine(scratch[i], scratch[i + w])
    acc: str            # serial: lane 0's accumulator
    fold: str           # serial: acc = combine(acc, shared array[vg_at])
    slot: int


@dataclass(frozen=True)
class PrintedCoupled:
    values: tuple[Assign, ...]
    shared: tuple[tuple[str, str], ...]
    reductions: tuple[PrintedReduction, ...]
    fence: bool


@dataclass(frozen=True)
class PrintedBlock:
    """Temporaries, then assignments. ``words`` are the identifiers its code names: the
    templates declare ``tt``, ``nstep`` and the stage values ``y_*`` only where some block
    reads them; ``calls``: (helper with a loop, calls)."""

    coupled: PrintedCoupled | None
    temps: tuple[str, ...]
    body: tuple[Assign, ...]
    words: frozenset[str] = frozenset()
    calls: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PrintedStage:
    index: int
    comment: str
    time: str
    combos: tuple[Assign, ...]          # y_x = s_x + dt * (...)
    block: PrintedBlock
    fast: PrintedBlock | None = None    # the block when the guard holds (None: the same)

    @property
    def words(self) -> frozenset[str]:
        return self.block.words | (self.fast.words if self.fast else frozenset())


def _built_helpers(d, names) -> dict:
    """The math helpers built once as IR (codegen/build/helpers.py) that the kernel calls,
    printed in the dialect (C: every one), for the templates to insert by name."""
    from ...codegen.build import helpers
    return helpers.printed(d, None if d.lane_block else names)


def print_kernel(kernel: Kernel, dialect: Dialect) -> "PrintedKernel":
    return _Printing(kernel, dialect).run()


class PrintedKernel:
    """The kernel (its fields read through) with its printed pieces; see print_kernel."""

    def __init__(self, kernel: Kernel, dialect: Dialect, **printed):
        self.kernel, self.dialect = kernel, dialect
        self.__dict__.update(printed)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.kernel, name)

    def event_text(self):
        """The events' pieces in this dialect (event_text.EventText: adaptive_body.j2's ev)."""
        from .event_text import EventText
        return EventText(self)

    def block_text(self, b, width: int = 0, hold: str = "", flux: bool = False) -> str:
        """A printed block laid out (codegen/build/blocks.py: its coupled exchange, then
        on the active lanes its temporaries and assignments), ``width`` in."""
        from ...codegen.build import blocks
        return self._print(blocks.block(self.dialect, b, self._basin(), hold, flux), width)

    def body_text(self, b, width: int = 0, hold: str = "", flux: bool = False) -> str:
        """(C) a printed block's temporaries and assignments (blocks.statements), ``width``
        in, each line ended; nothing for an empty block."""
        from ...codegen.build import blocks
        stmts = blocks.statements(b, hold, flux)
        return self._print(stmts, width) if stmts else ""

    def observe_text(self, b, width: int, time: str, step: str, when: str = "") -> str:
        """The step-end observers' block at ``time``, step ``step`` (blocks.observe)."""
        from ...codegen.build import blocks
        return self._print(blocks.observe(self.dialect, b, self._basin(), time, step, when),
                           width)

    def vote_text(self, width: int = 0) -> str:
        """An adaptive kernel's collapse vote on the new state (blocks.vote): at vg_t, step
        vg_taken, into vg_collapsed."""
        from ...codegen import ir
        from ...codegen.build import blocks
        b = self.collapse
        cond = blocks.block(self.dialect, b, self._basin(), "vg_hold")
        return self._print((
            ir.Let("vg_collapsed", ir.BOOL, ir.Lit(False, ir.BOOL), mutable=True),
            blocks.vote(b.words, ir.Var("vg_t"), ir.Var("vg_taken"), cond, "vg_collapsed",
                        comment="collapse vote on the new state, t = the new time, step = "
                                "the steps accepted")), width)

    def vote_lanes(self, tt: str, nstep: str, bind: str, coupled: str = "", then=(),
                   idle: bool = True, width: int = 0) -> str:
        """(C) the collapse vote of a block's lanes on the new state at ``tt``, step
        ``nstep`` (printed): the basin's coupled values (``coupled``, printed), then each
        lane's condition (``bind``: its scalars, printed) into vg_hold; vg_against: some
        lane does not hold. ``idle``: an idle lane votes (as lane 0 votes: a fixed-step
        field's), else only the active lanes do; ``then``: the lines after the vote."""
        from ...codegen import ir
        from ...codegen.build import blocks
        from ...codegen.targets import printer
        V, hold = ir.Var, ir.not_(ir.Var("vg_hold"))
        against = hold if idle else ir.and_(ir.Index("A_act", V("l")), hold)
        stmts = (ir.Let("tt", ir.FLOAT, ir.Raw(tt)), ir.Let("nstep", ir.INT, ir.Raw(nstep)),
                 ir.Line("(void)tt; (void)nstep;"), ir.Splice("coupled"),
                 ir.Let("vg_against", ir.INT, ir.i(0), mutable=True),
                 ir.Loop("l", ir.i(0), V("VG_W"), (
                     ir.Splice("bind"), ir.Let("vg_hold", ir.BOOL, ir.Lit(True, ir.BOOL),
                                               mutable=True),
                     *blocks.statements(self.collapse, "vg_hold"),
                     ir.Assign(V("vg_against"), against, op=ir.Op.OR,
                               comment=None if idle else "(an idle lane has no vote)"))),
                 *(ir.Line(x) for x in then))
        return printer(self.dialect, {"bind": bind, "coupled": coupled}).text(stmts, width)

    def _basin(self):
        from ...codegen.build import blocks
        k = self.kernel
        if not k.has_basin:
            return blocks.Basin(reduction=k.reduction)
        return blocks.Basin(reduction=k.reduction, pow2=k.pow2, size=k.basin_size,
                            box=self.box)

    def _print(self, stmts, width: int) -> str:
        from ...codegen.targets import printer
        return printer(self.dialect).text(stmts, width) + "\n"

    def fixed_main(self) -> str:
        """The fixed-step kernel's body (shader/fixed.py: codegen/build/fixed.py), in this
        kernel's dialect."""
        from . import fixed
        return fixed.main(self, 4)

    @property
    def loop_words(self) -> frozenset[str]:
        """What the stages of the step loop read (t_n only through a stage's tt)."""
        return frozenset().union(*(st.words for st in self.stages))

    def meta(self) -> dict:
        """What the runtime needs besides the text (JSON-able)."""
        k = self.kernel
        return {
            "name": k.name, "dtype": k.dtype, "local_size": list(k.local_size),
            "lanes": self.lanes,        # trajectories per invocation (lanes.py)
            "has_basin": k.has_basin,
            "basin": [a.size for a in k.axes] if k.has_basin else None,
            "buffers": [asdict(b) for b in k.buffers],
            "collapse": k.collapse is not None,
            "flux": k.flux is not None, "n_deposits": k.n_deposits,
            "deposit_outputs": [f.array for f in k.fluxers if f.deposit >= 0],
            "event_log": [f.array for f in sorted((f for f in k.fluxers if f.deposit <= -2),
                                                   key=lambda f: -f.deposit)],
            "uses_init": k.uses_init,
            # Mesa llvmpipe stops all loops of an invocation after 65535 iterations in all
            # (its loop limiter), silently: one dispatch must run fewer steps than
            # (65535 - loop_trips_once) / loop_trips_per_step (helper loops counted in both)
            "reduction": k.reduction, "loop_trips_per_step": self.loop_trips_per_step,
            "loop_trips_once": self.loop_trips_once,
            "helper_loops": {h: {"trips": t, "per_step": s, "once": o}
                             for h, t, s, o in self.helper_loops},
            # the uniform of each role (grid: per axis; dim, param: per user name)
            "uniforms": [{"name": u.name, "role": u.role, "of": u.of} for u in k.uniforms],
            "errors": [list(e) for e in self.errors],
        }


class _Printing:
    def __init__(self, kernel: Kernel, dialect: Dialect):
        self.k, self.d = kernel, dialect
        self.reduce_vars = {}       # Reduce node -> the local holding its result
        for b in [st.block for st in kernel.stages] + [kernel.collapse, kernel.flux]:
            for r in (b.coupled.reductions if b and b.coupled else ()):
                self.reduce_vars[r.node] = r.var
        self.p = Printer(dialect, param_prefix=lambda n: mangle("p", n),
                         loader=lambda a: mangle("ld", a), coupled_at=lambda c: mangle("ca", c),
                         reduce_name=self.reduce_vars.__getitem__, ranges=kernel.ranges)

    def run(self) -> PrintedKernel:
        k, d = self.k, self.d
        init = tuple(Assign(a.target, self.p.expr(a.expr, INIT), a.comment) for a in k.init)
        stages = tuple(self._stage(st) for st in k.stages)
        collapse = self._block(k.collapse) if k.collapse else None
        flux = self._flux(k.flux) if k.flux else None
        observe = self._observe(k.observe) if k.observe else None
        observe_q = self._observe(k.observe_q) if k.observe_q else None
        events = _ev.Located(self._events(k.events)) if k.events else None
        firsts = tuple(self._block(f.cond) for f in k.events.firsts) if k.events else ()
        ros = (_ros.print_parts(k, k.rosenbrock, d, self._block, Assign)
               if k.rosenbrock is not None else None)
        if k.reports_errors:
            self.p.helpers.add(d.fail)
        noise_draws, noise_update = _noise.printed(k, d)
        if k.noise:
            self.p.need("vg_normal()")
        per_step, once = _helper_calls(stages, collapse, init, flux, d)
        for b in (observe, observe_q):  # at most once per step (and per event)
            per_step.update(dict(b.calls if b else ()))
        if ros is not None:             # the Jacobian's block runs once per attempt
            per_step.update(dict(ros.jac.calls))
        trips = lambda calls: sum(_trips(h, d) * n for h, n in calls.items())  # noqa: E731
        return PrintedKernel(
            k, d, F=d.F, zero=d.float_literal(0.0), lanes=1, lane_names=frozenset(),
            buffers=tuple(dataclasses.replace(b, type=d.type(b.type)) for b in k.buffers),
            uniforms=tuple(dataclasses.replace(u, type=d.type(u.type)) for u in k.uniforms),
            lane=spell(k.lane, d), active=spell(k.active, d), nactive=spell(k.nactive, d),
            box=spell(k.box, d),
            loaders=tuple(dataclasses.replace(x, flat=spell(x.flat, d)) for x in k.loaders),
            fluxers=tuple(dataclasses.replace(x, flat=spell(x.flat, d)) for x in k.fluxers),
            coupled_arrays=tuple(dataclasses.replace(x, flat=spell(x.flat, d))
                                 for x in k.coupled_arrays),
            helpers=tuple(sorted(self.p.helpers)), init=init, stages=stages,
            update=tuple(Assign(s, self._combination(k.update, i))
                         for i, (s, _, _) in enumerate(k.states)),
            collapse=collapse, flux=flux, observe=observe, observe_q=observe_q, events=events, firsts=firsts, ros=ros, noise_draws=noise_draws, noise_update=noise_update,
            noise_traj=_noise.printed_traj(k, d), noise_text=_noise.functions(k, d),
            built=_built_helpers(d, self.p.helpers),
            noise_vars=tuple(v for t in k.noise for v in (t.g, t.gx) if v),
            errors=tuple((kind, w, s.line if s else 0, s.column if s else 0)
                         for kind, w, s in self.p.errors),
            guard=d.all_of.join(self.p.guards),
            guard_note=", ".join(r for why in self.p.guards.values() for r in why),
            loop_trips_per_step=(1 + k.reduce_trips_per_step + trips(per_step)
                                 + (ros.trips if ros else 0)),
            loop_trips_once=k.reduce_trips_once + trips(once),
            helper_loops=tuple((h, _trips(h, d), per_step.get(h, 0), once.get(h, 0))
                               for h in sorted(set(per_step) | set(once))))

    # --- the step -------------------------------------------------------------------
    def _stage(self, st: Stage) -> PrintedStage:
        c = st.c
        time = "t_n" if c == 0 else f"t_n + {self.d.float_literal(float(c))} * u_dt"
        block = self._block(st.block)
        self.p.fast, used = True, len(self.p.guards_used)
        try:        # the same block, with the reads proven under Printer.guards unchecked
            fast = self._block(st.block)
        finally:
            self.p.fast = False
        fast = fast if len(self.p.guards_used) > used else None
        read = block.words | (fast.words if fast else frozenset())
        combos = (Assign(y, self._combination(st.state, i))
                  for i, (_, y, _) in enumerate(self.k.states))
        return PrintedStage(index=st.index, comment=f"c = {c}", time=time, block=block,
                            fast=fast, combos=tuple(a for a in combos if a.target in read))

    def _combination(self, comb: Combination, i: int) -> str:
        """``s + u_dt * (w0 * kj_x + ...)`` of state ``i`` (ir.step.Combination).

        One term whose weight is a power of two is ``s + (w * u_dt) * k``: the same
        number (scaling by 2^m is exact; subnormal operands aside) with one multiply
        fewer in the loop, since ``w * u_dt`` is loop-invariant (the Lorenz RK4 sweep:
        0.91x -> 1.0x the hand-written kernel; a weight of 1 is ``u_dt * k``)."""
        s, lit, k = self.k.states[i][0], self.d.float_literal, self.k.stage_k
        if len(comb.terms) == 1 and _power_of_two(comb.terms[0][1]):
            (j, w), = comb.terms
            scale = "u_dt" if w == 1 else f"({lit(float(w))} * u_dt)"
            return f"{s} + {scale} * {k[j][i]}"
        terms = [f"{lit(float(w))} * {k[j][i]}" for j, w in comb.terms]
        return f"{s} + u_dt * ({' + '.join(terms)})" if terms else s

    def _events(self, parts) -> tuple:
        """Each event's condition, assignment values and flux, printed (events.py)."""
        out = []
        for ev in parts.events:
            out.append(_ev.PrintedEvent(
                cond=self._block(ev.cond), assign=self._block(ev.assign) if ev.assign else None,
                targets=ev.targets, flux=self._flux(ev.flux) if ev.flux else None,
                stop=ev.stop, block=ev.block))
        return tuple(out)

    # --- blocks ---------------------------------------------------------------------
    def _block(self, b: Block) -> PrintedBlock:
        coupled = self._coupled(b.coupled, b)
        temps, names = self.p.hoist(b.roots, b.ctx, b.prefix)
        body = tuple(Assign(s.target, self.p.expr(s.expr, b.ctx, names), s.comment)
                     for s in b.body)
        return _with_words(PrintedBlock(coupled, tuple(temps), body), self.d)

    def _observe(self, b: Block) -> PrintedBlock:
        """The observers' block: per rule ``m = vg_fmax(m, e)`` (dialect.OBSERVE)."""
        block = self._block(b)
        body = []
        for a, s in zip(block.body, b.body):
            fmt = self.d.observe[s.comment]
            self.p.need(fmt)
            body.append(Assign(a.target, fmt.format(a.target, a.expr), s.comment))
        return dataclasses.replace(block, body=tuple(body))

    def _flux(self, b: Block) -> PrintedBlock:
        ids = [self.p.error_id("index", s.output, s.span) for s in b.body]
        coupled = self._coupled(b.coupled, b)
        temps, names = self.p.hoist(b.roots, b.ctx, b.prefix)
        body = []
        for s, eid in zip(b.body, ids):
            args = [self.p.expr(a, b.ctx, names) for a in s.args] + [self.d.uint(eid)]
            body.append(Assign(s.func, ", ".join(args), s.comment))
        return _with_words(PrintedBlock(coupled, tuple(temps), tuple(body)), self.d)

    def _coupled(self, cb: CoupledBlock | None, b: Block) -> PrintedCoupled | None:
        if cb is None:
            return None
        values = tuple(Assign(v.target, self.p.expr(v.expr, b.ctx), v.comment)
                       for v in cb.values)
        return PrintedCoupled(values, cb.shared, tuple(self._reduction(r) for r in cb.reductions),
                              cb.fence)

    def _reduction(self, r: Reduction) -> PrintedReduction:
        combine = self.d.reduce_combine[r.op]
        neutral = self.d.reduce_neutral(r.op)
        self.p.need(combine)
        self.p.need(neutral)
        step = f"{r.scratch}[i] = " + _strip(combine.format(f"{r.scratch}[i]", f"{r.scratch}[i + w]"))
        fold = f"{r.acc} = " + _strip(combine.format(r.acc, f"{r.shared}[vg_at]"))
        return PrintedReduction(var=r.var, scratch=r.scratch, source=r.source, combine=combine,
                                neutral=neutral, mean=r.mean, step=step, acc=r.acc, fold=fold,
                                slot=r.slot)


# --- what the printed text holds ------------------------------------------------------
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _with_words(block: PrintedBlock, d: Dialect) -> PrintedBlock:
    """``block`` with the identifiers its printed code names (see PrintedBlock.words) and
    its calls of helpers with loops."""
    texts = list(block.temps) + [a.expr for a in block.body]
    if block.coupled is not None:
        texts += [v.expr for v in block.coupled.values]
    return dataclasses.replace(block, words=frozenset(
        w for t in texts for w in _IDENTIFIER.findall(t)), calls=_calls(texts, d))


_GUARDED = re.compile(r"(ld|fx[0-9]+)[_X]")    # an input's loader, a flux's adder (mangle)


def _trips(h: str, d: Dialect) -> int:
    """The most loop trips of one call of ``h``: a helper with a loop, a loader, an adder."""
    if h in d.loop_helpers:
        return d.loop_helpers[h]
    return d.guarded_trips[0 if h.startswith("ld") else 1] if _GUARDED.match(h) else 0


def _calls(texts, d: Dialect) -> tuple[tuple[str, int], ...]:
    """(helper, calls) for each helper with a loop that the texts call, loaders and
    adders with one included (Dialect.guarded_trips)."""
    n = Counter(w for t in texts for w in _IDENTIFIER.findall(t) if _trips(w, d))
    return tuple(sorted(n.items()))


def _helper_calls(stages, collapse, init, flux, d: Dialect) -> tuple[dict, dict]:
    """Calls of helpers with loops, per step (a stage runs its block or its fast block:
    the larger count) and once (init, flux), as {helper: calls}."""
    per_step: Counter = Counter()
    for st in stages:
        a, b = dict(st.block.calls), dict(st.fast.calls if st.fast else ())
        per_step.update({h: max(a.get(h, 0), b.get(h, 0)) for h in a.keys() | b.keys()})
    per_step.update(dict(collapse.calls if collapse else ()))
    once: Counter = Counter(dict(_calls([a.expr for a in init], d)))
    once.update(dict(flux.calls if flux else ()))
    return +per_step, +once


def _power_of_two(w) -> bool:
    """Is the Fraction ``w`` 2^m for an integer m (positive, either way of 1)?"""
    n, d = w.numerator, w.denominator
    return n > 0 and n & (n - 1) == 0 and d & (d - 1) == 0 and (n == 1 or d == 1)


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text
