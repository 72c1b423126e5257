"""Where a condition goes false -> true on a step's continuous extension, once (ir/events.py's
rule, numpy/events.py's ``bisect`` in the reference's order of operations): the samples
theta = j / SAMPLES (j = 1 .. SAMPLES - 1), the first whose condition holds giving the
bracket [(j - 1) / SAMPLES, j / SAMPLES] (none: the last sub-interval), then ``halvings``
bisections of it; the located theta is the bracket's upper end. No ``break`` and no ``if``
around the condition: on a software renderer either costs more than the trips.

The pieces a kernel of one trajectory per invocation (GLSL, WGSL: build/events.py) places,
the condition and the extension being its template's (``Splice``):

- ``bracket``: the location of one condition, into ``vg_lo``/``vg_hi``. ``up`` (an
  observer ``first`` in the part of a step before its event, theta in [0, up]): the
  extension at theta * up, the time t_n + theta * (u_dt * up), as numpy/observers.py's
  ``crossing``. Splices: ``extension`` (q_* at theta ``vg_mid``, or ``vg_fx`` with
  ``up``), ``hold`` (the condition on q_* into ``vg_hold``).
- ``events``: each event's condition that went false -> true (bit e of ``vg_trig``)
  located, the earliest into ``vg_th`` and its event into ``first``; with noise no
  location (the first in written order, theta 1). Splices ``hold{e}``.
- ``firsts``: the observers ``first(COND)`` (ir/observers.py), located, without ending
  the step, in the part of the step before its event (theta in [0, vg_row]) or the whole
  step, on a trajectory running where one is still NaN and COND goes false -> true from
  the step's start to that part's end; the time into its state's step-end register
  (``ends``). Splices ``cond{f}`` (COND f on q_* into vg_hold), ``start`` (q_* = the
  step's start state), ``end`` (q_* at theta ``vg_fu``).
- ``jump_before``/``jump_after``: at an event, ``first`` takes the event's time where
  the event made COND true (false just before, true just after: numpy/observers.py's
  ``jump``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.events import SAMPLES
from .. import ir
from ..ir import BOOL, FLOAT, INT, Assign, Block, Comment, If, Let, Loop, Splice, Var, f, i

LO, HI, MID, HOLD = "vg_lo", "vg_hi", "vg_mid", "vg_hold"


def _hold_at(mid, up) -> tuple:
    """tt and the condition at theta = mid (of the part [0, up] with ``up``)."""
    dt = Var("u_dt") if up is None else ir.mul(Var("u_dt"), up)
    head = () if up is None else (Let("vg_fx", FLOAT, ir.mul(mid, up)),)
    return head + (Let("tt", FLOAT, ir.add(Var("t_n"), ir.mul(mid, dt))), Splice("extension"),
                   Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice("hold"))


def bracket(halvings: int, up=None, samples: int = SAMPLES) -> tuple:
    lo, hi, mid, hold = Var(LO), Var(HI), Var(MID), Var(HOLD)
    step, one = f(1.0 / samples), f(1.0)

    def at(j):
        return ir.mul(ir.call("to_float", j), step)
    return (
        Let(LO, FLOAT, at(i(samples - 1)), mutable=True),
        Let(HI, FLOAT, one, mutable=True),
        Comment(f"every sample theta = j / {samples}; the first that holds gives the bracket "
                f"(no `break` and\nno `if` around the condition: on a software renderer "
                f"either costs far more than the trips)"),
        Loop("vg_si", i(1), i(samples), (
            Let(MID, FLOAT, at(Var("vg_si"))), *_hold_at(mid, up),
            If(ir.and_(hold, ir.eq(hi, one)),
               (Assign(lo, at(ir.sub(Var("vg_si"), i(1)))), Assign(hi, mid))))),
        Loop("vg_b", i(0), i(halvings), (
            Let(MID, FLOAT, ir.mul(ir.add(lo, hi), f(0.5))), *_hold_at(mid, up),
            If(hold, (Assign(hi, mid),), (Assign(lo, mid),)))))


def _bit(flags: str, e: int):
    return ir.ne(ir.Bits(ir.Bit.AND, Var(flags), i(2 ** e)), i(0))


def events(n: int, halvings: int, noisy: bool, first: str = "vg_first",
           declared: bool = False) -> tuple:
    """``declared``: vg_th and ``first`` are declared by the caller (``declarations``)."""
    th = Var("vg_th")
    start = f(1.0) if noisy else f(2.0)
    if declared:
        head: tuple = (Assign(th, start), Assign(Var(first), i(-1)))
    else:
        head = (Let("vg_th", FLOAT, start, mutable=True), Let(first, INT, i(-1), mutable=True))
    if noisy:
        return (Comment("with noise: the conditions at the step's end only (no location)"),
                *head, *(If(_bit("vg_trig", e), (Assign(Var(first), i(e)),))
                         for e in reversed(range(n))))
    body = []
    for e in range(n):
        body.append(If(_bit("vg_trig", e), (
            _renamed(bracket(halvings), {"hold": f"hold{e}"})
            + (If(ir.lt(Var(HI), th), (Assign(th, Var(HI)), Assign(Var(first), i(e)))),))))
    return (Comment("each condition that went false -> true: samples, then bisection on the "
                    "step's extension"), *head, *body)


def declarations(first: str = "vg_first") -> tuple:
    """vg_th, ``first`` and vg_row declared before the events' location (a kernel whose
    observers ``first`` read vg_row between the location and the events)."""
    return (Let("vg_th", FLOAT, f(2.0), mutable=True), Let(first, INT, i(-1), mutable=True),
            Let("vg_row", FLOAT, f(1.0), mutable=True))


def _renamed(stmts, names: dict) -> tuple:
    """``stmts`` with the splices named again (``names``: old -> new)."""
    out = []
    for s in stmts:
        if isinstance(s, Splice):
            out.append(Splice(names.get(s.name, s.name)))
        elif isinstance(s, Loop):
            out.append(Loop(s.var, s.start, s.stop, _renamed(s.body, names)))
        elif isinstance(s, If):
            out.append(If(s.cond, _renamed(s.then, names), _renamed(s.orelse, names)))
        elif isinstance(s, Block):
            out.append(Block(_renamed(s.body, names), s.comment))
        else:
            out.append(s)
    return tuple(out)


@dataclass(frozen=True)
class Field:
    q: tuple[str, ...]          # the condition's registers (the state at theta)
    ends: tuple[str, ...]       # the step's end state (vg_n<i>)
    firsts: tuple[int, ...]     # per observer first: its state


def firsts(t, fd: Field, halvings: int, noisy: bool) -> tuple:
    """``vg_moved``/``vg_row`` (the events' location) decide the part of the step."""
    one, fu, fte = f(1.0), Var("vg_fu"), Var("vg_fte")
    n = len(fd.firsts)
    unset = [ir.call("isnan", Var(fd.ends[j])) for j in fd.firsts]
    anyone = unset[0]
    for x in unset[1:]:
        anyone = ir.or_(anyone, x)
    live = ir.and_(ir.and_(Var("vg_active"), ir.eq(Var("vg_lstat"), i(0))), anyone)
    start = Block((Let("tt", FLOAT, Var("t_n")), Splice("start"),
                   *(If(unset[k], (Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True),
                                   Splice(f"cond{k}"), Assign(Var(f"vg_was{k}"), Var(HOLD))))
                     for k in range(n))), "at the step's start")
    end = Block((Let("tt", FLOAT, fte), Splice("end"),
                 If(ir.eq(fu, one), tuple(Assign(Var(q), Var(e)) for q, e in zip(fd.q, fd.ends))),
                 *(If(ir.not_(Var(f"vg_was{k}")), (
                     Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{k}"),
                     If(Var(HOLD), (Assign(Var("vg_fhit"), ir.Bits(ir.Bit.OR, Var("vg_fhit"),
                                                                   i(2 ** k))),))))
                   for k in range(n))), "at the part's end")
    out = [Comment("the observers `first`: a crossing in the step (or its part before an event), "
                   "located\n(codegen/build/locate.py), the step not ended"),
           Let("vg_fu", FLOAT, ir.Select(Var("vg_moved"), Var("vg_row"), one)),
           Let("vg_fte", FLOAT, ir.Select(ir.eq(fu, one), Var("vg_tn"),
                                          ir.add(Var("t_n"), ir.mul(fu, Var("u_dt"))))),
           Let("vg_fhit", INT, i(0), mutable=True),
           If(live, (*(Let(f"vg_was{k}", BOOL, ir.Lit(True, BOOL), mutable=True)
                       for k in range(n)), start, end))]
    for k, j in enumerate(fd.firsts):
        if noisy:       # with noise: at the part's end
            found: tuple = (Assign(Var(fd.ends[j]), fte),)
        else:
            when = ir.Select(ir.eq(Var(HI), one), fte,
                             ir.add(Var("t_n"), ir.mul(Var(HI), ir.mul(Var("u_dt"), fu))))
            found = _renamed(bracket(halvings, up=fu), {"hold": f"cond{k}"}) + (
                Assign(Var(fd.ends[j]), when),)
        out.append(If(_bit("vg_fhit", k), found))
    return tuple(out)


