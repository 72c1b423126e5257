"""The adaptive kernel's step, once (GLSL and WGSL print it; templates/adaptive.*.j2 lay
out the rest): after a trajectory's stages, the new state, the error of the step
(Hairer's norm; dop853's with a second estimate), the controller (controller.py), and
the attempt accepted (save_at times inside the step on the continuous extension, the
pause, the events' or the plain update, the observers, the counters and the status) or
rejected, then the next step (controller.next_step). The numbers and the order of
operations are the numpy reference's (backends/numpy/adaptive.py).

What a template prints itself comes in as a ``Splice``: a field's blocks (observers,
the collapse vote), the events' pieces (``keep``: the start kept, the end located, the
save_at times before it; ``restart``; ``all_stopped``) and the Rosenbrock restart.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import controller as C
from .. import ir
from ..ir import BOOL, FLOAT, Assign, Block, Comment, Elem, If, Inc, Let, Raw, Var, f, i
from . import controller

Terms = tuple[tuple[str, float], ...]     # sum(w_j k_j): (k_j's name, w_j) in order


@dataclass(frozen=True)
class Field:
    """What the step's end reads of a field and its method."""
    states: tuple[str, ...]             # the state's registers
    k0: tuple[str, ...]                 # F at (vg_t, state): stage 0's k (FSAL)
    trial: tuple[str, ...]              # the stage state's registers (stage 0 reads them)
    stage_k: tuple[tuple[str, ...], ...]    # per stage, per state: its k
    update: tuple[str, ...]             # per state: the new state, printed (Raw)
    errors: tuple[Terms, ...] = ()      # per state: the error estimate's weights
    dense: tuple[tuple[Terms, ...], ...] = ()   # per state, per power of theta
    last: tuple[str, ...] = ()          # per state: the FSAL stage's k
    n_err: int = 0                      # the norm measures the first n_err states
    q: int = 1                          # the pair's lower order
    errors2: tuple[Terms, ...] = ()     # a second estimate (dop853's norm)
    saves: bool = True                  # writes save_at states (no events: here)
    events: bool = False
    firsts: bool = False                # observers `first`: the new state is var (WGSL)
    when: bool = False                  # (events) `when` blocks, not observers `first` only
    ros: bool = False                   # a Rosenbrock method (W singular; not FSAL)
    basin: bool = False
    collapse: bool = False
    observe: bool = False
    fixed: bool = False                 # a fixed-step method run for save_at
    params: tuple[str, ...] = ()        # per-trajectory params' registers
    init: tuple[tuple[str, str, str], ...] = ()   # (register, value, note) set at the start
    init_names: tuple[str, ...] = ()    # the state at t0, kept (b_init): per state
    noise: bool = False                 # (events) the step's noise increments added
    lean: int = 0                       # (fixed, events) plain steps before the event code
    reads_start: bool = False           # (fixed, events) F at a step's start reads vg_t


def weighted(terms: Terms):
    """``w_0 * k_0 + w_1 * k_1 + ...`` left to right, a weight 1 left out."""
    out = None
    for name, w in terms:
        x = Var(name) if w == 1 else ir.mul(f(w), Var(name))
        out = x if out is None else ir.add(out, x)
    return f(0.0) if out is None else out


def hist(state: int, n_states: int):
    """The element of b_hist of save_at time vg_next, state ``state``."""
    row = ir.add(ir.mul(Var("vg_next"), i(n_states)), i(state))
    return Elem("b_hist", ir.add(ir.mul(row, Var("u_count")), Var("lane")))


def _status(value: int) -> Assign:
    return Assign(Var("vg_status"), i(value))


