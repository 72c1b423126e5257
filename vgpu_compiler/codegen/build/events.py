"""The events of a kernel of one trajectory per invocation (GLSL, WGSL), once: the numbers
and the order of the numpy reference (backends/numpy/events.py). All of it runs in the
shader: the conditions at a step's end, the location on the step's continuous extension
(locate.py), the events and their flux, the pass over every condition after them. A
basin takes one decision (an event somewhere, its earliest time) through
``basin_fold``, so every lane runs the same barriers.

Each function gives the statements of one piece the adaptive kernel's body splices in
(build/adaptive.py, through templates/adaptive_body.j2); what the field's blocks print
comes in as a ``Splice`` (backends/shader/event_text.py names them): ``cond<e>`` (event
e's condition into vg_hold), ``assign<e>``, ``flux<e>``, ``stage0``, ``observe_q``, and
the location's pieces ``locate``, ``firsts``, ``first_before``, ``first_after``.

``e`` is the kernel's PrintedEvents (shader/events.py), ``k`` its PrintedKernel: their
printed names and constants are atoms here (``Var``)."""
from __future__ import annotations

from .. import ir
from ..ir import (BOOL, FLOAT, INT, UINT, Assign, Block, Comment, Elem, If, Inc, Let, Line,
                  Raw, Splice, Var, While, i)

LANE, COUNT = Var("lane"), Var("u_count")


def _row(r: int):
    """Row r of a per-trajectory buffer: r * u_count + lane."""
    if r == 0:
        return LANE
    return ir.add(COUNT if r == 1 else ir.mul(i(r), COUNT), LANE)


def carried_rows(e, rows) -> tuple[list, list]:
    """(register, row) of b_evi and of b_evf: ``rows`` their row names (shader/events.py's
    EVI_ROWS, EVF_ROWS), then one count per `when`."""
    evi, evf = rows
    ints = [(f"vg_{n}", r) for r, n in enumerate(evi)]
    ints += [(f"vg_cnt{w}", len(evi) + w) for w in range(e.n_when)]
    return ints, [(f"vg_{n}", r) for r, n in enumerate(evf)]


def decl(e, k, rows) -> tuple:
    """The registers: previous conditions (bit e), own status, steps, events this step."""
    ints, floats = carried_rows(e, rows)
    zero = Var(e.c["zero"])
    out = [Comment("--- events: previous conditions (bit e), own status, steps, events this step ---"),
           *(Let(n, INT, i(0), mutable=True) for n, _ in ints),
           *(Let(n, FLOAT, zero, mutable=True) for n, _ in floats)]
    if k.noise_vars:
        out += [Comment("--- noise: the counter's trajectory (flat index in the grid), stage 0's "
                        "coefficients ---"),
                Let("vg_traj", UINT, Raw(k.noise_traj)),
                *(Let(n, FLOAT, Var(k.zero), mutable=True) for n in k.noise_vars)]
    return tuple(out)


def load(e, rows) -> tuple:
    """The registers from the rows carried between dispatches (b_evi, b_evf)."""
    ints, floats = carried_rows(e, rows)
    return tuple([Assign(Var(n), Elem("b_evi", _row(r))) for n, r in ints]
                 + [Assign(Var(n), Elem("b_evf", _row(r))) for n, r in floats])


def store(e, rows) -> tuple:
    ints, floats = carried_rows(e, rows)
    return tuple([Assign(Elem("b_evi", _row(r)), Var(n)) for n, r in ints]
                 + [Assign(Elem("b_evf", _row(r)), Var(n)) for n, r in floats])


def conds(e, dst: str) -> tuple:
    """Every condition on q_* into the bits ``dst`` (declared by the caller)."""
    return tuple(Block((Let("vg_hold", BOOL, ir.Lit(False, BOOL), mutable=True),
                        Splice(f"cond{n}"),
                        If(Var("vg_hold"), (Line(f"{dst} |= {2 ** n};"),))))
                 for n in range(len(e.events)))


def q_from(e, k, prefix: str) -> tuple:
    """q_* = ``prefix`` of each state (``{i}``: its index, ``{s}``: its register)."""
    return tuple(Let(q, FLOAT, Raw(prefix.format(i=j, s=s[0])), mutable=True)
                 for j, (q, s) in enumerate(zip(e.q, k.states)))


def _powers(theta, terms, c: dict) -> tuple:
    """acc = sum_p theta^(p+1) * terms[p], in the reference's order (``c``: the printed
    constants)."""
    return (Let("acc", FLOAT, Var(c["zero"]), mutable=True, precise=True),
            Let("pw", FLOAT, Var(c["one"]), mutable=True, precise=True),
            *(s for dp in terms for s in (
                Assign(Var("pw"), ir.mul(Var("pw"), theta)),
                Assign(Var("acc"), ir.add(Var("acc"), ir.mul(Var("pw"), Raw(dp)))))))


