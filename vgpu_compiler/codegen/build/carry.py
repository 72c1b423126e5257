"""What a trajectory carries between dispatches, once: its state (b_state), its
per-trajectory params (b_params), and after the first dispatch its t, step size and
FSAL derivative (b_ad: rows t, dt, then k0 per state) and counters (b_cnt: the rows of
backends/shader/adaptive.py's COUNTERS); loaded at a dispatch's start, stored at its
end, where a trajectory still running is counted (b_run). Row r of a buffer is
``r * u_count + lane``. ``Splice("extra")``: the events' own rows (their template's)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import UINT, Assign, Elem, If, Var, i

TIME, STEP = "vg_t", "vg_h"
COUNTERS = ("vg_taken", "vg_rej", "vg_status", "vg_again", "vg_next")   # b_cnt's rows


@dataclass(frozen=True)
class Field:
    states: tuple[str, ...]
    params: tuple[str, ...]     # per-trajectory params
    k0: tuple[str, ...]         # the FSAL derivative


def _row(r: int):
    lane = Var("lane")
    if r == 0:
        return lane
    return ir.add(Var("u_count") if r == 1 else ir.mul(i(r), Var("u_count")), lane)


def load_state(fd: Field) -> tuple:
    return (*(Assign(Var(s), Elem("b_state", _row(r))) for r, s in enumerate(fd.states)),
            *(Assign(Var(p), Elem("b_params", _row(r))) for r, p in enumerate(fd.params)))


def resume(fd: Field, paused: int | None = None, running: int | None = None) -> tuple:
    """After the first dispatch (u_step0 != 0): t, dt, k0 and the counters; the next
    save_at time from 0 on a new advance (u_step0 == 2). ``paused``: a status that
    resumes as ``running`` (the C kernel's)."""
    ad = (Var(TIME), Var(STEP), *map(Var, fd.k0))
    body = [*(Assign(x, Elem("b_ad", _row(r))) for r, x in enumerate(ad)),
            *(Assign(Var(c), Elem("b_cnt", _row(r))) for r, c in enumerate(COUNTERS[:-1]))]
    nxt = len(COUNTERS) - 1
    body.append(Assign(Var(COUNTERS[nxt]), ir.Select(ir.eq(Var("u_step0"), i(2)), i(0),
                                                     Elem("b_cnt", _row(nxt)))))
    if paused is not None:
        st = Var("vg_status")
        body.append(Assign(st, ir.Select(ir.eq(st, i(paused)), i(running), st)))
    body.append(ir.Splice("extra"))
    return (If(ir.ne(Var("u_step0"), i(0)), tuple(body)),)


def store(fd: Field) -> tuple:
    ad = (Var(TIME), Var(STEP), *map(Var, fd.k0))
    return (*(Assign(Elem("b_state", _row(r)), Var(s)) for r, s in enumerate(fd.states)),
            *(Assign(Elem("b_ad", _row(r)), x) for r, x in enumerate(ad)),
            *(Assign(Elem("b_cnt", _row(r)), Var(c)) for r, c in enumerate(COUNTERS)),
            ir.Splice("extra"))


def count_running(running: int) -> tuple:
    """b_run counts the trajectories still running (and not paused) after the dispatch."""
    go = ir.and_(ir.eq(Var("vg_status"), i(running)), ir.not_(Var("vg_paused")))
    return (If(go, (ir.Do(ir.call("atomic_add", Elem("b_run", i(0)), ir.Lit(1, UINT))),)),)


def load(fd: Field) -> tuple:
    """A trajectory's load where one invocation runs it (GLSL, WGSL): idle lanes skip it."""
    return (If(Var("vg_active"), load_state(fd) + resume(fd)),)


def store_all(fd: Field, running: int) -> tuple:
    return (If(Var("vg_active"), store(fd) + count_running(running)),)
