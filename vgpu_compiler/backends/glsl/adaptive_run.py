"""Running an adaptive method's kernel (templates/adaptive.glsl.j2): dispatch until done.

Every dispatch runs at most ``u_attempts`` step attempts per trajectory (the
first dispatch of a chunk a fixed budget of work, adaptive_host.first_attempts, then
paced to about 0.2 s, and never
more than a software renderer's loop limiter allows); a trajectory resumes
where the last dispatch left it (its state, t, dt, FSAL derivative and
counters stay in their buffers). After each dispatch the host reads one
number, how many trajectories still run, and stops at zero. Chunks of the
ensemble (plan.py) run one after another. Tolerances, t0, t1, dt0, dtmax and
max_steps are uniforms: a new value never recompiles.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...call.counters import COUNTERS
from ...call.prepare import Data, Prepared
from ...errors import BackendError
from ..shader import adaptive_host as host
from ..shader.events import EVF_ROWS, EVI_ROWS, LOG_FIELDS, evi_rows, log_sums
from ..shader.adaptive import COUNTERS as ROWS
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import device as gl
from ...runtime.pacing import Pacer
from .execute import (_call_uniforms, _chunk_writes, _dispatch, _prepare, _raise_error,
                      _read_chunk, _read_outputs, _shared_writes, _pack, _accumulate)
from .plan import LOOP_LIMIT, _in_force, plan_for
from .kernel_cache import holding
from .lookup import available, kernel_of_call


LOG_FIRST = 1024            # records of the event log at first (it grows when it overflows)


def run(prepared: Prepared, data: Data, progress: Progress = None) -> Solution:
    """An adaptive method's call, or a fixed-step method's with save_at (its field's
    ``solver.dense`` variant: a kernel of its own, keyed apart)."""
    bound = prepared.bound(data)
    bound = host.kernel_field(bound)
    if not available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    kernel = kernel_of_call(bound)
    with holding(kernel):
        if kernel.program is None:
            gl.call(kernel.compile)
        return _run(kernel, bound, progress)


def _attempt_cap(kernel, bound: Bound) -> int | None:
    """The most attempts one dispatch may run on a software renderer (its loop limiter:
    see plan.loop_cap), counting the controller's own loops; None elsewhere."""
    from . import SOFTWARE_RENDERERS
    if not SOFTWARE_RENDERERS.search(gl.device_info().get("renderer", "")):
        return None
    return host.attempt_cap(kernel.meta, bound, LOOP_LIMIT)


def _uniforms(call, plan, bound: Bound) -> dict:
    u = _call_uniforms(call, plan)
    u.update(host.controller_uniforms(bound))
    return u