def interp(e, k, theta: str) -> tuple:
    """q_* = the continuous extension at theta (s_* + u_dt * sum_p theta^(p+1) D_p)."""
    out = []
    for j, (q, s) in enumerate(zip(e.q, k.states)):
        end = Assign(Var(q), ir.add(Var(s[0]), ir.mul(Var("u_dt"), Var("acc"))))
        out += [Let(q, FLOAT, Var(s[0]), mutable=True),
                Block(_powers(Var(theta), e.dense[j], e.c) + (end,))]
    return tuple(out)


def fire(e, k, ev, n: int, phase: int) -> tuple:
    """Event ``ev`` (index n) happens on this lane (tt: the event time, q_*: the state)."""
    def ends(status):
        return (Assign(Var("vg_lstat"), Var(str(status))), Assign(Var("vg_tstop"), Var("tt")),
                Assign(Var("vg_ltaken"), ir.add(Var("vg_taken"), i(1))))
    if ev.stop:
        body = ends(e.stopped)
    else:
        body = [Let(name, FLOAT, Var(k.zero), mutable=True) for _, name in ev.targets]
        if ev.assign:
            body.append(Splice(f"assign{n}"))
        if ev.flux:
            if e.log:
                body += [Assign(Var("vg_lg_major"),
                                Var("vg_taken") if e.fixed else Raw("vg_taken + vg_rej"),
                                comment="the event log's key"),
                         Assign(Var("vg_lg_rest"), Var("vg_again" if e.fixed else "0")),
                         Assign(Var("vg_lg_phase"), i(phase)), Assign(Var("vg_lg_event"), i(n)),
                         Assign(Var("vg_lg_lane"), LANE)]
            if k.dialect.lane_block:    # (C: the lane's deposit slot and the phase)
                body.append(Block((
                    Let("vg_slot", INT, ir.add(ir.mul(Var("vg_b"), Var("VG_W")), Var("l"))),
                    Let("vg_ph", INT, i(phase)), Splice(f"flux{n}")),
                    comment="flux at this firing: into the call's event log"))
            else:
                body.append(Splice(f"flux{n}"))
        body += [Assign(Var(e.q[j]), Var(name)) for j, name in ev.targets]
        body.append(Inc(Var(f"vg_cnt{ev.block}")))
    return (If(ir.ge(Var("vg_instep"), i(e.max)), ends(e.too_many),
               (Inc(Var("vg_instep")), *body),
               comment=f"more than {e.max} events in one step: status 4"),)


def at_end(e, k, first: str) -> tuple:
    """After a step from (t_n, s_*) of length u_dt to (vg_tn, vg_n*): its events. Sets
    vg_moved (an event happened: the caller takes the state s_* and vg_t as they are
    left) and vg_atend (it happened at the step's end)."""
    active = ir.and_(Var("vg_active"), ir.eq(Var("vg_lstat"), i(0)))
    out = [Comment("--- events: every condition at the step's end ---"),
           Let("vg_cend", INT, i(0), mutable=True),
           Block((Let("tt", FLOAT, Var("vg_tn")), *q_from(e, k, "vg_n{i}"),
                  *conds(e, "vg_cend"))),
           Let("vg_trig", INT, ir.Select(active, Raw("vg_cend & ~vg_prev"), i(0))),
           Let("vg_moved", BOOL, ir.ne(Var("vg_trig"), i(0)), mutable=True)]
    if k.has_basin:
        out.append(Assign(Var("vg_moved"), _folded("vg_moved", True, e)))
    out.append(Let("vg_atend", BOOL, ir.Lit(True, BOOL), mutable=True))
    if e.firsts:
        out.append(Splice("declarations"))
    located = [Splice("locate"),
               Assign(Var("vg_row"), Var("vg_th")) if e.firsts
               else Let("vg_row", FLOAT, Var("vg_th"), mutable=True)]
    if k.has_basin:
        located.append(Assign(Var("vg_row"), ir.call("basin_fold", Var("vg_th"),
                                                     ir.Lit(False, BOOL)),
                              comment="the basin's step ends at its earliest event"))
    moved: list = []
    if e.firsts:
        out += [If(Var("vg_moved"), tuple(located)), Splice("firsts")]
    else:
        moved = located
    moved += [Assign(Var("vg_atend"), ir.eq(Var("vg_row"), Var(e.c["one"]))),
              Let("vg_tev", FLOAT, ir.Select(Var("vg_atend"), Var("vg_tn"), ir.add(
                  Var("t_n"), ir.mul(Var("vg_row"), Var("u_dt")))))]
    if not e.fixed:
        moved.append(If(ir.gt(Var("vg_tev"), Var("vg_window")), (
            Assign(Var("vg_instep"), i(0)),
            Assign(Var("vg_window"), ir.add(Var("t_n"), Var("u_dt")))),
            comment=f"a new span for the {e.max}-events limit"))
    inner = [Let("tt", FLOAT, Var("vg_tev")), *interp(e, k, "vg_row"),
             If(ir.or_(Var("vg_atend"), ir.ne(Var("vg_lstat"), i(0))), tuple(
                 Assign(Var(q), ir.Select(ir.ne(Var("vg_lstat"), i(0)), Var(s[0]),
                                          Var(f"vg_n{j}")))
                 for j, (q, s) in enumerate(zip(e.q, k.states)))),
             Let("vg_live", BOOL, active)]
    if k.observe_q:
        inner.append(Splice("observe_q"))
    if e.firsts:
        inner.append(Splice("first_before"))
    inner.append(Let("vg_fired", INT, ir.Select(
        ir.and_(ir.and_(Var("vg_live"), ir.ge(Var(first), i(0))),
                ir.eq(Var("vg_th"), Var("vg_row"))), Var(first), i(-1))))
    inner += firing(e, k)
    if e.firsts:
        inner.append(Splice("first_after"))
    inner += [Let("vg_after", INT, i(0), mutable=True), *conds(e, "vg_after"),
              Assign(Var("vg_prev"), Var("vg_after")),
              *(Assign(Var(s[0]), Var(q)) for q, s in zip(e.q, k.states))]
    moved += [Block(tuple(inner)), Assign(Var("vg_t"), Var("vg_tev"))]
    out.append(If(Var("vg_moved"), tuple(moved), (
        Assign(Var("vg_prev"), ir.Select(Var("vg_active"), Var("vg_cend"), Var("vg_prev"))),)))
    return tuple(out)


