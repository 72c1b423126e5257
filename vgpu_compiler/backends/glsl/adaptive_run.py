"""Running an adaptive method's kernel (templates/adaptive.glsl.j2): dispatch until done.

Every dispatch runs at most ``u_attempts`` step attempts per trajectory (the
first dispatch of a chunk a fixed number, then paced to about 0.2 s, and never
more than a software renderer's loop limiter allows); a trajectory resumes
where the last dispatch left it (its state, t, dt, FSAL derivative and
counters stay in their buffers). After each dispatch the host reads one
number, how many trajectories still run, and stops at zero. Chunks of the
ensemble (plan.py) run one after another. Tolerances, t0, t1, dt0, dtmax and
max_steps are uniforms: a new value never recompiles.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...call.counters import COUNTERS
from ...call.prepare import Data, Prepared
from ...errors import BackendError
from ...ir import controller as C
from . import device as gl
from ...ir.events import BISECTIONS
from ..shader.events import EVF_ROWS, EVI_ROWS, evi_rows
from ..shader.adaptive import COUNTERS as ROWS
from .execute import (_Pacer, _call_uniforms, _chunk_writes, _dispatch, _prepare, _raise_error,
                      _read_chunk, _read_outputs, _shared_writes, _pack, _accumulate)
from .plan import LOOP_LIMIT, _in_force, plan_for
from .kernel_cache import holding
from .lookup import available, kernel_of_call

FIRST_ATTEMPTS = 16         # attempts in a chunk's first dispatch (then paced by time)


def run(prepared: Prepared, data: Data, progress: Progress = None) -> Solution:
    """An adaptive method's call, or a fixed-step method's with save_at (its field's
    ``solver.dense`` variant: a kernel of its own, keyed apart)."""
    bound = prepared.bound(data)
    if bound.field.events and (bound.save_at is not None or bound.save_every):
        raise BackendError("the GLSL backend has no save_at or save_every with events yet "
                           f"(field `{bound.field.name}`); use backend='numpy'")
    if bound.adaptive is None:
        bound = dataclasses.replace(bound, field=_dense_variant(bound.field))
    if not available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    kernel = kernel_of_call(bound)
    with holding(kernel):
        if kernel.program is None:
            gl.call(kernel.compile)
        return _run(kernel, bound, progress)


_VARIANTS: dict = {}         # id(field) -> (field, its dense variant)


def _dense_variant(field):
    """The field with ``solver.dense`` set (one object per field: its kernel key is
    digested once per field object)."""
    hit = _VARIANTS.get(id(field))
    if hit is None or hit[0] is not field:
        if len(_VARIANTS) > 256:
            _VARIANTS.clear()
        variant = dataclasses.replace(field, solver=dataclasses.replace(field.solver,
                                                                        dense=True))
        hit = _VARIANTS[id(field)] = (field, variant)
    return hit[1]


def _attempt_cap(kernel, bound: Bound) -> int | None:
    """The most attempts one dispatch may run on a software renderer (its loop limiter:
    see plan.loop_cap), counting the controller's own loops; None elsewhere."""
    from . import SOFTWARE_RENDERERS
    if not SOFTWARE_RENDERERS.search(gl.device_info().get("renderer", "")):
        return None
    meta = kernel.meta
    basin = int(np.prod(meta["basin"])) if meta["has_basin"] else 0
    m = getattr(bound.field.solver.tableau, "q", 1) + 1
    per = 2 + max(1, meta["loop_trips_per_step"]) + 3 * m + 3 + basin
    n_save = 0 if bound.save_at is None else len(bound.save_at)
    once = meta["loop_trips_once"] + 3 * basin + 6 * m + n_save + 16
    events = len(bound.field.events)
    if events:      # an attempt locates at most one time: a bisection per condition
        per += events * (BISECTIONS[bound.dtype.name] + 2) + 4 * basin + 4
    if LOOP_LIMIT - 1 - once < per:         # the save loop alone could hit the limiter
        raise BackendError(f"{n_save} save_at times are more than one dispatch may write on "
                           f"this software renderer (its loop limiter); use fewer times or "
                           f"backend='numpy'")
    return (LOOP_LIMIT - 1 - once) // per


