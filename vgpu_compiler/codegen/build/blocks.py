"""A field's expression block in a kernel where one invocation runs a trajectory (GLSL,
WGSL), once: the coupled exchange of a basin (its values on the active lanes, the
shared arrays written, a barrier, the reductions: a tree over the basin's lanes or lane
0's serial fold, in order), then on the active lanes the block's temporaries and its
assignments (a collapse condition's into its flag ``hold``; a flux's calls); and the
step-end observers around one; the collapse vote of a basin. The expressions come printed (backends/shader/printing's
PrintedBlock): ``Raw`` values and ``Line`` statements.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import BOOL, FLOAT, INT, UINT, Assign, Block, Comment, If, Index, Let, Raw, Var, i
from .adaptive import _zero


@dataclass(frozen=True)
class Basin:
    """How the kernel's basins reduce."""
    reduction: str = "tree"     # "tree" (GPU) or "serial" (a software renderer)
    pow2: int = 1               # the basin's size rounded up to a power of two
    size: int = 1               # the basin's lanes
    box: str = ""               # the flat index of active lane vg_j in the basin, printed


def _value(text: str):
    """A printed operand: a name as is (an atom), else Raw (parenthesised as an operand)."""
    return Var(text) if text.isidentifier() else Raw(text)


def coupled(t, cb, basin: Basin) -> tuple:
    """The coupled exchange (a PrintedCoupled) of a basin."""
    lidx = ir.call("local_index")
    out: list = []
    if cb.fence:
        out.append(ir.Barrier(comment="every lane is done reading basin memory"))
    out += [Let(v.target, FLOAT, _zero(t), mutable=True) for v in cb.values]
    out.append(If(Var("vg_active"), tuple(Assign(Var(v.target), Raw(v.expr), comment=v.comment)
                                          for v in cb.values)))
    out += [Assign(Index(sh, lidx), Raw(c)) for sh, c in cb.shared]
    rs = cb.reductions
    tree = basin.reduction == "tree"
    if tree:
        out += [Assign(Index(r.scratch, lidx), ir.Select(Var("vg_active"), _value(r.source),
                                                         Var(r.neutral))) for r in rs]
    if cb.shared or rs:
        out.append(ir.Barrier())

    def mean(x, r):
        return ir.div(x, ir.call("to_float", Var("vg_nactive"))) if r.mean else x
    if rs and tree:
        iv, w = Var("i"), Var("w")
        out += [Comment("tree reduction over the basin's active lanes"),
                ir.Halve("w", basin.pow2 // 2, (
                    Let("i", UINT, lidx),
                    If(ir.and_(ir.lt(iv, w), ir.lt(ir.add(iv, w), ir.Lit(basin.size, UINT))),
                       tuple(ir.Line(r.step + ";") for r in rs)),
                    ir.Barrier())),
                *(Let(r.var, FLOAT, mean(Index(r.scratch, i(0)), r)) for r in rs)]
    elif rs:
        out += [Comment("serial reduction: lane 0 folds the active lanes in order, then one "
                        "barrier"),
                If(ir.eq(lidx, ir.Lit(0, UINT)), (
                    *(Let(r.acc, FLOAT, Var(r.neutral), mutable=True) for r in rs),
                    ir.Loop("vg_j", i(0), Var("vg_nactive"), (
                        Let("vg_at", INT, Raw(basin.box)),
                        *(ir.Line(r.fold + ";") for r in rs))),
                    *(Assign(Index("vg_res", i(r.slot)), Var(r.acc)) for r in rs))),
                ir.Barrier(),
                *(Let(r.var, FLOAT, mean(Index("vg_res", i(r.slot)), r)) for r in rs)]
    return tuple(out)


def statements(b, hold: str = "", flux: bool = False) -> tuple:
    """A PrintedBlock's temporaries and assignments (``hold``: each value into that flag;
    ``flux``: the deposit calls); the C kernel's (a lane's, in its lane loop) as they are."""
    if flux:
        body = tuple(ir.Do(ir.Call(a.target, (Raw(a.expr),)), comment=a.comment)
                     for a in b.body)
    else:
        body = tuple(Assign(Var(hold or a.target), Raw(a.expr), comment=a.comment)
                     for a in b.body)
    return (*(ir.Line(x) for x in b.temps), *body)


def block(t, b, basin: Basin, hold: str = "", flux: bool = False) -> tuple:
    """A PrintedBlock: its coupled exchange, then on the active lanes its temporaries and
    assignments (``statements``)."""
    head = (*coupled(t, b.coupled, basin), ir.Blank()) if b.coupled else ()
    return (*head, If(Var("vg_active"), statements(b, hold, flux)))


def observe(t, b, basin: Basin, time: str, step: str, when: str = "") -> tuple:
    """The step-end observers (peak, trough) of block ``b`` at ``time``, step ``step``, on
    the lanes where ``when`` holds too."""
    body = (*((Let("tt", FLOAT, Raw(time)),) if "tt" in b.words and time != "tt" else ()),
            *((Let("nstep", INT, Raw(step)),) if "nstep" in b.words and step != "nstep"
              else ()),
            *block(t, b, basin))
    note = "observers: peak, trough"
    return (If(Raw(when), body, comment=note),) if when else (Block(body, comment=note),)


def vote(words, tt, nstep, cond: tuple, into: str, then: tuple = (), comment: str = "") -> Block:
    """The collapse vote on the new state (at ``tt``, step ``nstep``, declared where the
    condition's ``words`` read them): each active lane's condition ``cond`` into vg_hold,
    then the basin goes on while one lane holds (vg_vote, shared): ``into`` is whether
    none does, after ``then`` (what follows the last barrier)."""
    lidx0 = ir.eq(ir.call("local_index"), ir.Lit(0, UINT))
    return Block((
        *((Let("tt", FLOAT, tt),) if "tt" in words else ()),
        *((Let("nstep", INT, nstep),) if "nstep" in words else ()),
        Let("vg_hold", BOOL, ir.Lit(True, BOOL), mutable=True),
        *cond,
        ir.Barrier(),
        If(lidx0, (Assign(Var("vg_vote"), i(0)),)),
        ir.Barrier(),
        If(ir.and_(Var("vg_active"), ir.not_(Var("vg_hold"))), (Assign(Var("vg_vote"), i(1)),)),
        ir.Barrier(load=True),
        *then,
        Assign(Var(into), ir.eq(ir.UniformLoad("vg_vote"), i(0)))), comment=comment)