def firing(e, k) -> tuple:
    """At the event time: the earliest event there fires (vg_fired, -1: none), then every
    condition, in written order, on the state after it (``Splice("cond<e>")``)."""
    active = ir.and_(Var("vg_active"), ir.eq(Var("vg_lstat"), i(0)))
    out = [If(ir.eq(Var("vg_fired"), i(n)), fire(e, k, ev, n, 0))
           for n, ev in enumerate(e.events)]
    out.append(Comment("then every condition, in written order, on the state after"))
    for n, ev in enumerate(e.events):
        unset = ir.eq(ir.Bits(ir.Bit.AND, Var("vg_prev"), i(2 ** n)), i(0))
        out.append(If(ir.and_(ir.and_(active, unset), ir.ne(Var("vg_fired"), i(n))), (
            Let("vg_hold", BOOL, ir.Lit(False, BOOL), mutable=True), Splice(f"cond{n}"),
            If(Var("vg_hold"), fire(e, k, ev, n, 1)))))
    return tuple(out)


def _folded(flag: str, at_end: bool, e):
    """The basin's vote on ``flag`` (basin_fold: any lane, or ``at_end`` every lane)."""
    c = e.c
    return ir.gt(ir.call("basin_fold", ir.Select(Var(flag), Var(c["one"]), Var(c["zero"])),
                         ir.Lit(at_end, BOOL)), Var(c["half"]))


def frozen_k(k, stage: int, also: tuple = (), comment: str | None = None) -> tuple:
    """A stopped lane's derivatives are zero (in a basin its coupled values stay its own);
    ``also``: more of the stage's values (C: stage 0's noise coefficients)."""
    return (If(ir.ne(Var("vg_lstat"), i(0)),
               tuple(Assign(Var(n), Var(k.zero)) for n in (*k.stage_k[stage], *also)),
               comment=comment),)


def restart(k) -> tuple:
    """F at (vg_t, s_*) into stage 0's k: after events changed the state."""
    st = k.stages[0]
    body = [Let("t_n", FLOAT, Var("vg_t"))]
    if "tt" in st.words:
        body.append(Let("tt", FLOAT, Var("t_n")))
    body += [Let(s[1], FLOAT, Var(s[0]), precise=True) for s in k.states]
    body += [Splice("stage0"), *frozen_k(k, 0)]
    return (Block(tuple(body), comment="F at the state after the events: the next step's "
                                       "stage 0"),)


def all_stopped(e, k) -> tuple:
    """Every active lane of the basin stopped: the basin (or trajectory) ends."""
    body = [Let("vg_all", BOOL, ir.or_(ir.not_(Var("vg_active")),
                                       ir.ne(Var("vg_lstat"), i(0))), mutable=True)]
    if k.has_basin:
        body.append(Assign(Var("vg_all"), _folded("vg_all", False, e)))
    body.append(If(ir.and_(Var("vg_all"), ir.eq(Var("vg_status"), Var(e.c["running"]))),
                   (Assign(Var("vg_status"), Var(e.c["end"])),)))
    return (Block(tuple(body)),)


