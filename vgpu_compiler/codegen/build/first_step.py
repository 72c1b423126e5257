"""The first step of an adaptive trajectory, once: ``u_dt0`` if given, else Hairer's
starting step (HNW I, II.4; scipy's select_initial_step; ir/controller.py's
initial_step, whose order of operations this keeps): the norms d0, d1 of the state and
of F there (k0), a trial step h0, F at the trial point (the field's stage 1, a
``Stage`` the template prints), then h1 from d2 = |F(trial) - F| / h0; a
basin takes the smallest over its active lanes (``basin_fold``)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from .. import mathlib as M
from ..ir import BOOL, FLOAT, INT, Assign, Block, Comment, If, Let, Var, f, i

SMALL, H_SMALL, CENT, TINY, H_FRAC, HUNDRED = 1e-5, 1e-6, 0.01, 1e-15, 1e-3, 100.0


@dataclass(frozen=True)
class Field:
    """The names of a field's registers the first step reads."""
    states: tuple[str, ...]     # the state at (vg_t)
    k0: tuple[str, ...]         # F there
    trial: tuple[str, ...]      # the trial point (the names stage 1 reads)
    k1: tuple[str, ...]         # F at the trial point (stage 1 writes them)
    n_err: int                  # the norms measure the first n_err states
    basin: bool = False         # a basin shares one step: the smallest of its lanes'


def first_step(t, fd: Field, q: int) -> tuple:
    h, h0, span = Var("vg_h"), Var("vg_h0"), Var("vg_span")
    d0, d1, d2 = Var("vg_d0"), Var("vg_d1"), Var("vg_d2")
    n = f(float(fd.n_err))
    err = range(fd.n_err)
    sc = [Var(f"vg_sc{j}") for j in err]
    zero = Var(t.stage_zero) if t.stage_zero else f(0.0)

    def sq(x):
        return ir.mul(x, x)

    def fold(v):
        return (Assign(v, ir.call("basin_fold", v, ir.Lit(False, BOOL))),) if fd.basin else ()

    trial = Block((
        ir.Stage((
            Let("u_dt", FLOAT, h0), Let("tt", FLOAT, ir.add(Var("vg_t"), h0)),
            Let("nstep", INT, i(0)),
            *(Let(y, FLOAT, ir.add(Var(s), ir.mul(h0, Var(k))), precise=True)
              for s, y, k in zip(fd.states, fd.trial, fd.k0)),
            *(Let(k, FLOAT, zero, mutable=True) for k in fd.k1)), "trial"),
        *(s for j in err for s in (
            Let(f"vg_q{j}", FLOAT, ir.div(ir.sub(Var(fd.k1[j]), Var(fd.k0[j])), sc[j])),
            Assign(d2, sq(Var(f"vg_q{j}")), ir.Op.ADD)))))
    h1 = ir.Select(ir.le(Var("vg_big"), f(TINY)),
                   ir.call("max", f(H_SMALL), ir.mul(h0, f(H_FRAC))),
                   M.root(t, ir.div(f(CENT), Var("vg_big")), q + 1))
    hairer = (
        Comment("Hairer's starting step (HNW I, II.4; scipy's select_initial_step)"),
        Let("vg_span", FLOAT, ir.sub(Var("u_t1"), Var("vg_t"))),
        Let("vg_d0", FLOAT, f(0.0), mutable=True), Let("vg_d1", FLOAT, f(0.0), mutable=True),
        *(Let(f"vg_sc{j}", FLOAT, ir.add(Var("u_atol"), ir.mul(ir.call("abs", Var(fd.states[j])),
                                                               Var("u_rtol")))) for j in err),
        *(Assign(d0, sq(ir.div(Var(fd.states[j]), sc[j])), ir.Op.ADD) for j in err),
        *(Assign(d1, sq(ir.div(Var(fd.k0[j]), sc[j])), ir.Op.ADD) for j in err),
        Assign(d0, ir.call("sqrt", ir.div(d0, n))),
        Assign(d1, ir.call("sqrt", ir.div(d1, n))),
        Let("vg_h0", FLOAT, ir.Select(ir.or_(ir.lt(d0, f(SMALL)), ir.lt(d1, f(SMALL))),
                                      f(H_SMALL), ir.div(ir.mul(f(CENT), d0), d1)), mutable=True),
        Assign(h0, ir.call("min", h0, span)),
        Let("vg_d2", FLOAT, f(0.0), mutable=True),
        *fold(h0),
        trial,
        Assign(d2, ir.div(ir.call("sqrt", ir.div(d2, n)), h0)),
        Let("vg_big", FLOAT, ir.call("max", d1, d2)),
        Let("vg_h1", FLOAT, h1),
        Assign(h, ir.call("min", ir.call("min", ir.mul(f(HUNDRED), h0), Var("vg_h1")), span)),
        *fold(h),
        Assign(h, ir.call("min", h, Var("u_dtmax"))),
        If(ir.or_(ir.not_(ir.gt(h, f(0.0))), M.nonfinite(t, h)),
           (Assign(h, ir.call("min", span, Var("u_dtmax"))),)))
    return (If(ir.gt(Var("u_dt0"), f(0.0)),
               (Assign(h, ir.call("min", Var("u_dt0"), Var("u_dtmax"))),), hairer),)