def error_norm(fd: Field, n: int) -> tuple:
    """The new state vg_n<i> and the error of the step vg_err."""
    dt, e, e2, sc = Var("u_dt"), Var("e"), Var("e2"), Var("sc")

    def sq(x, s):
        return ir.mul(ir.div(x, s), ir.div(x, s))

    out: list = [Comment("the new state, and the error of the step (Hairer's norm)")]
    out += [Let(f"vg_n{j}", FLOAT, Raw(x), precise=True, mutable=fd.events and fd.firsts)
            for j, x in enumerate(fd.update)]
    out.append(Let("vg_e", FLOAT, f(0.0), mutable=True, precise=True))
    if fd.errors2:
        out.append(Let("vg_e2", FLOAT, f(0.0), mutable=True, precise=True))
    for j in range(fd.n_err):
        s, nj = Var(fd.states[j]), Var(f"vg_n{j}")
        body = [Let("e", FLOAT, ir.mul(dt, weighted(fd.errors[j])), precise=True),
                Let("sc", FLOAT, ir.add(Var("u_atol"), ir.mul(Var("u_rtol"), ir.call(
                    "max", ir.call("abs", s), ir.call("abs", nj)))), precise=True),
                Assign(Var("vg_e"), sq(e, sc), ir.Op.ADD)]
        if fd.errors2:
            body += [Let("e2", FLOAT, ir.mul(dt, weighted(fd.errors2[j])), precise=True),
                     Assign(Var("vg_e2"), sq(e2, sc), ir.Op.ADD)]
        out.append(Block(tuple(body)))
    ve, nn = Var("vg_e"), f(float(fd.n_err))
    if fd.errors2:
        norm = ir.Select(ir.eq(ve, f(0.0)), f(0.0), ir.div(ve, ir.call("sqrt", ir.mul(
            ir.add(ve, ir.mul(f(0.01), Var("vg_e2"))), nn))))
    else:
        norm = ir.call("sqrt", ir.div(ve, nn))
    err = Var("vg_err")
    out.append(Let("vg_err", FLOAT, norm, mutable=True))
    if fd.ros:
        out.append(If(Var("vg_sing"), (Assign(err, f(C.singular_error(fd.q)), comment=(
            "W singular: rejected, the step halved (rodas.f)")),)))
    if fd.events:
        out.append(If(ir.ne(Var("vg_lstat"), i(0)), (Assign(err, f(0.0), comment=(
            "a stopped lane's error does not count")),)))
    if fd.basin:
        out.append(Assign(err, ir.call("basin_fold", err, ir.Lit(True, BOOL))))
    return tuple(out)


def save_dense(fd: Field) -> tuple:
    """save_at times inside an accepted step (t_n, vg_tn]: the continuous extension."""
    return (If(ir.gt(Var("u_nsave"), i(0)), (
        Comment("save_at times inside the step: the continuous extension"),
        dense_saves(fd)), comment="(uniform: a software renderer skips it)"),)


def dense_saves(fd: Field, start=None, end=None) -> ir.While:
    """save_dense's loop over the save_at times inside the step: per state the extension
    from ``start`` (its expression; the state), at vg_tn itself ``end`` (vg_n<i>)."""
    start = start or tuple(Var(s) for s in fd.states)
    end = end or tuple(Var(f"vg_n{j}") for j in range(len(fd.states)))
    vs, tn, theta = Var("vg_s"), Var("vg_tn"), Var("theta")
    acc, pw = Var("acc"), Var("pw")
    body: list = [Let("vg_s", FLOAT, Elem("b_save", Var("vg_next"))),
                  Let("theta", FLOAT, ir.div(ir.sub(vs, Var("t_n")), Var("u_dt")))]
    for j, s in enumerate(fd.states):
        inner: list = [Let("acc", FLOAT, f(0.0), mutable=True, precise=True),
                       Let("pw", FLOAT, f(1.0), mutable=True, precise=True)]
        for terms in fd.dense[j]:
            inner += [Assign(pw, ir.mul(pw, theta)),
                      Assign(acc, ir.add(acc, ir.mul(pw, weighted(terms))))]
        inner.append(Assign(hist(j, len(fd.states)), ir.Select(
            ir.eq(vs, tn), end[j], ir.add(start[j], ir.mul(Var("u_dt"), acc)))))
        body.append(Block(tuple(inner)))
    body.append(Inc(Var("vg_next")))
    cond = ir.and_(ir.and_(Var("vg_active"), ir.lt(Var("vg_next"), Var("u_nsave"))),
                   ir.le(Elem("b_save", Var("vg_next")), tn))
    return ir.While(cond, tuple(body))


def ros_restart(fd: Field, sts: tuple, t_n=Var("vg_tn"),
                nstep=ir.add(Var("vg_taken"), i(1)), state=None) -> Block:
    """A Rosenbrock method is not FSAL: F at the new state, the next step's stage 0.
    ``t_n``, ``nstep``, ``state`` (its registers): the new state's time, step and values
    (by default before the attempt's update: vg_tn, vg_taken + 1, vg_n<i>)."""
    state = state or tuple(f"vg_n{j}" for j in range(len(fd.trial)))
    return Block((Let("t_n", FLOAT, t_n), Let("nstep", ir.INT, nstep),
                  *((Let("tt", FLOAT, Var("t_n")),) if sts[0].time else ()),
                  *(Let(y, FLOAT, Var(x), precise=True) for y, x in zip(fd.trial, state)),
                  ir.Splice("stage0")),
                 comment="rodas4 is not FSAL: F at the new state, the next step's stage 0")


def ros_reject(fd: Field) -> tuple:
    """A rejected Rosenbrock attempt: F at the step's start back (kept in vg_F0_<i>)."""
    return tuple(Assign(Var(k), Var(f"vg_F0_{j}")) for j, k in enumerate(fd.k0))