def jump_before(t, fd: Field) -> tuple:
    """At the event's time, before the events: q_j = the located value, and whether
    COND held just before (vg_fw<f>); ``vg_live`` the trajectory's."""
    out = []
    for k, j in enumerate(fd.firsts):
        out += [Assign(Var(fd.q[j]), Var(fd.ends[j])),
                Let(f"vg_fw{k}", BOOL, ir.Lit(False, BOOL), mutable=True),
                If(ir.and_(Var("vg_live"), ir.call("isnan", Var(fd.q[j]))), (
                    Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{k}"),
                    Assign(Var(f"vg_fw{k}"), Var(HOLD))))]
    return tuple(out)


def jump_after(t, fd: Field) -> tuple:
    """... after them: made true by the event, the event's time ``tt``."""
    return tuple(
        If(ir.and_(ir.and_(Var("vg_live"), ir.call("isnan", Var(fd.q[j]))),
                   ir.not_(Var(f"vg_fw{k}"))), (
            Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{k}"),
            If(Var(HOLD), (Assign(Var(fd.q[j]), Var("tt")),))))
        for k, j in enumerate(fd.firsts))


def first_hit(fd: Field) -> tuple:
    """A plain step (the fixed_lean steps before the event code) in whose scope q_* is the
    step's end and tt its time: ``vg_fh`` set where an observer ``first`` is NaN and its
    COND goes false -> true from the step's start to its end, so that the event code
    takes the step and locates it (as the reference's fixed_events.py takes it again).
    Splices ``cond{f}``, ``start`` (q_* = the step's start state, declared anew)."""
    out = []
    for k, j in enumerate(fd.firsts):
        before = Block((Let("tt", FLOAT, Var("t_n")), Splice("start"),
                        Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{k}"),
                        Assign(Var("vg_fh"), ir.Bits(ir.Bit.OR, Var("vg_fh"),
                                                     ir.Select(Var(HOLD), i(0), i(1))))),
                       "... and at the step's start")
        out.append(If(ir.call("isnan", Var(fd.ends[j])), (
            Let(HOLD, BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{k}"),
            If(Var(HOLD), (before,)))))
    return (Comment("an observer `first` crossing in this step: the event code takes it"),
            *out)
