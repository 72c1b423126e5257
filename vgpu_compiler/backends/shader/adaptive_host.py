"""The host side of an adaptive method's kernel (shader/adaptive.py), shared by the GLSL
and WGSL runners: which kernel a fixed-step method with ``save_at`` runs, the
controller's uniforms, the most step attempts one dispatch may run under a software
renderer's loop limiter, and the Solution made of the buffers read back.

A runner dispatches until no trajectory runs (the kernel counts them in ``b_run``);
a trajectory resumes where the last dispatch left it: its state, t, dt, FSAL
derivative and counters (``b_ad``, ``b_cnt``: rows ``adaptive.COUNTERS``) wait in
their buffers. Tolerances, t0, t1, dt0, dtmax and max_steps are uniforms: a new
value never recompiles.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ...call.bound import Bound, Solution, saved_steps
from ...errors import BackendError
from ...ir import controller as C
from ...ir.embedded import lean
from ...ir.observers import firsts, located
from ...ir.events import BISECTIONS, SAMPLE_HALVINGS, SAMPLES
from ...runtime.adaptive import FIRST_ATTEMPTS, Finished, Layout
from .adaptive import COUNTERS
from .events import EVF_ROWS, EVI_ROWS, LOG_FIELDS, evi_rows, log_sums

FIRST_MOST = 256            # the most attempts of a chunk's first dispatch (first_attempts)
_VARIANTS: dict = {}        # id(field) -> (field, its dense variant)


def kernel_field(bound: Bound, session: bool = False) -> Bound:
    """The bound call whose field the kernel compiles: a fixed-step method run for
    ``save_at`` runs its field's ``solver.dense`` variant (a kernel of its own), and so
    does an adaptive method's call with ``save_at`` or a Simulation (``session``: its
    advance reads the states at ``until`` the same way). An adaptive method's kernel
    without events writes save_at states only in that variant (AdaptiveParts.saves):
    a software renderer pays for a loop in the step loop even when it never runs
    (llvmpipe, the tsit5 Lorenz sweep: 1.4x the time with the empty save loop). Such a
    kernel also runs the method without its dense-only stages (``lean_field``)."""
    if bound.adaptive is not None and located(bound.field):    # events, or a `first`
        return bound
    if bound.adaptive is not None and bound.save_at is None and not session:
        lean = lean_field(bound.field)
        return bound if lean is bound.field else dataclasses.replace(bound, field=lean)
    return dataclasses.replace(bound, field=dense_variant(bound.field))


_LEAN: dict = {}            # id(field) -> (field, its lean variant)


def lean_field(field):
    """The field whose method drops the stages only its continuous extension reads
    (ir/embedded.py's ``lean``: dop853, vern7, vern9), for a kernel that never saves nor
    locates an event; the field itself for every other method (one object per field)."""
    hit = _LEAN.get(id(field))      # (lean's cache hashes the tableau's Fractions: about
    if hit is not None and hit[0] is field:     # 0.1 ms a call; kept per field object)
        return hit[1]
    tab = lean(field.solver.tableau)
    if tab is field.solver.tableau:
        if len(_LEAN) > 256:
            _LEAN.clear()
        _LEAN[id(field)] = (field, field)
        return field
    return _variant(_LEAN, field, tableau=tab)


def kernel_fields(field) -> tuple:
    """The fields a backend may build kernels of for ``field``: itself, its dense variant
    (save_at, a Simulation) and its lean one (the cpu backend's adaptive calls): what
    ``vgpu.evict`` drops (runtime/kernel_cache.KernelCache.evict_field)."""
    return field, dense_variant(field), lean_field(field)


def dense_variant(field):
    """The field with ``solver.dense`` set (one object per field: its kernel key is
    digested once per field object)."""
    return _variant(_VARIANTS, field, dense=True)


def _variant(cache: dict, field, **solver):
    """``field`` with ``solver`` changed, one object per field object (kept in ``cache``
    by id, checked against the field itself; at most 256 kept)."""
    hit = cache.get(id(field))
    if hit is None or hit[0] is not field:
        if len(cache) > 256:
            cache.clear()
        variant = dataclasses.replace(field, solver=dataclasses.replace(field.solver,
                                                                        **solver))
        hit = cache[id(field)] = (field, variant)
    return hit[1]


def first_attempts(planned: int, least: int = FIRST_ATTEMPTS) -> int:
    """Attempts in the first dispatch of a chunk: ``planned``, the steps the backend gives
    a first dispatch of that chunk (its budget of trajectory-stages: GLSL's
    plan.Chunk.first, wgpu's runner._first_steps), at least ``least`` and at most
    FIRST_MOST, since nothing is measured yet; later dispatches are paced by time. A
    short run is then one dispatch (llvmpipe, the tsit5 Lorenz sweep of 262,144: two
    dispatches took about 20% longer than one)."""
    return max(1, least, min(FIRST_MOST, planned))


def every_events(bound: Bound) -> bool:
    """A fixed-step method's ``save_every`` with events (or an observer ``first``, which
    runs the events' kernel): the kernel (events.extend's ``u_every``) writes the states
    at saved step ends into the save_at history."""
    return bool(bound.save_every) and located(bound.field) and bound.adaptive is None


def save_times(bound: Bound) -> np.ndarray:
    """What ``b_save`` holds: the save_at times; for save_every with events one slot per
    saved step, t0 first (the start block saves it), the others never reached by time
    (the step ends write them); save_at in the run's direction (dt < 0: non-increasing)."""
    if every_events(bound):
        n = len(saved_steps(bound.steps, bound.save_every))
        times = np.full(n, np.inf if bound.dt >= 0 else -np.inf, bound.dtype)   # dt < 0:
        times[0] = bound.t0                                     # compared the other way
        return times
    if bound.save_at is None:
        return np.zeros(0, bound.dtype)
    return bound.save_at.astype(bound.dtype)


def controller_uniforms(bound: Bound) -> dict:
    """The controller's uniforms (adaptive.extend) for this call, in the working dtype's
    numbers; ``u_steps`` is 0 for an adaptive method (a fixed-step method keeps its
    own)."""
    a, cast = bound.adaptive, bound.dtype.type
    n_save = len(save_times(bound))
    if a is None:                   # a fixed-step method run for save_at (or events)
        return {"u_t1": 0.0, "u_rtol": 0.0, "u_atol": 0.0, "u_dt0": 0.0, "u_dtmax": 0.0,
                "u_gap": 0.0, "u_max_steps": 0, "u_nsave": n_save, "u_nsteps": 0,
                "u_final": 0, "u_pause": 0.0, "u_every": int(bound.save_every or 0)}
    return {"u_t1": float(cast(a.t1)), "u_rtol": float(cast(a.rtol)),
            "u_atol": float(cast(a.atol)), "u_dt0": float(cast(a.dt0 or 0.0)),
            "u_dtmax": float(cast(a.dtmax)),
            "u_gap": float(cast(C.end_gap(a.t1, bound.dtype))),
            "u_max_steps": int(a.max_steps), "u_nsave": n_save,
            "u_steps": 0, "u_nsteps": 0, "u_final": 0, "u_pause": float(cast(a.t1)),
            "u_every": 0}


def runs_adaptive(template) -> bool:
    """Whether a call runs on runtime/adaptive.py's driver (its kernel the adaptive
    template's): an adaptive method, save_at, or events / an observer ``first`` to
    locate (a fixed-step method's dense variant, kernel_field); else runtime/fixed.py's.
    Decided here once for glsl and wgpu (their ``Backend.run``)."""
    return (template.adaptive is not None or template.save_at is not None
            or located(template.field))


def dispatch_cap(meta: dict, bound: Bound, limits, software: bool,
                 loop_limit: int) -> int | None:
    """The most attempts one dispatch of an adaptive kernel runs, for glsl and wgpu alike:
    the backend's ``limits`` max_steps (steps per dispatch, VGPU_MAX_STEPS_PER_DISPATCH on
    GLSL: an attempt is a step, accepted or not, as the fixed-step plan's cap counts
    them) and, on a software renderer, what its loop limiter allows (``attempt_cap``);
    None: no bound. The field's own ``max_steps`` (accepted steps of the whole run) is
    the kernel's (a uniform) and splitting never changes it."""
    cap = attempt_cap(meta, bound, loop_limit) if software else None
    forced = limits.in_force[2]
    return (min(cap, forced) if cap else forced) if forced else cap


def attempt_cap(meta: dict, bound: Bound, loop_limit: int) -> int:
    """The most attempts one dispatch may run under a loop limiter of ``loop_limit``
    iterations per invocation (Mesa llvmpipe's, which lavapipe shares), counting the
    controller's own loops and the events' (an attempt locates at most one time: a
    samples and bisection per condition, and two trips of the plain steps' loop, events.LEAN_STEPS);
    a save_at loop that alone could reach it is a BackendError. An invocation carrying
    several trajectories (meta ``lanes``: shader/lanes.py) runs each one's loops."""
    lanes = meta.get("lanes", 1)
    basin = int(np.prod(meta["basin"])) if meta["has_basin"] else 0
    # per event and observer `first`: its samples and the halvings after them (ir.events),
    # two more loops
    events = len(bound.field.events) + len(firsts(bound.field))
    locate = BISECTIONS[bound.dtype.name] - SAMPLE_HALVINGS + SAMPLES - 1
    extra = events * (locate + 2) + 4 * basin + 6 if events else 0
    m = getattr(bound.field.solver.tableau, "q", 1) + 1
    per = 2 + max(1, meta["loop_trips_per_step"]) + 3 * m + 3 + basin + extra
    n_save = len(save_times(bound))
    once = meta["loop_trips_once"] + 3 * basin + 6 * m + n_save + 16
    per, once = lanes * per - lanes + 1, lanes * once     # (one attempt loop for them all)
    if loop_limit - 1 - once < per:         # the save loop alone could hit the limiter
        raise BackendError(f"{n_save} save_at times are more than one dispatch may write on "
                           f"this software renderer (its loop limiter); use fewer times or "
                           f"backend='numpy'")
    return (loop_limit - 1 - once) // per


def history_bytes(meta: dict, bound: Bound, layout: Layout, block: int) -> int:
    """The bytes per trajectory of a run's history (save_at, or save_every with events:
    times x states), which bounds its chunks (shader/plan.plan_for's ``history``: a
    chunk's history is one buffer). The history of the fewest trajectories a chunk can
    hold (one, or one row of basins) must fit one storage block of ``block`` bytes: else
    a BackendError."""
    n_save, n_states = len(layout.times), len(bound.field.states)
    per = n_save * n_states * bound.dtype.itemsize
    unit = int(meta["basin"][0] * np.prod(bound.grid_shape[1:])) if meta["has_basin"] else 1
    if per * unit > block:
        what = "one trajectory" if unit == 1 else f"one row of basins ({unit} trajectories)"
        times = "saved steps" if every_events(bound) else "save_at times"
        raise BackendError(f"the history of {what} ({n_save} {times} x {n_states} states) "
                           f"is larger than the largest storage block of this driver "
                           f"({block} bytes); save fewer times, or use backend='numpy'")
    return per


def solution(bound: Bound, state: np.ndarray, outputs: dict, ad: np.ndarray,
             cnt: np.ndarray, hist: np.ndarray, pack: Callable) -> Solution:
    """The Solution of a finished run from its buffers, (rows, trajectories) each:
    ``state`` the final states, ``ad`` the b_ad rows (t first), ``cnt`` the b_cnt rows,
    ``hist`` (times, states, trajectories); ``pack`` turns (states, trajectories) into
    the grid's layout. A trajectory that stopped early repeats its final state at the
    save_at times it did not reach."""
    grid = bound.grid_shape
    sol = Solution(states=pack(state), outputs=outputs,
                   steps_taken=cnt[0].reshape(grid).copy())
    sol.steps_rejected = cnt[1].reshape(grid).copy()
    sol.status = cnt[2].astype(np.int8).reshape(grid)
    sol.t = ad[0].reshape(grid).copy()
    if bound.save_at is not None or every_events(bound):
        n_save = len(save_times(bound))
        for j in range(n_save):
            late = cnt[4] <= j
            hist[j][:, late] = state[:, late]
        sol.history = (np.stack([pack(hist[j]) for j in range(n_save)]) if n_save
                       else np.zeros((0,) + sol.states.shape, bound.dtype))
        if bound.save_at is not None:
            sol.times = bound.save_at.astype(bound.dtype)
        else:                   # save_every: t0 + m dt, as the numpy reference
            cast = bound.dtype.type
            sol.times = (cast(bound.t0) + np.asarray(saved_steps(
                bound.steps, bound.save_every)).astype(bound.dtype) * cast(bound.dt)
            ).astype(bound.dtype)
    return sol


def layout(bound: Bound, meta: dict) -> Layout:
    """The buffers of ``bound``'s adaptive run on a kernel of ``meta`` (runtime/adaptive.py's
    driver reads and writes them): the history's times, the counters' and events' rows, the
    event log's record (float64 flux inside `when`), the deposit slots (float64 flux)."""
    f = bound.field
    return Layout(n=bound.n_trajectories, n_states=len(f.states), dtype=bound.dtype,
                  times=save_times(bound), counters=len(COUNTERS),
                  evi=evi_rows(f.n_when) if f.events else 0,
                  evf=len(EVF_ROWS) if f.events else 0,
                  log_fields=len(LOG_FIELDS) if meta.get("event_log") else 0,
                  deposit_outputs=tuple(meta.get("deposit_outputs") or ())
                  if meta.get("n_deposits") else (),
                  output_shapes=bound.output_shapes)


def finish(bound: Bound, meta: dict, done: Finished, pack: Callable) -> Solution:
    """The Solution of the driver's finished run: the event log's sums added to the
    outputs (in the reference's order), then ``solution`` and, with events,
    ``event_results``."""
    outs = done.outputs
    logged = meta.get("event_log") or []
    if logged:              # the event log summed in the reference's order, then added
        sums = log_sums(done.records, logged, bound.output_shapes, bound.dtype)
        outs = {k: (v + sums[k]).astype(bound.dtype) for k, v in outs.items()}
    sol = solution(bound, done.state, outs, done.ad, done.cnt, done.hist, pack)
    if bound.field.events:
        event_results(sol, bound, done.ad, done.cnt, done.evi, done.evf)
    return sol


def event_results(sol: Solution, bound: Bound, ad, cnt, evi, evf) -> None:
    """A stopped lane's own status, time and steps (the one it stopped in counts; a
    basin's go on), from b_evi and b_evf (shader/events.py's rows), and the count of
    each `when` block."""
    grid = bound.grid_shape
    lstat = evi[EVI_ROWS.index("lstat")]
    stopped = lstat != 0
    sol.status = np.where(stopped, lstat, cnt[2]).astype(np.int8).reshape(grid)
    sol.t = np.where(stopped, evf[EVF_ROWS.index("tstop")], ad[0]).astype(
        bound.dtype).reshape(grid)
    sol.steps_taken = np.where(stopped, evi[EVI_ROWS.index("ltaken")],
                               cnt[0]).astype(np.int32).reshape(grid)
    sol.event_counts = np.ascontiguousarray(
        evi[len(EVI_ROWS):].T.reshape(grid + (bound.field.n_when,)), np.int32)
