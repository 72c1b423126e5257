"""Running an adaptive method's kernel on wgpu (templates/adaptive.wgsl.j2), and a
fixed-step method's with ``save_at`` (its field's ``solver.dense`` variant, a kernel of
its own): dispatch until no trajectory runs.

Every dispatch runs at most ``u_attempts`` step attempts per trajectory (a chunk's
first dispatch a fixed budget of work, adaptive_host.first_attempts, then paced to about pacing.TARGET_SECONDS (runtime/pacing.py), and on
a CPU adapter never more than the loop limiter of lavapipe's code generator allows);
a trajectory resumes where the last dispatch left it: its state, t, dt, FSAL
derivative and counters wait in their buffers. After each dispatch the host reads the
error slot and one number, how many trajectories still run, in one mapping, and stops
at zero; then the chunk's states, t, counters and save_at history are read back.
Chunks (runner._chunks, sized for the history too) run one after another.
Tolerances, t0, t1, dt0, dtmax and max_steps are uniforms: a new value never
recompiles. What GLSL shares with it is in shader/adaptive_host.py. A field with
events runs here whatever its method (a fixed-step one as its dense variant): their
state (b_evi, b_evf: shader/events.py) waits between dispatches too, and a stopped
trajectory reports its own status, time and steps from it.
"""
from __future__ import annotations

import time

import numpy as np

from ... import spelling as S
from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS
from ...errors import BackendError
from ...ir.step import step_program
from ...runtime import pacing
from ..shader import adaptive_host as host
from ..shader.events import EVF_ROWS, EVI_ROWS, evi_rows
from ..shader.adaptive import COUNTERS as ROWS
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import check_dtype
from . import device as dev
from . import runner as R
from .dispatch import _dispatch, _pack, _pack_uniforms, _raise_error, _read

_ZERO = bytes(16)


def run(prepared, data, progress=None) -> Solution:
    """An adaptive method's call, or a fixed-step method's with save_at or events."""
    bound = prepared.bound(data)
    bound = host.kernel_field(bound)
    if not R.available():
        raise BackendError(f"no wgpu device here ({dev.get().error}); "
                           f"use {S.setting('backend', 'numpy')}")
    check_dtype(bound.dtype.name, bound.field.span)
    kernel = R.kernel_for(bound)
    if R._here.inside(kernel):                      # inside a progress callback of its run
        kernel = kernel.private()
    with R._lock:
        return _execute(kernel, bound, progress)


def _attempt_cap(meta: dict, bound: Bound) -> int | None:
    """The most attempts per dispatch: on a CPU adapter, what the loop limiter allows;
    ``runner.limits(max_steps=...)`` lowers it (tests split runs with it)."""
    cap = host.attempt_cap(meta, bound, R.LOOP_LIMIT) if dev.software() else None
    forced = R.LIMITS["max_steps"]
    return (min(cap, forced) if cap else forced) if forced else cap