def _run(kernel, bound: Bound, progress) -> Solution:
    times = host.save_times(bound)      # save_at, or save_every's slots with events
    n_save, n_states, item = len(times), len(bound.field.states), bound.dtype.itemsize
    block = _in_force[0][0] or gl.device_info().get("max_block", 1 << 27)   # (plan's limits)
    _check_history(kernel, bound, n_save, block)
    # the history of a chunk is one buffer: chunks small enough that it fits one block
    plan = plan_for(kernel, bound, history=n_save * n_states * item).at(bound)
    call = _prepare(kernel.meta, bound, plan)
    uniforms = _uniforms(call, plan, bound)
    n = call.n
    cap = _attempt_cap(kernel, bound)
    biggest = max(chunk.b - chunk.a for chunk in plan.chunks)
    n_evi = evi_rows(bound.field.n_when) if bound.field.events else 0
    evi = np.zeros((n_evi, n), np.int32)
    evf = np.zeros((len(EVF_ROWS) if n_evi else 0, n), bound.dtype)
    ad = np.zeros((1, n), bound.dtype)      # b_ad's first row, t (the rest stays there)
    cnt = np.zeros((len(ROWS), n), np.int32)
    hist = np.zeros((n_save, n_states, n), bound.dtype)
    outputs: dict = {}
    logged = kernel.meta.get("event_log") or []     # float64 flux inside `when`: a log
    logcap = min(max(LOG_FIRST, 4 * biggest), block // (len(LOG_FIELDS) * item)) \
        if logged else 0
    records: list = []
    for ci, chunk in enumerate(plan.chunks):
        count = chunk.b - chunk.a
        while True:         # (from the chunk's start again when the event log overflowed)
            first = host.first_attempts(chunk.first, FIRST_ATTEMPTS)
            pacer = Pacer(first, cap)
            step0, running, mine, over = 0, count, [], 0
            while running:
                uniforms.update({"u_step0": step0, "u_attempts": pacer.steps,
                                 "u_logcap": logcap})
                what = (ci == 0 and step0 == 0, step0 == 0)
                began = time.perf_counter()
                err, running, log = gl.call(_trip, kernel, call, plan, chunk, uniforms, times,
                                            what)
                pacer.record(uniforms["u_attempts"], time.perf_counter() - began)
                COUNTERS.add("dispatches")
                _raise_error(err, call)
                step0 = 1
                if log is not None:
                    if log[0] > logcap:
                        over = log[0]
                        break
                    log[1][:, 5] += chunk.a         # (the trajectory's place in the call)
                    mine.append(log[1])
                if progress is not None and running:
                    done = chunk.a + count - running
                    progress(int(done), int(n))
            if not over:
                records += mine
                break
            # a larger log, up to the largest storage block; past it, fewer attempts
            most = block // (len(LOG_FIELDS) * item)
            if logcap >= most:
                if (cap or first) <= 1 and uniforms["u_attempts"] <= 1:
                    raise BackendError(
                        f"one step of these {count} trajectories deposits more `flux` inside "
                        f"`when` ({over} deposits) than the event log of this driver holds "
                        f"({most}); run fewer trajectories per call, or use backend='numpy'")
                cap = max(1, min(cap or first, uniforms["u_attempts"]) // 2)
            logcap = min(max(2 * logcap, 2 * over), most)
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
    outs = call.deposits if call.deposits is not None else outputs
    if logged:              # the event log summed in the reference's order, then added
        sums = log_sums(np.concatenate(records) if records else None, logged,
                        bound.output_shapes, bound.dtype)
        outs = {k: (v + sums[k]).astype(bound.dtype) for k, v in outs.items()}
    sol = host.solution(bound, call.state, outs, ad, cnt, hist, lambda rows: _pack(call, rows))
    if n_evi:                   # events: a stopped lane's own status, time and steps
        grid = bound.grid_shape
        lstat = evi[1]
        stopped = lstat != 0
        sol.status = np.where(stopped, lstat, cnt[2]).astype(np.int8).reshape(grid)
        sol.t = np.where(stopped, evf[0], ad[0]).astype(bound.dtype).reshape(grid)
        # a stopped lane's own steps (the one it stopped in counts; a basin's go on)
        sol.steps_taken = np.where(stopped, evi[2], cnt[0]).astype(np.int32).reshape(grid)
        sol.event_counts = np.ascontiguousarray(
            evi[len(EVI_ROWS):].T.reshape(grid + (bound.field.n_when,)), np.int32)
    return sol


def _check_history(kernel, bound: Bound, n_save: int, block: int) -> None:
    """The history of the fewest trajectories a chunk can hold (one, or one row of
    basins) must fit one storage block."""
    meta, n_states = kernel.meta, len(bound.field.states)
    unit = meta["basin"][0] * math.prod(bound.grid_shape[1:]) if meta["has_basin"] else 1
    if n_save * n_states * bound.dtype.itemsize * unit > block:
        what = "one trajectory" if unit == 1 else f"one row of basins ({unit} trajectories)"
        times = "saved steps" if host.every_events(bound) else "save_at times"
        raise BackendError(f"the history of {what} ({n_save} {times} x {n_states} states) "
                           f"is larger than the largest storage block of this driver "
                           f"({block} bytes); save fewer times, or use backend='numpy'")


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
    cap = uniforms.get("u_logcap", 0)
    if cap:                 # the event log: emptied before every dispatch
        kernel.ensure(ctx, "b_evlog", cap * len(LOG_FIELDS) * call.item)
        writes.append((kernel.ensure(ctx, "b_evn", 4), np.zeros(4, np.uint32).tobytes()))
    err = _dispatch(ctx, kernel, chunk, uniforms, writes)
    running = int(np.frombuffer(kernel.buffers["b_run"].read(4), np.uint32)[0])
    log = None
    if cap:
        got = int(np.frombuffer(kernel.buffers["b_evn"].read(4), np.uint32)[0])
        rows = np.zeros((0, len(LOG_FIELDS)), call.bound.dtype)
        if 0 < got <= cap:
            rows = np.frombuffer(kernel.buffers["b_evlog"].read(got * len(LOG_FIELDS)
                                                                * call.item),
                                 call.bound.dtype).reshape(got, len(LOG_FIELDS)).copy()
        log = (got, rows)
    return err, running, log


def _read_back(ctx, kernel, call, plan, chunk, n_save: int, last: bool):
    count, item, dtype = chunk.b - chunk.a, call.item, call.bound.dtype
    raw = _read_chunk(kernel, call, chunk)
    raw = {k: np.array(v) for k, v in raw.items()}
    ad = np.frombuffer(kernel.buffers["b_ad"].read(count * item), dtype).reshape(1, count)
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