def step_end(t, fd: Field, sts: tuple, dtype: str, running: int) -> tuple:
    """From the stages' k to the next step (see the module docstring)."""
    names = controller.Names(flux="vg_flux_due")
    tn = Var("vg_tn")
    fsal = tuple(s for j, st in enumerate(fd.states) for s in (
        Assign(Var(st), Var(f"vg_n{j}")), Assign(Var(fd.k0[j]), Var(fd.last[j]))))
    moved = (Assign(Var("vg_t"), tn),)
    ok: list = [Let("vg_tn", FLOAT, ir.Select(Var("vg_cut"), Var("u_t1"),
                                              ir.add(Var("t_n"), Var("u_dt"))))]
    if fd.saves and not fd.events:
        ok += save_dense(fd)
    pause = (Assign(Var("vg_paused"), ir.Lit(True, BOOL)), ir.Break())
    if fd.saves and fd.events and not fd.when:      # a Simulation's (observers `first`):
        pause = (*save_dense(fd), *pause)   # the state at u_pause, not the events' saves
    ok.append(If(ir.gt(tn, Var("u_pause")), pause,
                 comment="the step covers u_pause: kept at the next advance"))
    if fd.ros:      # not FSAL: F at the new state
        kept = (ros_restart(fd, sts),
                *(Assign(Var(st), Var(f"vg_n{j}")) for j, st in enumerate(fd.states)), *moved)
    else:
        kept = fsal + moved
    if fd.events:
        ok += [ir.Splice("keep"),
               If(Var("vg_moved"), (If(ir.not_(Var("vg_atend")),
                                       (Assign(Var("vg_cut"), ir.Lit(False, BOOL)),)),
                                    ir.Splice("restart")), kept)]
    else:
        ok += kept
    if fd.observe:
        ok.append(ir.Splice("observe"))
    ok += [Inc(Var("vg_taken")), Assign(Var("vg_again"), i(0))]
    if fd.collapse:
        ok.append(ir.Splice("vote"))
    last = If(ir.Bin(ir.Op.GE, Var("vg_taken"), Var("u_max_steps")), (_status(C.MAX_STEPS),))
    if fd.collapse:
        last = If(Var("vg_collapsed"), (_status(C.REACHED_END),), (last,))
    ok.append(If(Var("vg_cut"), (_status(C.REACHED_END),), (last,)))
    if fd.events:
        ok.append(ir.Splice("all_stopped"))
    rejected: list = [Inc(Var("vg_rej")), Assign(Var("vg_again"), i(1))]
    if fd.ros:
        rejected += ros_reject(fd)
    return (*error_norm(fd, len(fd.states)),
            *controller.accept(t, names), *controller.factor(t, names, fd.q),
            If(Var("vg_ok"), tuple(ok), tuple(rejected)),
            *controller.next_step(t, names, running, dtype))


# --- the stages and the attempts --------------------------------------------------------
@dataclass(frozen=True)
class StageText:
    """A field's stage as its printer gave it: ``combos`` (register, value) the stage
    state, ``time`` tt's value where the block reads tt (else None); its block is the
    template's ``Splice("stage<index>")``."""
    index: int
    c: float
    combos: tuple[tuple[str, str], ...]
    time: str | None
    nstep: bool = False     # (stage 0) the block reads nstep


def _zero(t):
    return Var(t.stage_zero) if t.stage_zero else f(0.0)


def stages(t, fd: Field, sts: tuple, solve=None, frozen: bool = False) -> tuple:
    """Stages 1.. of an attempt: their k zeroed, then each in a block (``solve``: the
    Rosenbrock stage solve after each, a function of the stage's index; ``frozen``:
    the events' frozen k after each, ``Splice("frozen<index>")``; with ``solve`` also
    after stage 0's where the field has a `when` (a lane it stops in a basin that runs
    on: its K_0 zero, as the reference's, though its F is not: a Rosenbrock method
    takes F at the new state, not the last stage's zeroed k))."""
    zero = None if t.lane_block else _zero(t)   # (C: declared, each stage writes its own)
    out: list = [Let(name, FLOAT, zero, mutable=True)
                 for st in sts[1:] for name in fd.stage_k[st.index]]
    if solve is not None:
        out += [ir.Splice("ros_setup"), *solve(0)]
        if frozen and fd.when:
            out.append(ir.Splice("frozen0"))
    for st in sts[1:]:
        body = [*((Let("tt", FLOAT, Raw(st.time)),) if st.time else ()),
                *(Let(y, FLOAT, Raw(x), precise=True) for y, x in st.combos),
                ir.Splice(f"stage{st.index}")]
        if solve is not None:
            body += solve(st.index)
        if frozen:
            body.append(ir.Splice(f"frozen{st.index}"))
        out.append(Block(tuple(body), comment=f"stage {st.index}, c = {st.c}"))
    return tuple(out)