def _uniforms(call, plan, bound: Bound) -> dict:
    a, cast = bound.adaptive, bound.dtype.type
    u = _call_uniforms(call, plan)
    n_save = 0 if bound.save_at is None else len(bound.save_at)
    if a is None:                   # a fixed-step method run for save_at
        u.update({"u_t1": 0.0, "u_rtol": 0.0, "u_atol": 0.0, "u_dt0": 0.0, "u_dtmax": 0.0,
                  "u_gap": 0.0, "u_max_steps": 0, "u_nsave": n_save, "u_nsteps": 0,
                  "u_final": 0})
        return u
    u.update({"u_t1": float(cast(a.t1)), "u_rtol": float(cast(a.rtol)),
              "u_atol": float(cast(a.atol)), "u_dt0": float(cast(a.dt0 or 0.0)),
              "u_dtmax": float(cast(a.dtmax)), "u_gap": float(cast(C.end_gap(a.t1, bound.dtype))),
              "u_max_steps": int(a.max_steps),
              "u_nsave": 0 if bound.save_at is None else len(bound.save_at),
              "u_steps": 0, "u_nsteps": 0, "u_final": 0})
    return u


def _run(kernel, bound: Bound, progress) -> Solution:
    plan = plan_for(kernel, bound).at(bound)       # (a window: its place in the grid)
    call = _prepare(kernel.meta, bound, plan)
    uniforms = _uniforms(call, plan, bound)
    n, n_states, item = call.n, call.n_states, call.item
    save_at = bound.save_at if bound.save_at is not None else np.zeros(0)
    n_save = len(save_at)
    times = save_at.astype(bound.dtype)
    cap = _attempt_cap(kernel, bound)
    biggest = max(chunk.b - chunk.a for chunk in plan.chunks)
    block = _in_force[0][0] or gl.device_info().get("max_block", 1 << 27)   # (plan's limits)
    if n_save * n_states * biggest * item > block:
        raise BackendError(f"the save_at history ({n_save} times x {n_states} states x "
                           f"{biggest} trajectories) is larger than the largest storage block "
                           f"of this driver ({block} bytes); save fewer times, run fewer "
                           f"trajectories per call, or use backend='numpy'")
    n_evi = evi_rows(bound.field.n_when) if bound.field.events else 0
    evi = np.zeros((n_evi, n), np.int32)
    evf = np.zeros((len(EVF_ROWS) if n_evi else 0, n), bound.dtype)
    ad = np.zeros((2 + n_states, n), bound.dtype)
    cnt = np.zeros((len(ROWS), n), np.int32)
    hist = np.zeros((n_save, n_states, n), bound.dtype)
    outputs: dict = {}
    for ci, chunk in enumerate(plan.chunks):
        count = chunk.b - chunk.a
        pacer = _Pacer(FIRST_ATTEMPTS, cap)
        step0, running = 0, count
        while running:
            uniforms.update({"u_step0": step0, "u_attempts": pacer.steps})
            what = (ci == 0 and step0 == 0, step0 == 0)
            began = time.perf_counter()
            err, running = gl.call(_trip, kernel, call, plan, chunk, uniforms, times, what)
            pacer.record(uniforms["u_attempts"], time.perf_counter() - began)
            COUNTERS.add("dispatches")
            _raise_error(err, call)
            step0 = 1
            if progress is not None and running:
                done = chunk.a + count - running
                progress(int(done), int(n))
        raw, extra = gl.call(_read_back, kernel, call, plan, chunk, n_save,
                             ci == len(plan.chunks) - 1)
        _absorb(call, chunk, raw)
        ad[:, chunk.a:chunk.b] = extra["ad"]
        cnt[:, chunk.a:chunk.b] = extra["cnt"]
        if n_save:
            hist[:, :, chunk.a:chunk.b] = extra["hist"]
        if n_evi:
            evi[:, chunk.a:chunk.b] = extra["evi"]
            evf[:, chunk.a:chunk.b] = extra["evf"]
        if extra["outputs"] is not None:
            outputs = extra["outputs"]
    if progress is not None:
        progress(int(n), int(n))
    grid = bound.grid_shape
    sol = Solution(states=_pack(call, call.state),
                   outputs=call.deposits if call.deposits is not None else outputs,
                   steps_taken=cnt[0].reshape(grid).copy())
    sol.steps_rejected = cnt[1].reshape(grid).copy()
    sol.status = cnt[2].astype(np.int8).reshape(grid)
    sol.t = ad[0].reshape(grid).copy()
    if n_evi:                   # events: a stopped lane's own status, time and steps
        lstat = evi[1]
        stopped = lstat != 0
        sol.status = np.where(stopped, lstat, cnt[2]).astype(np.int8).reshape(grid)
        sol.t = np.where(stopped, evf[0], ad[0]).astype(bound.dtype).reshape(grid)
        if bound.adaptive is None:      # fixed steps: the step it stopped in counts
            sol.steps_taken = np.where(stopped, evi[2], cnt[0]).astype(np.int32).reshape(grid)
        sol.event_counts = np.ascontiguousarray(
            evi[len(EVI_ROWS):].T.reshape(grid + (bound.field.n_when,)), np.int32)
    if bound.save_at is not None:
        for j in range(n_save):             # stopped early: repeat the final state
            late = cnt[4] <= j
            hist[j][:, late] = call.state[:, late]
        sol.history = (np.stack([_pack(call, hist[j]) for j in range(n_save)]) if n_save
                       else np.zeros((0,) + sol.states.shape, bound.dtype))
        sol.times = times
    return sol


