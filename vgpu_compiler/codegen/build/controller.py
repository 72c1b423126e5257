"""The step-size controller of the adaptive kernels, once (ir/controller.py's rules, in
the numpy reference's order of operations), in three pieces that a kernel places where
its layout needs them:

- ``accept``: the step's error is finite (``fin``) and at most 1 (``ok``);
- ``factor``: the factor of the next step, ``min(FACTOR_MAX, max(FACTOR_MIN, SAFETY *
  err^(-1/(q+1))))`` (FACTOR_MAX below 1e-8, FACTOR_MIN above 1e8 and for a
  non-finite err, where the formula would give the same), at most 1 after a
  rejection, and the proposal ``prop = min(dt * fac, dtmax)``;
- ``next_step``: a running trajectory whose proposal underflows (or whose err is not
  finite) ends with status STEP_UNDERFLOW; one still running takes the proposal.

``separate``: each piece runs on its own (the C kernel's lane loops) and tests ``fin``
again itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import controller as C
from .. import ir
from .. import mathlib as M
from ..ir import BOOL, FLOAT, Assign, If, Let, Var, f, i

LO, HI = 1e-8, 1e8      # err outside: the factor is FACTOR_MAX / FACTOR_MIN without the root


@dataclass(frozen=True)
class Names:
    """The kernel's variables the controller reads and writes."""
    err: str = "vg_err"
    fin: str = "vg_fin"
    ok: str = "vg_ok"
    fac: str = "vg_fac"
    prop: str = "vg_prop"
    dt: str = "u_dt"            # the step just attempted
    dtmax: str = "u_dtmax"
    again: str = "vg_again"     # nonzero: the attempt before this one was rejected
    t: str = "vg_t"
    h: str = "vg_h"             # the next attempt's step
    status: str = "vg_status"
    flux: str | None = None     # set true where a trajectory stops (its flux is due)


def _fin(t, n: Names) -> ir.Stmt:
    return Let(n.fin, BOOL, M.finite(t, Var(n.err)))


def accept(t, n: Names, running: int | None = None) -> tuple:
    """``fin`` and ``ok``; ``running``: ``ok`` also needs the status to be this."""
    ok = Var(n.fin)
    if running is not None:
        ok = ir.and_(ir.eq(Var(n.status), i(running)), ok)
    return (_fin(t, n), Let(n.ok, BOOL, ir.and_(ok, ir.le(Var(n.err), f(1.0)))))


def factor(t, n: Names, q: int, separate: bool = False) -> tuple:
    err, fac = Var(n.err), Var(n.fac)
    raw = M.scaled_inverse_root(t, f(C.SAFETY), err, q + 1)
    clamped = ir.call("min", f(C.FACTOR_MAX), ir.call("max", f(C.FACTOR_MIN), raw))
    choose = If(ir.lt(err, f(LO)), (Assign(fac, f(C.FACTOR_MAX)),),
                (If(ir.gt(err, f(HI)), (Assign(fac, f(C.FACTOR_MIN)),),
                    (Assign(fac, clamped),)),))
    return ((_fin(t, n),) if separate else ()) + (
        Let(n.fac, FLOAT, f(C.FACTOR_MIN), mutable=True),
        If(Var(n.fin), (choose,)),
        If(ir.ne(Var(n.again), i(0)), (Assign(fac, ir.call("min", fac, f(1.0))),)),
        Let(n.prop, FLOAT, ir.call("min", ir.mul(Var(n.dt), fac), Var(n.dtmax))))


def next_step(t, n: Names, running: int, dtype: str, separate: bool = False) -> tuple:
    status = Var(n.status)
    is_running = ir.eq(status, i(running))
    small = ir.not_(ir.gt(Var(n.prop), ir.mul(f(C.UNDERFLOW[dtype]),
                                              ir.call("abs", Var(n.t)))))
    stopped = () if n.flux is None else (Assign(Var(n.flux), ir.Lit(True, BOOL)),)
    return ((_fin(t, n),) if separate else ()) + (
        If(ir.and_(is_running, ir.or_(ir.not_(Var(n.fin)), small)),
           (Assign(status, i(C.STEP_UNDERFLOW)),)),
        If(is_running, (Assign(Var(n.h), Var(n.prop)),), stopped))


# The C kernel's lane arrays (templates/adaptive.c.j2), and its names for them.
LANE_ARRAYS = ("vg_err", "vg_ok", "vg_prop", "vg_use", "vg_again", "vg_t", "vg_h",
               "vg_status", "vg_flux")


def printed(dialect, q: int, dtype: str, running: int) -> dict[str, str]:
    """The controller's pieces printed in a kernel's dialect (at indent 0): ``accept``,
    ``factor``, ``next`` (a stopped trajectory's flux made due) and ``next_plain``."""
    from .. import lanes
    from ..targets import printer
    t, p = dialect, printer(dialect)
    if t.lane_block:
        n = Names(dt="vg_use", flux="vg_flux")
        pieces = {"accept": accept(t, n, running), "factor": factor(t, n, q, separate=True),
                  "next": next_step(t, n, running, dtype, separate=True)}
        return {k: p.text(lanes.lane_arrays(v, LANE_ARRAYS)) for k, v in pieces.items()}
    n = Names(flux="vg_flux_due")
    return {"accept": p.text(accept(t, n)), "factor": p.text(factor(t, n, q)),
            "next": p.text(next_step(t, n, running, dtype)),
            "next_plain": p.text(next_step(t, Names(), running, dtype))}