def adaptive_attempt(t, fd: Field, sts: tuple, dtype: str, running: int,
                     solve=None) -> tuple:
    """One attempt of an adaptive method: the step (at most dtmax, cut to end at t1),
    its stages, then step_end."""
    use = Var("vg_use")
    body = (Let("u_dt", FLOAT, use, comment="this trajectory's step (hides the uniform)"),
            Let("t_n", FLOAT, Var("vg_t")), Let("nstep", ir.INT, Var("vg_taken")),
            *stages(t, fd, sts, solve, frozen=fd.events),
            *step_end(t, fd, sts, dtype, running))
    return (Let("vg_use", FLOAT, ir.call("min", Var("vg_h"), Var("u_dtmax")), mutable=True),
            Let("vg_cut", BOOL, ir.Bin(ir.Op.GE, ir.add(Var("vg_t"), use),
                                       ir.sub(Var("u_t1"), Var("u_gap"))), mutable=fd.events),
            If(Var("vg_cut"), (Assign(use, ir.sub(Var("u_t1"), Var("vg_t"))),)),
            Block(body))


def hermite(fd: Field, j: int):
    """The cubic Hermite interpolant through the step's ends (state j), at theta."""
    theta, th2, dt = Var("theta"), Var("th2"), Var("u_dt")
    one, two, three = f(1.0), f(2.0), f(3.0)
    cube = ir.mul(th2, theta)
    h00 = ir.add(ir.sub(one, ir.mul(three, th2)), ir.mul(ir.mul(two, th2), theta))
    h01 = ir.sub(ir.mul(three, th2), ir.mul(ir.mul(two, th2), theta))
    h10 = ir.add(ir.sub(theta, ir.mul(two, th2)), cube)
    h11 = ir.sub(cube, th2)
    return ir.add(ir.add(ir.mul(h00, Var(fd.states[j])), ir.mul(h01, Var(f"vg_n{j}"))),
                  ir.mul(dt, ir.add(ir.mul(h10, Var(f"vg_f{j}")),
                                    ir.mul(h11, Var(fd.k0[j])))))


def _at_or_past(x, tn):
    """``x`` is at or before ``tn`` in the direction of the step (u_dt's sign)."""
    return ir.Select(ir.lt(Var("u_dt"), f(0.0)), ir.Bin(ir.Op.GE, x, tn), ir.le(x, tn))


def hermite_saves(fd: Field) -> ir.While:
    """The save_at times inside a fixed step (t_n, vg_tn], in the step's direction: the
    cubic Hermite interpolant through its ends (vg_f<i>: F at its start)."""
    n, tn, dt, theta = len(fd.states), Var("vg_tn"), Var("u_dt"), Var("theta")
    return ir.While(
        ir.and_(ir.and_(Var("vg_active"), ir.lt(Var("vg_next"), Var("u_nsave"))),
                _at_or_past(Elem("b_save", Var("vg_next")), tn)),
        (Let("theta", FLOAT, ir.div(ir.sub(Elem("b_save", Var("vg_next")), Var("t_n")), dt),
             precise=True),
         Let("th2", FLOAT, ir.mul(theta, theta), precise=True),
         *(Block((Let("v", FLOAT, hermite(fd, j), precise=True),
                  Assign(hist(j, n), ir.Select(
                      ir.eq(theta, f(0.0)), Var(s), ir.Select(ir.eq(theta, f(1.0)),
                                                            Var(f"vg_n{j}"), Var("v"))))))
           for j, s in enumerate(fd.states)),
         Inc(Var("vg_next"))))


def start_saves(fd: Field) -> tuple:
    """The save_at times at t0 (a fixed step's: at or past it in the step's direction):
    the start state."""
    at = Elem("b_save", Var("vg_next"))
    reached = _at_or_past(at, Var("vg_t")) if fd.fixed else ir.le(at, Var("vg_t"))
    return (If(ir.gt(Var("u_nsave"), i(0)), (ir.While(
        ir.and_(ir.and_(Var("vg_active"), ir.lt(Var("vg_next"), Var("u_nsave"))), reached),
        (*(Assign(hist(j, len(fd.states)), Var(s)) for j, s in enumerate(fd.states)),
         Inc(Var("vg_next")))),), comment="(uniform: a software renderer skips it)"),)