def _hist(k, j: int):
    """History slot vg_next's element of state j."""
    n = len(k.states)
    return Elem("b_hist", ir.add(ir.mul(ir.add(ir.mul(Var("vg_next"), i(n)), i(j)), COUNT),
                                 LANE))


def save_step(k) -> tuple:
    """save_every (a fixed-step method): after full step vg_taken, the state into the next
    history slot when the step is a saved one (every u_every-th, and the last)."""
    saved = Raw("vg_active && vg_next < u_nsave && (vg_taken % u_every == 0 || "
                "vg_taken == u_steps)")
    return (If(ir.gt(Var("u_every"), i(0)), (
        If(saved, (*(Assign(_hist(k, j), Var(s[0])) for j, s in enumerate(k.states)),
                   Inc(Var("vg_next")))),),
        comment="(uniform: a software renderer skips it)"),)


def keep_start(k) -> tuple:
    """save_at with events: the step's start state, kept for the saves after its events."""
    return tuple(Let(f"vg_y{j}", FLOAT, Var(s[0])) for j, s in enumerate(k.states))


def save_after(e, k) -> tuple:
    """save_at with events: the times inside (t_n, the step's end or its event], from the
    step's continuous extension; at that end itself the state after the events (the
    numpy reference's order: backends/numpy/adaptive.py, _save after events_in_step; a
    fixed-step method's (partial) step: fixed_events.py's _save, the Hermite of
    e.dense, at theta = 1 the step's end)."""
    a, fixed = k.ad, e.fixed
    c = a.consts
    at = Elem("b_save", Var("vg_next"))
    ahead = ir.le(at, Var("vg_tup"))
    if fixed:
        ahead = ir.Select(ir.lt(Var("u_dt"), Var(c["zero"])), ir.ge(at, Var("vg_tup")), ahead)
    go = ir.and_(ir.and_(Var("vg_active"), ir.lt(Var("vg_next"), Var("u_nsave"))), ahead)
    body = [Let("vg_s", FLOAT, at),
            Let("theta", FLOAT, ir.div(ir.sub(Var("vg_s"), Var("t_n")), Var("u_dt")))]
    dense = e.dense if fixed else a.dense
    for j, s in enumerate(k.states):
        acc = _powers(Var("theta"), dense[j], c)
        extension = ir.add(Var(f"vg_y{j}"), ir.mul(Var("u_dt"), Var("acc")))
        last = [Let("vg_last", FLOAT, ir.Select(Var("vg_moved"), Var(s[0]), Var(f"vg_n{j}")))]
        at_tup = ir.eq(Var("vg_s"), Var("vg_tup"))
        if fixed:
            last += [Let("vg_v", FLOAT, ir.Select(ir.eq(Var("theta"), Var(c["one"])),
                                                  Var(f"vg_n{j}"), extension)),
                     Assign(_hist(k, j), ir.Select(at_tup, Var("vg_last"), Var("vg_v")))]
        else:
            last.append(Assign(_hist(k, j), ir.Select(at_tup, Var("vg_last"), extension)))
        body.append(Block(acc + tuple(last)))
    body.append(Inc(Var("vg_next")))
    return (If(ir.gt(Var("u_nsave"), i(0)), (
        Let("vg_tup", FLOAT, ir.Select(Var("vg_moved"), Var("vg_t"), Var("vg_tn"))),
        While(go, tuple(body))), comment="(uniform: a software renderer skips it)"),)


def step_start(e, k) -> tuple:
    """F (and the noise's coefficients) again at the step's start, t_n and step n as the
    numpy reference has them: with noise, when F reads `step` (F at the last step's
    end, or after an event there, has step n - 1) or `dt` (F kept from the last step
    read that step's length); and sqrt(dt) with noise."""
    head = (Let("vg_sqdt", FLOAT, ir.call("sqrt", Var("u_dt"))),) if e.noise_draws else ()
    return head + restart(k)


def noise_add(e) -> tuple:
    """With noise: the increments of step vg_taken added to the drift step's end vg_n<i>."""
    return (*(Let(a.target, FLOAT, Raw(a.expr), comment=a.comment) for a in e.noise_draws),
            If(ir.eq(Var("vg_lstat"), i(0)),
               tuple(Assign(Var(a.target), Raw(a.expr), comment=a.comment)
                     for a in e.noise_update),
               comment="(a stopped lane keeps its state)"))
