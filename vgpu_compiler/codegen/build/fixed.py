"""The fixed-step kernel's body, once (GLSL and WGSL print it; templates/field.*.j2 keep
the prologue): the state in registers, the field's init, the state at t0 kept (b_init),
the collapse status carried over from earlier dispatches, the step loop (from u_step0,
u_nsteps steps: each stage in a block, the update, the noise draws and their update, the
observers, the collapse vote, the save_every history), the flux after the last step and
the store. With a guard (a condition on uniforms under which reads proven in range run
unchecked) the loop comes twice, the unchecked copy first.

The field's blocks, laid out by blocks.py over the expressions the field printer wrote
(backends/shader/fixed.splices), come in as a ``Splice``: each stage's (``stage<i>``,
its unchecked twin ``fast<i>``), the observers' (``observe``), the collapse condition's
(``collapse``: into vg_hold) and the flux's (``flux``). The collapse vote synchronises the
workgroup: ``ir.Barrier`` and ``ir.UniformLoad`` (GLSL's barrier, then the shared word;
WGSL's workgroupUniformLoad, its own barrier).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import BOOL, FLOAT, INT, SLOT, UINT, Assign, Block, Comment, Elem, If, Let, Raw, Var, i
from . import blocks
from .adaptive import _zero, init_state

Assigns = tuple[tuple[str, str, str | None], ...]   # (target, printed value, note)


@dataclass(frozen=True)
class Stage:
    index: int
    comment: str                        # "c = 1/2"
    time: str | None                    # its tt, printed (None: the block reads no tt)
    combos: tuple[tuple[str, str], ...]     # y_x = s_x + dt * (...), printed
    fast: bool = False                  # an unchecked twin ``fast<i>`` (the guard's copy)


@dataclass(frozen=True)
class Field:
    states: tuple[str, ...]             # the state's registers
    stages: tuple[Stage, ...]
    stage_k: tuple[tuple[str, ...], ...]    # per stage, per state: its k
    update: Assigns                     # the new state, printed
    params: tuple[str, ...] = ()        # per-trajectory params' registers
    init: Assigns = ()                  # (register, value, note) set at the start
    init_names: tuple[str, ...] = ()    # the state at t0, kept (b_init): per state
    loop_words: frozenset = frozenset()     # what the stages read (tt, nstep)
    noise: str | None = None            # the step loop's scheme ("Euler-Maruyama" ...)
    noise_traj: str = ""                # the noise counter's trajectory, printed
    noise_vars: tuple[str, ...] = ()    # g, gx of each noise term (the stages set them)
    noise_draws: Assigns = ()           # vg_dwk = sqrt(dt) * normal, printed
    noise_update: Assigns = ()          # s += g dW (+ Milstein's term), printed
    observe: bool = False
    collapse: frozenset | None = None   # the collapse block's words; None: no collapse
    flux: frozenset | None = None       # the flux block's words; None: no flux
    history: bool = False               # the save_every states into b_hist
    guard: str = ""                     # the unchecked copy's condition, printed
    guard_note: str = ""


def _row(r: int):
    """Row r of a buffer of rows of u_count: ``r * u_count + lane``."""
    return ir.add(ir.mul(i(r), Var("u_count")), Var("lane"))


def _t_at(n) -> ir.Bin:
    """t0 + n dt (n an int)."""
    return ir.add(Var("u_t0"), ir.mul(ir.call("to_float", n), Var("u_dt")))


def registers(t, fd: Field) -> tuple:
    """The state and per-trajectory params in registers, loaded, then the init."""
    zero = _zero(t)
    return (
        Comment("--- state, in registers ---"),
        *(Let(s, FLOAT, zero, mutable=True, precise=True) for s in fd.states),
        *(Let(p, FLOAT, zero, mutable=True) for p in fd.params),
        If(Var("vg_active"), (
            *(Assign(Var(s), Elem("b_state", _row(r))) for r, s in enumerate(fd.states)),
            *(Assign(Var(p), Elem("b_params", _row(r))) for r, p in enumerate(fd.params)))),
        *init_state(fd.states, fd.init, fd.init_names))


def collapse_carry() -> tuple:
    """The collapse status of earlier dispatches: lane 0 reads it, the workgroup shares it
    (b_steps: row 0 the steps a trajectory took, row 1 its basin done)."""
    return (
        Comment("--- collapse status carried over from earlier dispatches ---"),
        If(ir.eq(ir.call("local_index"), ir.Lit(0, UINT)), (
            Assign(Var("vg_done"), i(0)),
            If(ir.ne(Var("u_step0"), i(0)),
               (Assign(Var("vg_done"), Elem("b_steps", ir.add(Var("u_count"), Var("lane")))),)))),
        ir.Barrier(load=True),
        Let("done", BOOL, ir.ne(ir.UniformLoad("vg_done"), i(0)), mutable=True),
        Let("taken", INT, Var("u_step0"), mutable=True),
        If(ir.and_(Var("done"), Var("vg_active")),
           (Assign(Var("taken"), Elem("b_steps", Var("lane"))),)))


def vote(fd: Field) -> Block:
    """The collapse vote on the new state (blocks.vote): t_(n+1), step n + 1."""
    n1 = ir.add(Var("n"), i(1))
    return blocks.vote(fd.collapse, _t_at(n1), n1, (ir.Splice("collapse"),), "done",
                       then=(Assign(Var("taken"), n1),),
                       comment="collapse vote on the new state, t = t_(n+1), step = n + 1")


def save_history(fd: Field) -> If:
    """A saved step of save_every (and the last): the state into slot vg_slot of b_hist."""
    n1, ns = ir.add(Var("n"), i(1)), len(fd.states)
    at = lambda j: ir.add(ir.mul(ir.add(ir.mul(Var("vg_slot"), i(ns)), i(j)),  # noqa: E731
                                 Var("u_count")), Var("lane"))
    return If(ir.or_(ir.eq(n1, Var("vg_save_at")), ir.eq(n1, Var("u_steps"))), (
        If(Var("vg_active"), tuple(Assign(Elem("b_hist", at(j)), Var(s))
                                   for j, s in enumerate(fd.states))),
        ir.Inc(Var("vg_slot")),
        Assign(Var("vg_save_at"), Var("u_every"), ir.Op.ADD)),
        comment="a saved step: into the history")


def update(fd: Field) -> tuple:
    """A lane's new state after the drift step (its stages' k)."""
    return tuple(Assign(Var(x), Raw(v)) for x, v, _ in fd.update)


def noise_step(fd: Field) -> tuple:
    """A lane's noise after the drift step: the draws dW, then the state's update."""
    return (*(Let(x, FLOAT, Raw(v), comment=note) for x, v, note in fd.noise_draws),
            *(Assign(Var(x), Raw(v), comment=note) for x, v, note in fd.noise_update))


def history_start() -> tuple:
    """The next saved step of save_every and its slot in b_hist (a wide int: the index
    reaches slots x states x trajectories)."""
    return (Let("vg_save_at", INT, ir.mul(ir.add(ir.div(Var("u_step0"), Var("u_every")), i(1)),
                                          Var("u_every")), mutable=True,
                comment="the next saved step"),
            Let("vg_slot", SLOT, i(0), mutable=True, comment="its slot in b_hist"))


def step_loop(t, fd: Field, fast: bool, lanes: bool = False) -> tuple:
    """The step loop (``fast``: the guard's copy, the stages' unchecked blocks). ``lanes``
    (C: a block of lanes, codegen/lanes.lane_loops): a step's lane loops, from the stages
    to the observers, are the splice ``lanes`` (``lanes_fast``: the guard's copy) and the
    collapse vote ``vote`` (the template lays out their binding of a lane's scalars)."""
    zero = _zero(t)
    n = Var("n")
    if lanes:
        return (Comment(f"--- the step loop: {len(fd.stages)}-stage explicit Runge-Kutta ---"),
                ir.Loop("n", Var("u_step0"), ir.add(Var("u_step0"), Var("u_nsteps")), (
                    *((If(Var("done"), (ir.Break(),)),) if fd.collapse is not None else ()),
                    *((Let("t_n", FLOAT, _t_at(n)),) if "tt" in fd.loop_words else ()),
                    *((Let("nstep", INT, n),) if "nstep" in fd.loop_words else ()),
                    ir.Splice("lanes_fast" if fast else "lanes"),
                    *((ir.Splice("vote"),) if fd.collapse is not None else ()),
                    *((save_history(fd),) if fd.history else ()))))
    head = (f"{fd.noise} (the drift step, then the noise)" if fd.noise
            else f"{len(fd.stages)}-stage explicit Runge-Kutta")
    stages = tuple(Block((
        *((Let("tt", FLOAT, Raw(st.time)),) if st.time else ()),
        *(Let(y, FLOAT, Raw(x), precise=True) for y, x in st.combos),
        ir.Splice(f"fast{st.index}" if fast and st.fast else f"stage{st.index}")),
        comment=f"stage {st.index}, {st.comment}") for st in fd.stages)
    body = (
        *((If(Var("done"), (ir.Break(),)),) if fd.collapse is not None else ()),
        *((Let("t_n", FLOAT, _t_at(n)),) if "tt" in fd.loop_words else ()),
        *((Let("nstep", INT, n),) if "nstep" in fd.loop_words else ()),
        *(Let(name, FLOAT, zero, mutable=True) for ks in fd.stage_k for name in ks),
        *(Let(name, FLOAT, zero, mutable=True) for name in fd.noise_vars),
        *stages,
        *update(fd),
        *noise_step(fd),
        *((ir.Splice("observe"),) if fd.observe else ()),
        *((vote(fd),) if fd.collapse is not None else ()),
        *((save_history(fd),) if fd.history else ()))
    return (Comment(f"--- the step loop: {head} ---"),
            ir.Loop("n", Var("u_step0"), ir.add(Var("u_step0"), Var("u_nsteps")), body))


def steps(t, fd: Field, lanes: bool = False) -> tuple:
    """The step loop; with a guard, its unchecked copy first (``lanes``: step_loop's)."""
    if fd.guard:
        return (If(Raw(fd.guard), step_loop(t, fd, True, lanes), step_loop(t, fd, False, lanes),
                   comment=f"then {fd.guard_note}: those reads are unchecked"),)
    return step_loop(t, fd, False, lanes)


def flux(fd: Field) -> tuple:
    """The flux: once, after the last step, on the final state (``Splice("flux")``)."""
    steps = Var("taken" if fd.collapse is not None else "u_steps")
    return (Comment("--- flux: once, after the last step, on the final state ---"),
            If(ir.ne(Var("u_final"), i(0)), (
                *((Let("nstep", INT, steps),) if fd.flux & {"nstep", "tt"} else ()),
                *((Let("tt", FLOAT, _t_at(Var("nstep"))),) if "tt" in fd.flux else ()),
                ir.Splice("flux"))))


def store(fd: Field) -> tuple:
    """The state back into b_state; with a collapse, the steps taken and the basin done."""
    done = ir.Select(Var("done"), i(1), i(0))
    return (Comment("--- store ---"), If(Var("vg_active"), (
        *(Assign(Elem("b_state", _row(r)), Var(s)) for r, s in enumerate(fd.states)),
        *((Assign(Elem("b_steps", Var("lane")), Var("taken")),
           Assign(Elem("b_steps", ir.add(Var("u_count"), Var("lane"))), done))
          if fd.collapse is not None else ()))))


def main(t, fd: Field) -> tuple:
    """The kernel's body after the trajectory's lane is known, sections apart (ir.Blank)."""
    out: list = []
    if fd.noise:
        out += [Let("vg_traj", UINT, Raw(fd.noise_traj),
                    comment="the noise counter's trajectory: flat index in the grid"),
                Let("vg_sqdt", FLOAT, ir.call("sqrt", Var("u_dt")))]
    out += [ir.Blank(), *registers(t, fd)]
    if fd.collapse is not None:
        out += [ir.Blank(), *collapse_carry()]
    out.append(ir.Blank())
    if fd.history:
        out += history_start()
    out += steps(t, fd)
    if fd.flux is not None:
        out += [ir.Blank(), *flux(fd)]
    out += [ir.Blank(), *store(fd)]
    return tuple(out)