def fixed_attempt(t, fd: Field, sts: tuple, stage0: StageText) -> tuple:
    """Step vg_taken of a fixed-step method run for save_at (no events): t_n = t0 + n dt,
    every step kept, save_at times inside it on the cubic Hermite interpolant."""
    n = len(fd.states)
    taken, tn, dt = Var("vg_taken"), Var("vg_tn"), Var("u_dt")
    at = ir.add(Var("u_t0"), ir.mul(ir.call("to_float", taken), dt))
    save = hermite_saves(fd)
    end = ir.Bin(ir.Op.GE, taken, Var("u_steps"))
    if fd.collapse:
        end = ir.or_(end, Var("vg_collapsed"))
    body = (
        Let("t_n", FLOAT, at), Let("nstep", ir.INT, taken),
        *stages(t, fd, sts),
        *(Let(f"vg_n{j}", FLOAT, Raw(x), precise=True) for j, x in enumerate(fd.update)),
        *(Let(f"vg_f{j}", FLOAT, Var(k)) for j, k in enumerate(fd.k0)),
        Let("vg_tn", FLOAT, ir.add(Var("u_t0"), ir.mul(ir.call("to_float", ir.add(taken, i(1))),
                                                       dt))),
        Block((Let("t_n", FLOAT, tn), Let("nstep", ir.INT, ir.add(taken, i(1))),
               *((Let("tt", FLOAT, Var("t_n")),) if stage0.time else ()),
               *(Let(y, FLOAT, Var(f"vg_n{j}"), precise=True)
                 for j, y in enumerate(fd.trial)),
               ir.Splice("stage0")),
              comment="F at the new state: the next step's stage 0, the interpolant's end slope"),
        If(ir.gt(Var("u_nsave"), i(0)),
           (Comment("save_at times inside the step: the cubic Hermite interpolant"), save),
           comment="(uniform: a software renderer skips it)"),
        *(Assign(Var(s), Var(f"vg_n{j}")) for j, s in enumerate(fd.states)),
        Assign(Var("vg_t"), tn),
        *((ir.Splice("observe"),) if fd.observe else ()),
        Inc(taken),
        *((ir.Splice("vote"),) if fd.collapse else ()),
        If(end, (_status(C.REACHED_END), Assign(Var("vg_flux_due"), ir.Lit(True, BOOL)))))
    return (Block(body, comment="step vg_taken of a fixed-step method: t_n = t0 + n dt, "
                                "every step kept"),)


# --- the kernel around the attempts -----------------------------------------------------
def stage0(sts: tuple, where: str) -> Block:
    """Stage 0 at (t_n, the state): F there (FSAL), ``Splice("stage0")``."""
    st = sts[0]
    return Block((*((Let("tt", FLOAT, Raw(st.time)),) if st.time else ()),
                  *(Let(y, FLOAT, Raw(x), precise=True) for y, x in st.combos),
                  ir.Splice("stage0")), comment=f"stage 0 at the {where}")


def registers(t, fd: Field, running: int) -> tuple:
    """A trajectory's registers and counters, before the carry between dispatches loads
    them (``Splice("ev_decl")``: the events' own)."""
    zero = _zero(t)
    return (
        Comment("--- state, in registers ---"),
        *(Let(s, FLOAT, zero, mutable=True, precise=True) for s in fd.states),
        *(Let(p, FLOAT, zero, mutable=True) for p in fd.params),
        *(Let(k, FLOAT, zero, mutable=True, comment="FSAL: F at (vg_t, state)") for k in fd.k0),
        Let("vg_t", FLOAT, Var("u_t0"), mutable=True),
        Let("vg_h", FLOAT, f(0.0), mutable=True),
        *(Let(name, ir.INT, i(v), mutable=True) for name, v in (
            ("vg_taken", 0), ("vg_rej", 0), ("vg_status", running), ("vg_again", 0),
            ("vg_next", 0))),
        Let("vg_paused", BOOL, ir.Lit(False, BOOL), mutable=True,
            comment="a Simulation's advance reached u_pause (adaptive_session.py)"),
        *((ir.Splice("ev_decl"),) if fd.events else ()))


def _end() -> tuple:
    return (_status(C.REACHED_END), Assign(Var("vg_flux_due"), ir.Lit(True, BOOL)))


def init_state(states: tuple, init: tuple, init_names: tuple) -> tuple:
    """The field's init on the first dispatch (``init``: (register, value, note)), and the
    state at t0 kept in b_init (``init_names``: its registers, per state): written on the
    first dispatch, read back on the later ones."""
    step0, active = Var("u_step0"), Var("vg_active")
    out: list = []
    if init:
        out.append(If(ir.and_(ir.eq(step0, i(0)), active),
                      tuple(Assign(Var(x), Raw(v), comment=note) for x, v, note in init)))
    if init_names:
        row = [ir.add(ir.mul(i(j), Var("u_count")), Var("lane")) for j in range(len(states))]
        out += [Let(x, FLOAT, Var(s), mutable=True) for x, s in zip(init_names, states)]
        out.append(If(active, tuple(
            If(ir.eq(step0, i(0)), (Assign(Elem("b_init", row[j]), Var(s)),),
               (Assign(Var(x), Elem("b_init", row[j])),))
            for j, (x, s) in enumerate(zip(init_names, states)))))
    return tuple(out)


def events_at_t0() -> tuple:
    """The events' conditions at t0 (``Splice("q0")``: q_* the state, ``conds0``: into
    vg_c0), the previous ones of the first step."""
    return (Let("tt", FLOAT, Var("u_t0")), Let("nstep", ir.INT, i(0)), ir.Splice("q0"),
            Let("vg_c0", ir.INT, i(0), mutable=True), ir.Splice("conds0"),
            Assign(Var("vg_prev"), Var("vg_c0")), Assign(Var("vg_window"), Var("u_t0")))