def _execute(kernel: R.Kernel, bound: Bound, progress) -> Solution:
    d = dev.get()
    device, queue, meta = d.device, d.device.queue, kernel.meta
    f, n = bound.field, bound.n_trajectories
    n_states = len(f.states)
    state = R._initial(bound)
    values, put = R._setup(kernel, bound)
    for name, value in host.controller_uniforms(bound).items():
        put(name, value)
    times = np.ascontiguousarray(host.save_times(bound), np.float32)   # (save_every: slots)
    n_save = len(times)
    cap = _attempt_cap(meta, bound)
    stages = len(step_program(f.solver.tableau).stages)     # (the first dispatch's work)
    chunks = R._chunks(kernel, bound, max(2 + n_states, len(ROWS), n_save * n_states))
    host.check_history(bound, n_states, max((b - a for a, b in chunks), default=0), 4,
                       d.limits.get("max_storage_buffer_binding_size", 1 << 27))
    out_state = np.zeros((n_states, n), np.float32)
    ad = np.zeros((2 + n_states, n), np.float32)
    cnt = np.zeros((len(ROWS), n), np.int32)
    hist = np.zeros((n_save, n_states, n), np.float32)
    n_evi = evi_rows(f.n_when) if f.events else 0
    evi = np.zeros((n_evi, n), np.int32)
    evf = np.zeros((len(EVF_ROWS) if n_evi else 0, n), np.float32)
    outputs: dict = {}
    out_bufs = [b for b in meta["buffers"] if b["role"] == "output"]
    pt = [p.name for p in f.params if p.name in bound.per_trajectory]
    aim = pacing.target(dev.software())
    row = int(np.prod(bound.grid_shape[1:])) if meta["has_basin"] else 1
    for ci, (a, b) in enumerate(chunks):
        count = b - a
        put("u_count", count)
        put("u_origin", a // row + bound.origin if meta["has_basin"]
            else a + bound.first_trajectory)
        buf = kernel.ensure("b_state", n_states * count * 4)
        if state is not None:
            queue.write_buffer(buf, 0, np.ascontiguousarray(state[:, a:b]).tobytes())
        if meta["uses_init"]:
            kernel.ensure("b_init", n_states * count * 4)
        if pt:
            p = np.stack([np.asarray(bound.params[name], np.float32).reshape(n)[a:b]
                          for name in pt])
            queue.write_buffer(kernel.ensure("b_params", p.nbytes), 0, p.tobytes())
        sizes = {"b_ad": (2 + n_states) * count * 4, "b_cnt": len(ROWS) * count * 4,
                 "b_hist": n_save * n_states * count * 4}
        if n_evi:       # events: written by the first dispatch, carried between them
            sizes.update({"b_evi": n_evi * count * 4, "b_evf": len(EVF_ROWS) * count * 4})
        bufs = {name: kernel.ensure(name, size) for name, size in sizes.items()}
        if n_save:
            queue.write_buffer(kernel.ensure("b_save", times.nbytes), 0, times.tobytes())
        running_buf = kernel.ensure("b_run", 4)
        group, groups = kernel.bind_group(), R._groups(kernel, bound, a, b)
        first = host.first_attempts(R._first_steps(count, stages, None), FIRST_ATTEMPTS)
        pacer = pacing.Pacer(first, cap, aim)
        step0, running = 0, count
        while running:
            put("u_step0", step0)
            put("u_attempts", pacer.steps)
            packed = _pack_uniforms(kernel, values)
            began = time.perf_counter()
            with d.lock:
                queue.write_buffer(running_buf, 0, _ZERO)
                got = _dispatch(kernel, device, queue, packed, group, groups,
                                  [(kernel.buffers["b_err"], 16), (running_buf, 4)])
            pacer.record(pacer.steps, time.perf_counter() - began)
            COUNTERS.add("dispatches")
            _raise_error(np.frombuffer(got[0], np.uint32), meta, bound)
            running = int(np.frombuffer(got[1], np.uint32)[0])
            step0 = 1
            if progress is not None and running:
                R._report(kernel, progress, a + count - running, n)
        last = ci == len(chunks) - 1
        reads = [(buf, n_states * count * 4)] + [(bufs[k], sizes[k]) for k in sizes]
        if last:
            reads += [(kernel.buffers[x["name"]],
                       4 * int(np.prod(bound.output_shapes[x["array"]]))) for x in out_bufs]
        with d.lock:
            got = _read(kernel, queue, device.create_command_encoder(), reads)
        out_state[:, a:b] = np.frombuffer(got[0], np.float32).reshape(n_states, count)
        ad[:, a:b] = np.frombuffer(got[1], np.float32).reshape(2 + n_states, count)
        cnt[:, a:b] = np.frombuffer(got[2], np.int32).reshape(len(ROWS), count)
        if n_save:
            hist[:, :, a:b] = np.frombuffer(got[3], np.float32).reshape(n_save, n_states,
                                                                        count)
        if n_evi:
            evi[:, a:b] = np.frombuffer(got[4], np.int32).reshape(n_evi, count)
            evf[:, a:b] = np.frombuffer(got[5], np.float32).reshape(len(EVF_ROWS), count)
        if last:
            for x, raw in zip(out_bufs, got[1 + len(sizes):]):
                outputs[x["array"]] = np.frombuffer(raw, np.float32).reshape(
                    bound.output_shapes[x["array"]]).copy()
    if progress is not None:
        progress(int(n), int(n))
    sol = host.solution(bound, out_state, outputs, ad, cnt, hist,
                        lambda rows: _pack(rows, bound))
    if n_evi:
        _event_results(sol, bound, ad, cnt, evi, evf)
    return sol


def _event_results(sol: Solution, bound: Bound, ad, cnt, evi, evf) -> None:
    """A stopped lane's own status, time and steps (b_evi, b_evf: shader/events.py's
    rows), and the count of each `when` block (as glsl/adaptive_run.py)."""
    grid = bound.grid_shape
    lstat = evi[EVI_ROWS.index("lstat")]
    stopped = lstat != 0
    sol.status = np.where(stopped, lstat, cnt[2]).astype(np.int8).reshape(grid)
    sol.t = np.where(stopped, evf[EVF_ROWS.index("tstop")], ad[0]).astype(
        np.float32).reshape(grid)
    # a stopped lane's own steps (the one it stopped in counts; a basin's go on)
    sol.steps_taken = np.where(stopped, evi[EVI_ROWS.index("ltaken")],
                               cnt[0]).astype(np.int32).reshape(grid)
    sol.event_counts = np.ascontiguousarray(
        evi[len(EVI_ROWS):].T.reshape(grid + (bound.field.n_when,)), np.int32)