def _absorb(call, chunk, raw: dict) -> None:
    if call.state is None:
        call.state = np.zeros((call.n_states, call.n), call.bound.dtype)
    call.state[:, chunk.a:chunk.b] = raw["state"]
    if "dep" in raw:
        _accumulate(raw["dep"].reshape(call.meta["n_deposits"], chunk.b - chunk.a, 2),
                    call.meta, call.deposits)


def _trip(ctx, kernel, call, plan, chunk, uniforms: dict, times: np.ndarray, what: tuple):
    """One dispatch: (error slot, trajectories still running)."""
    shared, fresh = what
    count, item = chunk.b - chunk.a, call.item
    writes = _shared_writes(ctx, kernel, call, plan) if shared else []
    if fresh:
        writes += _chunk_writes(ctx, kernel, call, chunk)
        kernel.ensure(ctx, "b_ad", (2 + call.n_states) * count * item)
        kernel.ensure(ctx, "b_cnt", len(ROWS) * count * 4)
        kernel.ensure(ctx, "b_hist", len(times) * call.n_states * count * item)
        save = kernel.ensure(ctx, "b_save", len(times) * item)
        if call.bound.field.events:
            kernel.ensure(ctx, "b_evi", evi_rows(call.bound.field.n_when) * count * 4)
            kernel.ensure(ctx, "b_evf", len(EVF_ROWS) * count * item)
        if len(times):
            writes.append((save, np.ascontiguousarray(times)))
    run = kernel.ensure(ctx, "b_run", 4)
    writes.append((run, np.zeros(4, np.uint32).tobytes()))
    err = _dispatch(ctx, kernel, chunk, uniforms, writes)
    running = int(np.frombuffer(kernel.buffers["b_run"].read(4), np.uint32)[0])
    return err, running


def _read_back(ctx, kernel, call, plan, chunk, n_save: int, last: bool):
    count, item, dtype = chunk.b - chunk.a, call.item, call.bound.dtype
    raw = _read_chunk(kernel, call, chunk)
    raw = {k: np.array(v) for k, v in raw.items()}
    ad = np.frombuffer(kernel.buffers["b_ad"].read((2 + call.n_states) * count * item),
                       dtype).reshape(2 + call.n_states, count)
    cnt = np.frombuffer(kernel.buffers["b_cnt"].read(len(ROWS) * count * 4),
                        np.int32).reshape(len(ROWS), count)
    hist = None
    if n_save:
        hist = np.frombuffer(kernel.buffers["b_hist"].read(n_save * call.n_states * count
                                                            * item),
                             dtype).reshape(n_save, call.n_states, count)
    outputs = _read_outputs(kernel, call, plan) if last else None
    extra = {"ad": ad, "cnt": cnt, "hist": hist, "outputs": outputs}
    if call.bound.field.events:
        rows = evi_rows(call.bound.field.n_when)
        extra["evi"] = np.frombuffer(kernel.buffers["b_evi"].read(rows * count * 4),
                                     np.int32).reshape(rows, count)
        extra["evf"] = np.frombuffer(kernel.buffers["b_evf"].read(len(EVF_ROWS) * count * item),
                                     dtype).reshape(len(EVF_ROWS), count)
    return raw, extra