def start(t, fd: Field, sts: tuple, first: tuple, running: int) -> tuple:
    """After the load: the field's init, the state at t0 kept (b_init), and on the first
    dispatch F at t0, the save_at times at t0, the events' conditions there and the
    first step (``first``: codegen/build/first_step.py's, ``Splice("trial")`` in it)."""
    step0, active = Var("u_step0"), Var("vg_active")
    out: list = list(init_state(fd.states, fd.init, fd.init_names))
    out.append(Let("vg_flux_due", BOOL, ir.Lit(False, BOOL), mutable=True))
    body: list = [
        Comment("--- the start: F there (FSAL), save_at times at t0, the first step ---"),
        Block((*(() if fd.fixed else (Let("u_dt", FLOAT, f(0.0),
                                          comment="(the step is not chosen yet)"),)),
               Let("t_n", FLOAT, Var("u_t0")), Let("nstep", ir.INT, i(0)),
               stage0(sts, "start")))]
    if fd.saves:
        body += start_saves(fd)
    if fd.events:
        body.append(Block(events_at_t0(), comment="events: every condition at t0 (one that "
                                                  "holds there fires only after being false)"))
    if fd.fixed:
        body += [Assign(Var("vg_h"), Var("u_dt")),
                 If(ir.eq(Var("u_steps"), i(0)), _end())]
    else:
        body += [*first, If(ir.eq(Var("u_t1"), Var("u_t0")), _end())]
    out.append(If(ir.eq(step0, i(0)), tuple(body)))
    if fd.fixed and fd.events and fd.firsts:
        taken, steps = Var("vg_taken"), Var("u_steps")
        live = ir.lt(taken, steps)
        if fd.collapse:         # (a collapsed basin's step size is 0: _collapsed)
            live = ir.and_(live, ir.ne(Var("vg_h"), f(0.0)))
        out += [
            If(ir.Bin(ir.Op.GE, step0, i(2)), (
                Assign(Var("vg_status"), ir.Select(live, i(running), i(C.REACHED_END))),
                Assign(Var("vg_flux_due"), ir.not_(live))),
               comment="a Simulation's advance (shader/located.py): every trajectory on to "
                       "u_steps"),
            If(ir.eq(step0, i(3)), (Block((
                Let("t_n", FLOAT, ir.add(Var("u_t0"), ir.mul(ir.call("to_float", taken),
                                                             Var("u_dt")))),
                Let("nstep", ir.INT, taken), stage0(sts, "state"))),),
               comment="its state or values changed: F at the state, the next step's stage 0")]
    return tuple(out)


def attempts(t, fd: Field, sts: tuple, dtype: str, running: int, solve=None) -> tuple:
    """The step attempts of this dispatch: at most u_attempts, while the trajectory runs
    (an adaptive one: and before u_pause). A fixed-step method with events takes its
    plain steps first (fixed_lean), then fixed_events."""
    stop = If(ir.ne(Var("vg_status"), i(running)), (ir.Break(),))
    if fd.fixed and fd.events:
        body = (stop, *fixed_lean(t, fd, sts, running), *fixed_events(t, fd, sts, running,
                                                                       fd.noise))
    elif fd.fixed:
        body = (stop, *fixed_attempt(t, fd, sts, sts[0]))
    else:
        body = (stop, If(ir.Bin(ir.Op.GE, Var("vg_t"), Var("u_pause")),
                         (Assign(Var("vg_paused"), ir.Lit(True, BOOL)), ir.Break())),
                *adaptive_attempt(t, fd, sts, dtype, running, solve))
    return (Comment("--- the step attempts of this dispatch ---"),
            ir.Loop("vg_a", i(0), Var("u_attempts"), body))


def flux(fd: Field) -> tuple:
    """The flux: once, when the trajectory ends, on its final state (``Splice("flux")``)."""
    t = Var("vg_t")
    if fd.events:
        t = ir.Select(ir.ne(Var("vg_lstat"), i(0)), Var("vg_tstop"), t)
    return (Comment("--- flux: once, when the trajectory ends, on its final state ---"),
            If(Var("vg_flux_due"), (Let("nstep", ir.INT, Var("vg_taken")),
                                    Let("tt", FLOAT, t), ir.Splice("flux"))))


