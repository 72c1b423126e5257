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

``separate``: the piece runs on its own (the C kernel's lane loops) and tests ``fin``
again itself.

The select form (``accept_flags``, ``factor_select``), for lane targets: the same
decisions with no branch, in selects and 0/1 int flags (ir.Bits) and one choice a
statement, so that a loop over a block of lanes vectorises (the C kernel's lane loops
did not with the if/else form): ``accept``'s ``ok`` and ``factor``'s
``prop``, the if/else chain flattened (the guards, then the finite test, then the cap
after a rejection), the clamps without their NaN case (err >= 0 or NaN, so a finite
err's raw factor is in (0, inf]: no NaN reaches them).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import controller as C
from .. import ir
from .. import mathlib as M
from ..ir import BOOL, FLOAT, INT, Assign, If, Let, Var, f, i

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


def accept(t, n: Names) -> tuple:
    """``fin`` and ``ok``."""
    return (_fin(t, n), Let(n.ok, BOOL, ir.and_(Var(n.fin), ir.le(Var(n.err), f(1.0)))))


def factor(t, n: Names, q: int) -> tuple:
    err, fac = Var(n.err), Var(n.fac)
    raw = M.scaled_inverse_root(t, f(C.SAFETY), err, q + 1)
    clamped = ir.call("min", f(C.FACTOR_MAX), ir.call("max", f(C.FACTOR_MIN), raw))
    choose = If(ir.lt(err, f(LO)), (Assign(fac, f(C.FACTOR_MAX)),),
                (If(ir.gt(err, f(HI)), (Assign(fac, f(C.FACTOR_MIN)),),
                    (Assign(fac, clamped),)),))
    return (
        Let(n.fac, FLOAT, f(C.FACTOR_MIN), mutable=True),
        If(Var(n.fin), (choose,)),
        If(ir.ne(Var(n.again), i(0)), (Assign(fac, ir.call("min", fac, f(1.0))),)),
        Let(n.prop, FLOAT, ir.call("min", ir.mul(Var(n.dt), fac), Var(n.dtmax))))


def accept_flags(t, n: Names, running: int) -> tuple:
    """``accept`` in select form: ``ok = (status == running) & finite(err) & (err <= 1)``."""
    err = Var(n.err)
    return (Let(n.ok, INT, ir.band(ir.eq(Var(n.status), i(running)), M.finite_flag(t, err),
                                   ir.le(err, f(1.0)))),)


def factor_select(t, n: Names, q: int) -> tuple:
    """``factor`` in select form; where the target's pow is apart (``pow_apart``) it runs
    first in a piece of its own (the lane pass gives it its own loop and array)."""
    err, fac, raw, p = Var(n.err), Var(n.fac), Var("vg_raw"), Var("vg_p")
    fmin, fmax, one = f(C.FACTOR_MIN), f(C.FACTOR_MAX), f(1.0)
    note = ir.Comment("the controller: the next step from this one's error on every lane, in "
                      "selects\n(codegen/build/controller.py); a lane that does not run "
                      "ignores its value")
    if t.pow_apart:
        head: tuple = (Let("vg_pw", FLOAT, ir.call("pow_libm", err, f(-1.0 / (q + 1)))), note)
        value = ir.mul(f(C.SAFETY), Var("vg_pw"))
    else:
        head = (note,)
        value = M.scaled_inverse_root(t, f(C.SAFETY), err, q + 1)
    return head + (
        Let(raw.name, FLOAT, value),
        Let(n.fac, FLOAT, ir.Select(ir.gt(raw, fmin), raw, fmin), mutable=True),
        Assign(fac, ir.Select(ir.lt(fac, fmax), fac, fmax)),
        Assign(fac, ir.Select(ir.gt(err, f(HI)), fmin, fac)),
        Assign(fac, ir.Select(ir.lt(err, f(LO)), fmax, fac)),
        Assign(fac, ir.Select(M.finite_flag(t, err), fac, fmin)),
        Assign(fac, ir.Select(ir.band(ir.ne(Var(n.again), i(0)), ir.lt(one, fac)), one, fac)),
        Let(p.name, FLOAT, ir.mul(Var(n.dt), fac)),
        Assign(Var(n.prop), ir.Select(ir.bor(ir.call("isnan", p), ir.call("isnan", Var(n.dtmax))),
                                      f(float("nan")),
                                      ir.Select(ir.lt(Var(n.dtmax), p), Var(n.dtmax), p))))


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
    ``factor``, ``next`` (a stopped trajectory's flux made due) and ``next_plain``. A lane
    target's: ``accept`` (select form) and ``next`` one lane's (for the template's loop
    over the lanes), ``factor`` (select form) laid out in loops over the lanes."""
    from .. import lanes
    from ..targets import printer
    t, p = dialect, printer(dialect)
    if t.lane_block:
        n = Names(dt="vg_use", flux="vg_flux")
        one = {"accept": accept_flags(t, n, running),
               "next": next_step(t, n, running, dtype, separate=True)}
        out = {k: p.text(lanes.lane_arrays(v, LANE_ARRAYS)) for k, v in one.items()}
        out["factor"] = p.text(lanes.lane_loops(factor_select(t, n, q), LANE_ARRAYS))
        return out
    n = Names(flux="vg_flux_due")
    return {"accept": p.text(accept(t, n)), "factor": p.text(factor(t, n, q)),
            "next": p.text(next_step(t, n, running, dtype)),
            "next_plain": p.text(next_step(t, Names(), running, dtype))}
