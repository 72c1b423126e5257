"""Events (``when``, ``stop when``) in the kernel description, in no language.

``extend(kernel, field)`` adds what a kernel needs to run a field's events
(docs/language.md, "Events"; the numpy reference is backends/numpy/events.py):
- per event, its condition as a block over the state variables ``q_*`` (the
  state being examined: a step's end, a bisection point, the state after an
  event), ``tt`` and ``nstep``; its assignments' values (temporaries ``vg_v*``,
  all evaluated before any is made) and its flux deposits, over ``q_*`` too;
- the buffers that carry a trajectory's events between dispatches: ``b_evi``
  (ints: previous condition values as bits, the lane's own status, the steps it
  took, the events of the current step, then the count of each ``when``) and
  ``b_evf`` (floats: the time it stopped, the end of the current 64-events span);
- the uniform ``u_every``: a fixed-step method's ``save_every`` (the states at saved
  step ends go to the save_at history buffer, ``b_hist``);
- with noise (print_parts: the increments onto the step's end ``vg_n*``), conditions
  at step ends only; GLSL's float64 `flux` inside `when` as an event log (``extend``'s
  ``log``, summed on the host by ``log_sums``);
- the location rule's numbers (ir/events.py) and the continuous extension of a
  fixed-step method (ir/events.dense_program: the Hermite through both ends).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ... import spelling as S
from ...errors import BackendError
from ...ir import controller as C
from ...ir import observers as _observers
from ...ir.events import BISECTIONS, MAX_PER_STEP, SAMPLE_HALVINGS, SAMPLES, dense_program
from ...ir.nodes import Field
from ...ir.ranges import Where
from ...ir.step import Combination
from . import noise as _noise
from .dialect import mangle
from .kernel import Block, Buffer, Context, Deposit, Fluxer, Kernel, Let, Uniform, flat

EVI_ROWS = ("prev", "lstat", "ltaken", "instep")    # then one row per `when` (counts)
EVF_ROWS = ("tstop", "window")
STATE = "q"                 # the prefix of the state variables an event block reads
CTX = Context(state=STATE, time="tt", step="nstep", where=Where.AFTER)


@dataclass(frozen=True)
class EventBlocks:
    cond: Block
    assign: Block | None                # Let(vg_v<e>_<j>, value) per assignment
    targets: tuple[tuple[int, str], ...]    # (state index, the temporary holding its value)
    flux: Block | None
    stop: bool
    block: int | None                   # the `when` block's number (event_counts' column)


@dataclass(frozen=True)
class EventParts:
    events: tuple[EventBlocks, ...]
    n_when: int
    bisections: int
    max_per_step: int
    dense: tuple[Combination, ...]      # the continuous extension, per power of theta
    end_slope: bool                     # dense reads F at the step's end as one more stage
    q_names: tuple[str, ...]            # the q_* variable of each state
    noisy: bool = False                 # noise: conditions at step ends only, no location
    log: bool = False                   # flux inside `when` goes to the event log (b_evlog)
    reads_dt: bool = False              # F reads `dt`: a fixed step's stage 0 at its start
    firsts: tuple = ()                  # FirstBlocks per observer `first` (located, not fired)
    rows: bool = True                   # b_evi, b_evf carried between dispatches (extend)


@dataclass(frozen=True)
class FirstBlocks:
    """An observer ``first(COND)`` (ir/observers.py's rule): COND as a block over ``q_*``
    (``vg_hold``), located on a segment's extension by the events' bisection without
    ending the step; its hidden state is state ``index``."""
    cond: Block
    index: int


LOG_FIELDS = ("major", "rest", "phase", "event", "statement", "lane", "index", "value")


MAX_EVENTS = 30             # a lane's previous conditions are the bits of one int (b_evi)


def check(field: Field, backend: str) -> None:
    """What the compiled backends' events do not cover, as a BackendError naming
    ``backend`` at the field's first event: more than MAX_EVENTS."""
    if len(field.events) <= MAX_EVENTS:
        return
    why = f"more than {MAX_EVENTS} events ({len(field.events)})"
    raise BackendError(f"the {backend} backend has no {why} (field `{field.name}`); use "
                       f"{S.setting('backend', 'numpy')}",
                       span=field.events[0].span)


def _where(span) -> str:
    """A kernel line's comment: the source line it comes from."""
    return f"line {span.line}" if span is not None else ""


def extend(kernel: Kernel, field: Field, log: bool = False, rows: bool = True) -> Kernel:
    """The kernel with its events (comments name each piece's source line).

    ``rows``: the events' rows carried between dispatches (b_evi, b_evf); a GLSL or WGSL
    kernel whose events' code runs only for its observers ``first`` has none to carry
    (no condition to remember, no stop), and its runners bind them for events alone.

    ``log`` (GLSL float64, which has no float64 atomics): every `flux` inside `when`
    appends a record (LOG_FIELDS) to the event log ``b_evlog`` (its count in ``b_evn``,
    room for ``u_logcap`` records) instead of adding to its output; the host sums the
    records in the numpy reference's order (``log_sums``). Its fluxers' ``deposit`` is
    ``-2 - statement``."""
    log = log and kernel.dtype == "float64" and any(ev.flux for ev in field.events)
    statement = 0
    fluxers = list(kernel.fluxers)
    decls = {o.name: o for o in field.outputs}
    events = []
    for e, ev in enumerate(field.events):
        cond = Block(ctx=CTX, coupled=None, body=(Let("vg_hold", ev.cond, _where(ev.span)),),
                     prefix=f"vg_te{e}_")
        assign, targets = None, []
        if ev.assigns:
            body = []
            for j, (k, value) in enumerate(ev.assigns):
                name = f"vg_v{e}_{j}"
                body.append(Let(name, value, _where(ev.span)))
                targets.append((k, name))
            assign = Block(ctx=CTX, coupled=None, body=tuple(body), prefix=f"vg_ta{e}_")
        flux = None
        if ev.flux:
            body = []
            for fl in ev.flux:
                n = len(fluxers)
                func = mangle(f"fx{n}", fl.output)
                template = next(x for x in kernel.fluxers if x.array == fl.output) \
                    if any(x.array == fl.output for x in kernel.fluxers) else None
                dims = template.dims if template else tuple(
                    str(x) if isinstance(x, int) else mangle("d", x)
                    for x in decls[fl.output].dims)
                offset = template.flat if template else flat(
                    [f"i{k}" for k in range(len(dims))], dims)
                fluxers.append(Fluxer(func=func, buffer=mangle("b_out", fl.output), dims=dims,
                                      array=fl.output, flat=offset,
                                      deposit=-2 - statement if log else -1))
                statement += 1
                body.append(Deposit(func, (*fl.index, fl.value), fl.output, fl.span,
                                    _where(fl.span)))
            flux = Block(ctx=CTX, coupled=None, body=tuple(body), prefix=f"vg_tx{e}_")
        events.append(EventBlocks(cond, assign, tuple(targets), flux, ev.stop, ev.block))
    buffers = list(kernel.buffers)
    rows = rows or bool(field.events)
    if rows:
        buffers.append(Buffer(len(buffers), "evi", "b_evi", "int",
                              comment="events: previous conditions (bits), own status, "
                                      "steps, events this step, count per when"))
        buffers.append(Buffer(len(buffers), "evf", "b_evf", "float",
                              comment="events: time stopped, end of the 64-events span"))
    uniforms = list(kernel.uniforms) + [
        Uniform("int", "u_every", "save_every with events: steps between saved states (0: "
                "none)", "every")]
    if log:
        buffers.append(Buffer(len(buffers), "evlog", "b_evlog", "float",
                              comment="events' flux: one record per deposit ("
                                      + ", ".join(LOG_FIELDS) + ")"))
        buffers.append(Buffer(len(buffers), "evn", "b_evn", "uint",
                              comment="events' flux: records written (atomicAdd)"))
        uniforms.append(Uniform("int", "u_logcap", "room in b_evlog (records)", "logcap"))
    firsts = tuple(
        FirstBlocks(Block(ctx=CTX, coupled=None, body=(Let("vg_hold", r.expr, "first"),),
                          prefix=f"vg_tf{i}_"), r.index)
        for i, r in enumerate(_observers.firsts(field)))
    dense, end_slope = dense_program(field.solver.tableau)
    parts = EventParts(firsts=firsts, events=tuple(events), n_when=field.n_when,
                       bisections=BISECTIONS[kernel.dtype], max_per_step=MAX_PER_STEP,
                       dense=dense, end_slope=end_slope,
                       q_names=tuple(mangle(STATE, s.name) for s in field.states),
                       noisy=bool(field.noises), log=log, reads_dt=reads_dt(field),
                       rows=rows)
    return dataclasses.replace(kernel, buffers=tuple(buffers), fluxers=tuple(fluxers),
                               uniforms=tuple(uniforms), events=parts)


def reads_dt(field: Field) -> bool:
    """Whether the derivatives (or the coupled values they read) read `dt`: then a
    fixed-step method's stage 0 is F at each step's start with that step's dt (a partial
    step's length, the full dt after it), not F kept from the end of the last step."""
    from ...ir.nodes import Sym
    from ...ir.ops import SymKind
    from ...ir.walk import walk
    roots = [c.expr for c in field.coupled] + list(field.derivs)
    return any(isinstance(x, Sym) and x.kind is SymKind.DT for x in walk(*roots))


def evi_rows(n_when: int) -> int:
    return len(EVI_ROWS) + n_when


@dataclass(frozen=True)
class PrintedEvent:
    cond: object                        # PrintedBlock: vg_hold = the condition
    assign: object | None               # PrintedBlock: the values, into vg_v<e>_<j>
    targets: tuple[tuple[int, str], ...]
    flux: object | None                 # PrintedBlock of flux calls
    stop: bool
    block: int | None


def weighted(comb: Combination, name, lit, i: int) -> str:
    """``sum(w_j * k_j)`` of state i, ``name(j, i)`` naming stage j's k."""
    terms = [name(j, i) if w == 1 else f"{lit(float(w))} * {name(j, i)}"
             for j, w in comb.terms]
    return " + ".join(terms) if terms else lit(0.0)


class Located(tuple):
    """A kernel's printed events (PrintedEvent each), true where the kernel has events'
    code: also with none, for an observer `first` to locate (the templates' k.events)."""
    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class PrintedEvents:
    events: tuple                       # PrintedEvent per event (printing.py)
    dense: tuple[tuple[str, ...], ...]  # per state, per power of theta: sum(w_j k_j)
    q: tuple[str, ...]
    c: dict                             # printed constants
    bis: int
    stopped: int
    too_many: int
    max: int
    n_when: int
    fixed: bool
    noisy: bool = False         # noise: conditions at step ends only (no location)
    log: bool = False           # flux inside `when` into the event log (extend)
    noise_draws: tuple = ()     # with noise (a fixed-step method): dW of step vg_taken
    noise_update: tuple = ()    # ... added to the step's end state vg_n<i>
    lean: int = 0               # plain steps before the event code runs (0: none)
    samples: int = SAMPLES      # the location's samples of theta (ir.events.SAMPLES) ...
    sample_step: str = ""       # ... 1 / samples, printed
    bis_rest: int = 0           # ... and the halvings after them
    reads_dt: bool = False      # stage 0 of a fixed step is F at its start (EventParts)
    firsts: tuple = ()          # (PrintedBlock of COND, the observer's state index) per `first`
    rows: bool = True           # b_evi, b_evf carried between dispatches (EventParts)
    dialect: object = dataclasses.field(default=None, compare=False, repr=False)

    # the location built once (codegen/build/locate.py), printed in this dialect with the
    # template's pieces (the extension at theta, the conditions) spliced in
    def _print(self, stmts, splices: dict, indent: int) -> str:
        from ...codegen.targets import printer
        return printer(self.dialect, {k: str(v) for k, v in splices.items()}).text(stmts, indent)

    def _field(self, ends=None):
        """``ends``: the step's end state's names (vg_n<i>, a kernel of one trajectory)."""
        from ...codegen.build import locate
        ends = tuple(ends) if ends else tuple(f"vg_n{i}" for i in range(len(self.q)))
        return locate.Field(q=tuple(self.q), ends=ends,
                            firsts=tuple(j for _, j in self.firsts))

    def locate_events(self, extension, holds, first: str = "vg_first", declared: bool = False,
                      indent: int = 0) -> str:
        """Each event's condition that went false -> true located (``holds``: each one's
        condition into vg_hold; ``extension``: q_* at theta vg_mid)."""
        from ...codegen.build import locate
        stmts = locate.events(len(self.events), self.bis_rest, self.noisy, first, declared)
        return self._print(stmts, {"extension": extension,
                                   **{f"hold{e}": h for e, h in enumerate(holds)}}, indent)

    def _lane_ends(self) -> tuple:
        """C's step end state: the lane arrays vg_new<i> (indexed by codegen/lanes)."""
        return tuple(f"vg_new{i}" for i in range(len(self.q)))

    def locate_lanes(self, lane, extension, hold, up: str = "", indent: int = 0) -> str:
        """C (a kernel of lane blocks): one condition's location (locate.bracket) on the
        lanes of the list vg_on[0 .. vg_non), laid out by codegen/lanes.lane_list: the
        samples and the halvings outside, the list's lanes inside, the bracket in the
        arrays vg_lo/vg_hi over the list (vg_hi[vg_j]: the located theta). ``lane``: the
        statements that bind lane l of the list (its scalars); ``extension``: q_* at theta
        (vg_mid, or vg_fx with ``up``: the part [0, up[l]]); ``hold``: the condition on
        q_* into vg_hold."""
        from ...codegen import ir, lanes
        from ...codegen.build import locate
        part = None if not up else ir.Index(up, ir.Var("l"))
        stmts = lanes.lane_list(
            locate.bracket(self.bis_rest, up=part), (locate.LO, locate.HI),
            head=(ir.Let("l", ir.INT, ir.Index("vg_on", ir.Var("vg_j"))), ir.Splice("lane")))
        return self._print(stmts, {"lane": lane, "extension": extension, "hold": hold},
                           indent)

    # (C) codegen/build/events.py's pieces in the body of a loop over the block's lanes
    def lane_load(self, indent: int = 0) -> str:
        """(C, in the load loop over the lanes) the events' lane arrays zeroed, and on a
        resumed call read from the rows carried between calls (build.load)."""
        from ...codegen import ir, lanes
        from ...codegen.build import events as build
        ints, floats = build.carried_rows(self, (EVI_ROWS, EVF_ROWS))
        zero, yes, no = ir.Var(self.c["zero"]), ir.Lit(True, ir.BOOL), ir.Lit(False, ir.BOOL)
        stmts = (*(ir.Assign(ir.Var(n), ir.i(0)) for n, _ in ints),
                 *(ir.Assign(ir.Var(n), zero) for n, _ in floats),
                 ir.Assign(ir.Var("vg_moved"), no), ir.Assign(ir.Var("vg_atend"), yes),
                 ir.If(ir.ne(ir.Var("u_step0"), ir.i(0)), build.load(self, (EVI_ROWS, EVF_ROWS))))
        names = [n for n, _ in ints + floats] + ["vg_moved", "vg_atend"]
        return self._print(lanes.lane_arrays(stmts, names), {}, indent)

    def lane_store(self, indent: int = 0) -> str:
        """(C, in the store loop over the lanes) the rows carried between calls."""
        from ...codegen import lanes
        from ...codegen.build import events as build
        ints, floats = build.carried_rows(self, (EVI_ROWS, EVF_ROWS))
        return self._print(lanes.lane_arrays(build.store(self, (EVI_ROWS, EVF_ROWS)),
                                             [n for n, _ in ints + floats]), {}, indent)

    def conds_text(self, k, body, dst: str, indent: int = 0) -> str:
        """(C) every condition on q_* into the bits ``dst`` (build.conds); ``body``: the
        template's block printer."""
        from ...codegen.build import events as build
        return self._print(build.conds(self, dst), {
            f"cond{n}": body(ev.cond, k, 0, "vg_hold") for n, ev in enumerate(self.events)},
            indent)

    def firing_text(self, k, body, indent: int = 0) -> str:
        """(C, lane l's scalars bound, vg_fired its event at the event time) the event
        that fires there, then every condition on the state after (build.firing);
        ``body``: the template's block printer."""
        from ...codegen import lanes
        from ...codegen.build import events as build
        names = ("vg_prev", "vg_lstat", "vg_tstop", "vg_ltaken", "vg_taken", "vg_instep",
                 *(f"vg_cnt{w}" for w in range(self.n_when)))
        stmts = lanes.lane_arrays(build.firing(self, k), {**{n: n for n in names},
                                                          "vg_active": "A_act"})
        blocks = {}
        for n, ev in enumerate(self.events):
            blocks[f"cond{n}"] = body(ev.cond, k, 0, "vg_hold")
            if ev.assign:
                blocks[f"assign{n}"] = body(ev.assign, k, 0)
            if ev.flux:
                blocks[f"flux{n}"] = body(ev.flux, k, 0, "", True)
        return self._print(stmts, blocks, indent)

    def q_text(self, k, prefix: str, indent: int = 0) -> str:
        """(C) q_* = ``prefix`` formatted with the state's index i and register s."""
        from ...codegen.build import events as build
        return self._print(build.q_from(self, k, prefix), {}, indent)

    def interp_text(self, k, theta: str, indent: int = 0) -> str:
        """(C) q_* = the continuous extension at ``theta`` (build.interp)."""
        from ...codegen.build import events as build
        return self._print(build.interp(self, k, theta), {}, indent)

    def locate_declarations(self, first: str = "vg_first", indent: int = 0) -> str:
        from ...codegen.build import locate
        return self._print(locate.declarations(first), {}, indent)

    def locate_firsts(self, conds, start, end, extension, indent: int = 0) -> str:
        """The observers ``first`` of the step: ``start`` (q_* = the start state), ``end``
        (q_* at theta vg_fu), ``extension`` (q_* at theta vg_fx), ``conds``."""
        from ...codegen.build import locate
        stmts = locate.firsts(self.dialect, self._field(), self.bis_rest, self.noisy)
        return self._print(stmts, {"start": start, "end": end, "extension": extension,
                                   **{f"cond{k}": c for k, c in enumerate(conds)}}, indent)

    def locate_firsts_lanes(self, part: str, conds, start, end, extension, lane, listed,
                            gather, indent: int = 0) -> str:
        """C (a kernel of lane blocks): locate.firsts laid out over the block's lanes.
        One loop over the lanes where ``part`` holds (a condition of the template, on
        lane l) decides each lane's part of the step and its crossings (bit f of
        vg_fhit[l]); then per observer f (one loop, the condition chosen by vg_f: one
        location's code for all of them, the kernel's size bounded) its lanes in a list
        (vg_on[0 .. vg_non)), the arrays the location reads gathered for them
        (``gather``), its location (lanes.lane_list) and its time into vg_new<j>[l].
        ``lane``/``listed``: the statements binding lane l (of the block / of the list);
        ``end``/``extension``: q_* at theta vg_fu[l] / vg_fx."""
        from ...codegen import ir, lanes
        from ...codegen.build import locate
        ends = self._lane_ends()
        stmts = locate.firsts(self.dialect, self._field(ends), self.bis_rest, self.noisy)
        n = len(self.firsts)
        head, per = stmts[:-n], stmts[-n:]
        block = {"vg_fu": "vg_fu", "vg_fte": "vg_fte", "vg_fhit": "vg_fhit",
                 "vg_moved": "vg_moved", "vg_row": "vg_row", "vg_lstat": "vg_lstat",
                 "vg_active": "A_act", **{e: e for e in ends}}
        size, l, vf = ir.Var("VG_W"), ir.Var("l"), ir.Var("vg_f")
        if self.noisy:              # (no location: each time at the part's end)
            head, per = head + per, ()
        out = [ir.Array(a, ir.FLOAT if a != "vg_fhit" else ir.INT, size)
               for a in ("vg_fu", "vg_fte", "vg_fhit")]
        out.append(ir.Loop("l", ir.i(0), size, (
            ir.Assign(ir.Index("vg_fhit", l), ir.i(0)),
            ir.If(ir.Var(part), (ir.Splice("lane"), *lanes.lane_arrays(head, block))))))
        splices = {"start": start, "end": end, "extension": extension, "lane": lane,
                   "listed": listed, "gather": gather,
                   **{f"cond{k}": c for k, c in enumerate(conds)}}
        text = self._print(tuple(out), splices, indent)
        if not per:
            return text

        def chain(each):            # if (vg_f == 0) {..} else if (vg_f == 1) {..} ...
            tail: tuple = ()
            for k in reversed(range(n)):
                tail = (ir.If(ir.eq(vf, ir.i(k)), each(k), tail),)
            return tail
        mask = ir.i(2 ** (n - 1))
        for k in reversed(range(n - 1)):
            mask = ir.Select(ir.eq(vf, ir.i(k)), ir.i(2 ** k), mask)
        found = [lanes.lane_arrays(x.then, block) for x in per]
        # the location of per[0] (every observer's is the same but its condition: cond0
        # made the chain over vg_f), then each one's time into its state
        hold = self._print(chain(lambda k: (ir.Splice(f"cond{k}"),)), splices, 0)
        when = chain(lambda k: (ir.Assign(found[k][-1].target, found[k][-1].value),))
        loop = ir.Loop("vg_f", ir.i(0), ir.i(n), (
            ir.Let("vg_fm", ir.INT, mask),
            ir.Array("vg_on", ir.INT, size),
            ir.Let("vg_non", ir.INT, ir.i(0), mutable=True),
            ir.Loop("l", ir.i(0), size, (ir.If(
                ir.ne(ir.Bits(ir.Bit.AND, ir.Index("vg_fhit", l), ir.Var("vg_fm")), ir.i(0)), (
                    ir.Assign(ir.Index("vg_on", ir.Var("vg_non")), l),
                    ir.Assign(ir.Var("vg_non"), ir.add(ir.Var("vg_non"), ir.i(1))))),)),
            ir.Splice("gather"),
            *lanes.lane_list(found[0][:-1] + when, (locate.LO, locate.HI),
                             head=(ir.Let("l", ir.INT, ir.Index("vg_on", ir.Var("vg_j"))),
                                   ir.Splice("listed")))),
            comment="per observer `first`: its lanes, its location")
        return text + "\n" + self._print((loop,), {**splices, "cond0": hold}, indent)

    def first_hit(self, conds, start, indent: int = 0, ends=None) -> str:
        """A plain step's observers ``first``: vg_fh where one crossed (``start``: q_* =
        the step's start state; ``ends``: names holding each state's NaN-ness at the
        step's end, C: the start state's, constant over the step)."""
        from ...codegen.build import locate
        return self._print(locate.first_hit(self._field(ends)),
                           {"start": start, **{f"cond{k}": c for k, c in enumerate(conds)}},
                           indent)

    def first_jump(self, after: bool, conds, indent: int = 0, lanes: bool = False) -> str:
        """At an event's time, before the events (``after`` false) or after them.
        ``lanes`` (C, in a loop over the block's lanes l): the step's end state is the
        lane arrays vg_new<i>[l] (codegen/lanes.lane_arrays)."""
        from ...codegen import lanes as _lanes
        from ...codegen.build import locate
        build = locate.jump_after if after else locate.jump_before
        ends = self._lane_ends() if lanes else None
        stmts = build(self.dialect, self._field(ends))
        if lanes:
            stmts = _lanes.lane_arrays(stmts, ends)
        return self._print(stmts, {f"cond{k}": c for k, c in enumerate(conds)}, indent)


# A fixed-step method's kernel without a basin runs up to this many plain steps (the
# stages and the conditions at the step's end: templates' fixed_lean) before the event
# code, which a step that triggers an event goes to. A software renderer runs every `if`
# on every lane, masked, so the location and firing code would cost each step what an
# event costs (about 30 plain steps); a lane that triggers early waits for the others of
# its SIMD group. 64: the fastest of 8..256 on the LIF benchmark (benchmarks/events.py).
LEAN_STEPS = 64


def print_parts(printed, dialect, running: int) -> PrintedEvents:
    """The events' pieces of a printed kernel, in its dialect. A fixed-step method's
    extension reads stage 0's k from ``vg_f<i>`` (the start slope, kept before stage 0's
    k is F at the step's end) and the end slope from stage 0's k."""
    k = printed.kernel
    parts, lit = k.events, dialect.float_literal
    fixed = k.adaptive is None or k.adaptive.fixed
    n_stages = len(k.stages)

    def name(j: int, i: int) -> str:
        if parts.end_slope and j == n_stages:
            return k.stage_k[0][i]
        if fixed and j == 0:
            return f"vg_f{i}"
        return k.stage_k[j][i]

    consts = {"zero": lit(0.0), "one": lit(1.0), "two": lit(2.0), "half": lit(0.5),
              "running": str(running), "end": str(C.REACHED_END)}
    draws, update = _noise.printed(k, dialect, step="vg_taken",
                                   target=lambda i: f"vg_n{i}") if k.noise else ((), ())
    return PrintedEvents(
        noisy=parts.noisy, log=parts.log, noise_draws=draws, noise_update=update,
        firsts=tuple(zip(printed.firsts, (f.index for f in parts.firsts))),
        events=printed.events, q=parts.q_names,
        dense=tuple(tuple(weighted(p, name, lit, i) for p in parts.dense)
                    for i in range(len(k.states))),
        samples=SAMPLES, sample_step=lit(1.0 / SAMPLES),
        bis_rest=parts.bisections - SAMPLE_HALVINGS, reads_dt=parts.reads_dt,
        c=consts, bis=parts.bisections, stopped=C.STOPPED, too_many=C.TOO_MANY_EVENTS, max=parts.max_per_step, n_when=parts.n_when,
        fixed=fixed, dialect=dialect, rows=parts.rows,
        lean=LEAN_STEPS if fixed and not k.has_basin and k.collapse is None else 0)


def log_sums(records, outputs: list[str], shapes: dict, dtype) -> dict:
    """The event log's records (rows of LOG_FIELDS, ``lane`` the trajectory's place in the
    call) summed per output in the numpy reference's order: step (fixed) or attempt
    (adaptive), the rest of the step, the phase (the first event, then the pass over every
    condition), the event, its flux statement, the trajectory."""
    sums = {name: np.zeros(shape, dtype) for name, shape in shapes.items()}
    if records is None or not len(records):
        return sums
    r = records
    order = np.lexsort((r[:, 5], r[:, 4], r[:, 3], r[:, 2], r[:, 1], r[:, 0]))
    r = r[order]
    stmt = r[:, 4].astype(np.int64)
    for k, name in enumerate(outputs):
        mine = stmt == k
        np.add.at(sums[name].reshape(-1), r[mine, 6].astype(np.int64), r[mine, 7])
    return sums