def fixed_step(t, fd: Field, sts: tuple, noise: bool = False) -> tuple:
    """A fixed-step method's step with events, from (t_n, state) over u_dt: the stages
    (each with the events' frozen k), the end state vg_n<i> (``noise``: the increments
    added, ``Splice("noise_add")``), stage 0's k kept in vg_f<i>, and F at the step's end
    vg_tn = vg_tend (the next step's stage 0). ``Splice("step_start")``: F at the step's
    start where the events read it."""
    st0 = sts[0]
    return (
        ir.Splice("step_start"),
        *stages(t, fd, sts, frozen=True),
        *(Let(f"vg_n{j}", FLOAT, Raw(x), precise=True, mutable=noise or fd.firsts)
          for j, x in enumerate(fd.update)),
        ir.Splice("noise_add"),
        *(Let(f"vg_f{j}", FLOAT, Var(k)) for j, k in enumerate(fd.k0)),
        Let("vg_tn", FLOAT, Var("vg_tend")),
        Block((Let("t_n", FLOAT, Var("vg_tn")),
               *((Let("tt", FLOAT, Var("t_n")),) if st0.time else ()),
               *(Let(y, FLOAT, Var(f"vg_n{j}"), precise=True) for j, y in enumerate(fd.trial)),
               ir.Splice("stage0"), ir.Splice("frozen0")),
              comment="F at the step's end: the interpolant's end slope, the next step's "
                      "stage 0"))


def fixed_events(t, fd: Field, sts: tuple, running: int, noise: bool = False) -> tuple:
    """Step vg_taken of a fixed-step method with events, or the rest of it after one: the
    step (fixed_step), the events' pieces (``Splice("keep")``: the start kept, the end
    located, the save_at times before it; ``restart``; ``save_step``; ``all_stopped``),
    the update where no event moved the trajectory, the counters and the status. A rest
    counts up in vg_again (the event log's key)."""
    taken, again = Var("vg_taken"), Var("vg_again")
    resting = ir.ne(again, i(0))
    at = ir.add(Var("u_t0"), ir.mul(ir.call("to_float", taken), Var("u_dt")))
    end = ir.Bin(ir.Op.GE, taken, Var("u_steps"))
    if fd.collapse:
        end = ir.or_(end, Var("vg_collapsed"))
    step = (
        Let("u_dt", FLOAT, Var("vg_use"), comment="the step, or the rest of it (hides the "
                                                  "uniform)"),
        Let("t_n", FLOAT, Var("vg_ts")), Let("nstep", ir.INT, taken),
        *fixed_step(t, fd, sts, noise),
        ir.Splice("keep"),
        Let("vg_stepped", BOOL, ir.Lit(True, BOOL), mutable=True),
        If(Var("vg_moved"),
           (ir.Splice("restart"), Assign(Var("vg_stepped"), Var("vg_atend")),
            Assign(again, ir.Select(Var("vg_atend"), i(0), ir.add(again, i(1))),
                   comment="(the rests of a step: the event log's key)")),
           (*(Assign(Var(s), Var(f"vg_n{j}")) for j, s in enumerate(fd.states)),
            Assign(Var("vg_t"), Var("vg_tn")))),
        *((ir.Splice("observe"),) if fd.observe else ()),
        If(Var("vg_stepped"), (Inc(taken), Assign(again, i(0)), ir.Splice("save_step"),
                               *((ir.Splice("vote"),) if fd.collapse else ()),
                               If(end, (_status(C.REACHED_END),)),
                               *(_collapsed() if fd.collapse else ()))),
        ir.Splice("all_stopped"),
        If(ir.ne(Var("vg_status"), i(running)),
           (Assign(Var("vg_flux_due"), ir.Lit(True, BOOL)),)))
    return (Block((
        Let("vg_tend", FLOAT, ir.add(Var("u_t0"), ir.mul(
            ir.call("to_float", ir.add(taken, i(1))), Var("u_dt")))),
        Let("vg_ts", FLOAT, ir.Select(resting, Var("vg_t"), at)),
        Let("vg_use", FLOAT, ir.Select(resting, ir.sub(Var("vg_tend"), Var("vg_t")),
                                       Var("u_dt"))),
        If(ir.eq(again, i(0)), (Assign(Var("vg_instep"), i(0)),)),
        Block(step)), comment="step vg_taken of a fixed-step method with events, or the rest "
                              "of it after one"),)


def _collapsed() -> tuple:
    """A fixed step whose basin collapsed: its step size (otherwise u_dt, read nowhere) 0,
    so that a Simulation's advance keeps it ended (start: u_step0 >= 2)."""
    return (If(Var("vg_collapsed"), (Assign(Var("vg_h"), f(0.0)),),
               comment="its basin collapsed: no step left"),)


def lean_step(t, fd: Field, sts: tuple, rest: bool) -> tuple:
    """One plain step of fixed_lean (``rest``: the rest of a step after an event): the
    step (fixed_step), the conditions at its end (``Splice("lean_q")``: q_* from vg_n<i>,
    ``lean_conds``: into vg_cend, ``lean_firsts``: the observers `first`, into vg_fh);
    a step with an event (or a save_at time in it) is left to fixed_events, from the
    state before; else the update, the observers (``lean_observe``), the counters."""
    taken, tn, dt = Var("vg_taken"), Var("vg_tn"), Var("u_dt")
    if rest:
        start = (Let("u_dt", FLOAT, ir.sub(Var("vg_tend"), Var("vg_t")),
                     comment="the rest of the step (hides the uniform)"),
                 Let("t_n", FLOAT, Var("vg_t")))
    else:
        start = (Let("t_n", FLOAT, ir.add(Var("u_t0"), ir.mul(ir.call("to_float", taken), dt))),)
    event = ir.ne(Raw("vg_cend & ~vg_prev"), i(0))
    if fd.firsts:
        event = ir.or_(event, ir.ne(Var("vg_fh"), i(0)))
    event = ir.or_(event, ir.and_(Var("vg_sv"), _at_or_past(Var("vg_tsave"), tn)))
    return (
        Let("vg_tend", FLOAT, ir.add(Var("u_t0"), ir.mul(
            ir.call("to_float", ir.add(taken, i(1))), dt))),
        *start, Let("nstep", ir.INT, taken),
        *fixed_step(t, fd, sts, fd.noise),
        Let("vg_cend", ir.INT, i(0), mutable=True),
        *((Let("vg_fh", ir.INT, i(0), mutable=True),) if fd.firsts else ()),
        Block((Let("tt", FLOAT, tn), ir.Splice("lean_q"), ir.Splice("lean_conds"),
               *((ir.Splice("lean_firsts"),) if fd.firsts else ()))),
        If(event, (*(Assign(Var(k), Var(f"vg_f{j}")) for j, k in enumerate(fd.k0)),
                   ir.Break()),
           comment="an event in this step: fixed_events takes it (a save_at time in it too)"),
        Assign(Var("vg_prev"), Var("vg_cend")),
        *(Assign(Var(s), Var(f"vg_n{j}")) for j, s in enumerate(fd.states)),
        *((ir.Splice("lean_observe"),) if fd.observe else ()),
        *((Assign(Var("vg_t"), tn, comment="(F at a step's start reads it: step_start)"),)
          if rest or fd.reads_start else ()),
        *((Assign(Var("vg_again"), i(0)),) if rest else ()),
        Inc(taken))


def fixed_lean(t, fd: Field, sts: tuple, running: int) -> tuple:
    """Plain steps (or the rest of one after an event) while no condition goes false ->
    true (a fixed-step method with events, no basin): a software renderer runs an `if`
    body on every lane, masked, so the event code (location, firing, the restart) runs
    only after these, at most every ``fd.lean`` (shader/events.py's LEAN_STEPS) steps.
    The same numbers as fixed_events' steps without an event: a step that triggers one
    is left to it, from the state before. The loop stops at the next saved step
    (save_every), saved after it (``Splice("save_step")``)."""
    if not fd.lean:
        return ()
    taken, q, m, a = Var("vg_taken"), Var("vg_q"), Var("vg_m"), Var("vg_a")
    every, steps = Var("u_every"), Var("u_steps")
    ge = lambda x, y: ir.Bin(ir.Op.GE, x, y)    # noqa: E731

    def trips(cond, rest: bool, comment=None):
        return ir.While(cond, (*lean_step(t, fd, sts, rest), Inc(q)), comment=comment)

    return (If(ir.eq(Var("vg_lstat"), i(0)), (
        Let("vg_m", ir.INT, ir.call("min", ir.call("min", ir.sub(Var("u_attempts"), a),
                                                    i(fd.lean)), ir.sub(steps, taken)),
            mutable=True),
        Let("vg_sv", BOOL, ir.and_(ir.gt(Var("u_nsave"), i(0)), ir.lt(Var("vg_next"),
                                                                      Var("u_nsave"))),
            comment="the next save_at time, if any"),
        Let("vg_tsave", FLOAT, f(0.0), mutable=True),
        If(Var("vg_sv"), (Assign(Var("vg_tsave"), Elem("b_save", Var("vg_next"))),)),
        If(ir.gt(every, i(0)), (Assign(m, ir.call("min", m, ir.sub(ir.mul(
            ir.add(ir.div(taken, every), i(1)), every), taken))),)),
        Let("vg_q", ir.INT, i(0), mutable=True),
        trips(ir.lt(q, ir.call("min", m, ir.Select(ir.ne(Var("vg_again"), i(0)), i(1), i(0)))),
              True, "the rest of a step after an event"),
        If(ir.eq(Var("vg_again"), i(0)), (
            Let("vg_q0", ir.INT, q),
            trips(ir.lt(q, m), False),
            If(ir.gt(q, Var("vg_q0")), (
                Assign(Var("vg_instep"), i(0)),
                Assign(Var("vg_t"), ir.add(Var("u_t0"), ir.mul(ir.call("to_float", taken),
                                                               Var("u_dt"))))),
               comment="plain steps taken: a new step, at t0 + n dt"))),
        If(ir.gt(q, i(0)), (
            Assign(a, q, ir.Op.ADD), ir.Splice("save_step"),
            If(ge(taken, steps), (_status(C.REACHED_END),
                                  Assign(Var("vg_flux_due"), ir.Lit(True, BOOL)), ir.Break())),
            If(ge(a, Var("u_attempts")), (ir.Break(),)))))),)
