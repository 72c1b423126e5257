"""Running one Bound call on a compiled GpuKernel: buffers, chunks, dispatches, readback.

Two kinds of splitting keep every dispatch within the driver's limits:
- trajectories: an ensemble whose per-trajectory buffers would exceed the
  largest storage block (GL_MAX_SHADER_STORAGE_BLOCK_SIZE), or whose
  workgroups would exceed the workgroup-count limit, runs as several ranges of
  whole basins (rows of basins along the first grid axis), one after another;
- steps: a long integration runs as several dispatches of bounded length
  (u_step0 / u_nsteps), the state kept in its buffer in between; chunks also
  end at every saved step of a history, and progress() is called after each.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from ..backends.glsl.render import mangle
from ..errors import BackendError, ProgramIndexError, Span, ZeroDivision
from . import gl
from .bound import Bound, Progress, Solution
from .counters import COUNTERS

NO_ERROR = 0xFFFFFFFF
NO_ERROR_BYTES = np.full(4, NO_ERROR, np.uint32).tobytes()
LOOP_LIMIT = 65535          # llvmpipe's loop limiter: iterations per invocation and dispatch
# Limits; tests lower them to exercise the splitting on small problems.
LIMITS = {
    "max_block": None,              # bytes; None: the driver's (env VGPU_MAX_BLOCK_BYTES)
    "work_per_dispatch": None,      # trajectory-stages in the first dispatch, then paced by
                                    # time; None: 2^27 (env VGPU_WORK_PER_DISPATCH)
    "max_steps": None,              # most steps per dispatch (env VGPU_MAX_STEPS_PER_DISPATCH)
}


def set_limits(**kwargs) -> dict:
    """Override splitting limits (None restores the default); returns the old values."""
    old = dict(LIMITS)
    for k, v in kwargs.items():
        if k not in LIMITS:
            raise KeyError(k)
        LIMITS[k] = v
    return old


@contextlib.contextmanager
def limits(**kwargs):
    """``with limits(max_steps=9): ...``: set_limits for a block, restored afterwards."""
    old = set_limits(**kwargs)
    try:
        yield
    finally:
        set_limits(**old)


def _limit(name: str, env: str, default):
    if LIMITS[name] is not None:
        return int(LIMITS[name])
    if os.environ.get(env):
        return int(os.environ[env])
    return default


@dataclass(frozen=True)
class _Chunk:
    """One range of trajectories, dispatched on its own: rows [lo, hi) of the first grid
    axis (trajectories without a basin), trajectories [a, b)."""

    lo: int
    hi: int
    a: int
    b: int
    groups: tuple[int, int, int]
    uniforms: dict              # what locates the chunk: u_count, u_origin, grid, dims
    first: int                  # steps in its first dispatch (then paced by time)


@dataclass(frozen=True)
class _Plan:
    """Everything about a run that the kernel's shapes and the limits fix. A kernel has
    fixed shapes, so the plan is made once per kernel (and per limits) and reused by
    every call: a repeated call only writes data, sets uniforms and dispatches."""

    chunks: tuple[_Chunk, ...]
    cap: int | None             # most steps in one dispatch
    inputs: tuple[tuple[str, str], ...]          # (buffer, input name)
    outputs: tuple[tuple[str, str, int], ...]    # (buffer, output name, bytes)
    scalars: tuple[tuple[str, str], ...]         # (uniform, param name)
    pt: tuple[str, ...]                          # params passed per trajectory


@dataclass
class _Call:
    """The host side of one run: arrays in kernel layout."""

    bound: Bound
    meta: dict
    item: int
    n: int
    n_states: int
    pt: tuple
    state: np.ndarray           # (n_states, N)
    params: np.ndarray          # (n_pt, N)


def execute(ctx, kernel, bound: Bound, progress: Progress) -> Solution:
    """Run ``bound`` on ``kernel``; on the GL thread (``ctx`` is the context)."""
    plan = _plan(kernel, bound)
    call = _prepare(kernel.meta, bound, plan)
    _upload_shared(ctx, kernel, call, plan)
    history = _history_plan(bound)
    saved = [None] * len(history) if history else None
    taken = np.full(call.n, bound.steps, np.int32)
    deposits = {name: np.zeros(shape, call.state.dtype)
                for name, shape in bound.output_shapes.items()} if call.meta["n_deposits"] else None
    per_call = _call_uniforms(call, plan)
    for ci, chunk in enumerate(plan.chunks):
        _run_chunk(ctx, kernel, call, plan, chunk, per_call, (ci, len(plan.chunks)), progress,
                   history, saved, taken, deposits)
    outputs = deposits if deposits is not None else _read_outputs(kernel, call, plan)
    sol = Solution(states=_pack(call, call.state), outputs=outputs,
                   steps_taken=taken.reshape(bound.grid_shape))
    if history:
        sol.history = np.stack([_pack(call, h) for h in saved])
        dt = call.state.dtype.type
        sol.times = (dt(bound.t0) + np.asarray(history).astype(call.state.dtype) * dt(bound.dt)
                     ).astype(call.state.dtype)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol


# --- the plan: once per kernel and limits ----------------------------------------------------
def _plan(kernel, bound: Bound) -> _Plan:
    limits = (_limit("max_block", "VGPU_MAX_BLOCK_BYTES", 0),
              _limit("work_per_dispatch", "VGPU_WORK_PER_DISPATCH", 1 << 27),
              _limit("max_steps", "VGPU_MAX_STEPS_PER_DISPATCH", 0))
    plan = kernel.plans.get(limits)
    if plan is None:
        plan = _make_plan(kernel, bound, *limits)
        kernel.plans[limits] = plan
    return plan


def _make_plan(kernel, bound: Bound, max_block: int, work: int, max_steps: int) -> _Plan:
    meta, dev = kernel.meta, gl.device_info()
    pt = tuple(p.name for p in bound.field.params
               if isinstance(bound.params[p.name], np.ndarray) and bound.params[p.name].ndim)
    item = np.dtype(bound.dtype).itemsize
    grid = bound.grid_shape
    row = math.prod(grid[1:]) if meta["has_basin"] else 1
    stages = max(1, len(bound.field.solver.tableau.b))
    static = {f"u_grid{k}": int(extent) for k, extent in enumerate(grid)}
    static.update({mangle("d", name): int(value) for name, value in bound.dims.items()})
    chunks = []
    for lo, hi in _chunks(bound, meta, dev, item, len(pt), max_block or dev.get("max_block",
                                                                                  1 << 27)):
        a, b = lo * row, hi * row
        chunks.append(_Chunk(lo, hi, a, b, _groups(meta, grid, dev, hi - lo, b - a),
                             dict(static, u_count=b - a, u_origin=lo),
                             max(1, work // max(1, (b - a) * stages))))
    cap = max_steps or None
    loops = _loop_cap(kernel, dev)
    if loops is not None:
        cap = min(cap, loops) if cap else loops
    buffers = meta["buffers"]
    return _Plan(
        chunks=tuple(chunks), cap=cap,
        inputs=tuple((b["name"], b["array"]) for b in buffers if b["role"] == "input"),
        outputs=tuple((b["name"], b["array"], math.prod(bound.output_shapes[b["array"]]) * item)
                      for b in buffers if b["role"] == "output"),
        scalars=tuple((mangle("p", p.name), p.name) for p in bound.field.params
                      if p.name not in pt),
        pt=pt)


def _per_trajectory_bytes(meta: dict, n_states: int, n_pt: int, item: int) -> int:
    sizes = [n_states * item, n_pt * item]
    if meta["collapse"]:
        sizes.append(8)
    if meta["uses_init"]:
        sizes.append(n_states * item)
    if meta["n_deposits"]:
        sizes.append(2 * meta["n_deposits"] * item)
    return max(sizes)


def _chunks(bound: Bound, meta: dict, dev: dict, item: int, n_pt: int,
            max_block: int) -> list[tuple[int, int]]:
    """Ranges [lo, hi) of the first grid axis (of trajectories without a basin)."""
    groups = dev.get("max_groups", (65535, 65535, 65535))
    grid = bound.grid_shape
    for name, arr in bound.inputs.items():
        if arr.size * item > max_block:
            raise BackendError(f"input {name} ({arr.size * item} bytes) is larger than "
                               f"the largest storage block of this driver ({max_block} bytes); "
                               f"use backend='numpy'")
    per = _per_trajectory_bytes(meta, len(bound.field.states), n_pt, item)
    if not meta["has_basin"]:
        most = min(max_block // per, meta["local_size"][0] * groups[0] * groups[1])
        total, unit = bound.n_trajectories, 1
    else:
        basin, rank = meta["basin"], len(grid)
        for k in range(1, rank):
            if math.ceil(grid[k] / basin[k]) > groups[rank - 1 - k]:
                raise BackendError(f"grid axis {k} needs more workgroups than the driver allows")
        row = math.prod(grid[1:])
        most = min(max_block // (per * row), basin[0] * groups[rank - 1])
        total, unit = grid[0], basin[0]
        most -= most % unit
    if most < unit:
        raise BackendError("one row of basins is larger than the largest storage block; "
                           "use backend='numpy'")
    return [(lo, min(lo + most, total)) for lo in range(0, total, most)] or [(0, 0)]


def _groups(meta: dict, grid: tuple, dev: dict, rows: int, count: int) -> tuple[int, int, int]:
    if not meta["has_basin"]:
        total = max(1, math.ceil(count / meta["local_size"][0]))
        gx = min(total, dev.get("max_groups", (65535,))[0])
        return gx, math.ceil(total / gx), 1
    basin, rank = meta["basin"], len(grid)
    out = [1, 1, 1]
    for k in range(rank):
        extent = rows if k == 0 else grid[k]
        out[rank - 1 - k] = max(1, math.ceil(extent / basin[k]))
    return tuple(out)


# --- host arrays -----------------------------------------------------------------------
def _prepare(meta: dict, bound: Bound, plan: _Plan) -> _Call:
    f = bound.field
    dtype = np.dtype(bound.dtype)
    n = bound.n_trajectories
    state = np.zeros((len(f.states), n), dtype)
    if bound.h0 is not None:
        free = np.asarray(bound.h0, dtype).reshape(n, -1)
        rows = [k for k, s in enumerate(f.states) if s.init is None]
        state[rows] = free.T
    params = np.zeros((len(plan.pt), n), dtype)
    for k, name in enumerate(plan.pt):
        params[k] = np.asarray(bound.params[name], dtype).reshape(n)
    return _Call(bound, meta, dtype.itemsize, n, len(f.states), plan.pt, state, params)


def _call_uniforms(call: _Call, plan: _Plan) -> dict:
    """The uniforms that may change from call to call (the plan holds the rest)."""
    bound, cast = call.bound, call.state.dtype.type
    u = {"u_dt": float(cast(bound.dt)), "u_t0": float(cast(bound.t0)),
         "u_steps": int(bound.steps)}
    for uniform, name in plan.scalars:
        u[uniform] = float(cast(bound.params[name]))
    return u


def _history_plan(bound: Bound) -> list[int] | None:
    if not bound.save_every:
        return None
    saved = list(range(0, bound.steps + 1, bound.save_every))
    if saved[-1] != bound.steps:
        saved.append(bound.steps)
    return saved


class _Pacer:
    """Steps per dispatch. The first dispatch gets a fixed budget of work; later ones are
    sized from the measured time so that each takes about ``TARGET_SECONDS``: long enough
    that the sync after each dispatch costs little, short enough for GPU watchdogs (which
    kill dispatches of a few seconds) and for a lively progress bar. The result never
    depends on where the integration is split: the state waits in its buffer, exactly."""

    TARGET_SECONDS = 0.2

    def __init__(self, first: int, cap: int | None):
        self.cap = cap
        self.steps = max(1, min(first, cap) if cap else first)

    def record(self, steps: int, seconds: float) -> None:
        if steps <= 0 or seconds <= 0:
            return
        want = int(steps * self.TARGET_SECONDS / seconds)
        self.steps = max(1, min(want, 4 * self.steps, self.cap or want))


def _segments(steps: int, pacer: _Pacer, history: list[int] | None):
    """(first step, end step) of each dispatch; every saved step ends one."""
    if history or steps == 0:       # a history keeps step 0: run the start alone
        yield 0, 0
    s0 = 0
    for stop in sorted(set(history or ()) | {steps}):
        while s0 < stop:
            s1 = min(s0 + pacer.steps, stop)
            yield s0, s1
            s0 = s1


# --- one range of trajectories -------------------------------------------------------------
def _run_chunk(ctx, kernel, call: _Call, plan: _Plan, chunk: _Chunk, per_call: dict, which,
               progress, history, saved, taken, deposits) -> None:
    bound, meta = call.bound, call.meta
    a, b = chunk.a, chunk.b
    count = b - a
    _upload_chunk(ctx, kernel, call, a, b)
    pacer = _Pacer(chunk.first, plan.cap)
    base = dict(chunk.uniforms, **per_call)
    ci, nc = which
    for s0, s1 in _segments(bound.steps, pacer, history):
        base.update(u_step0=s0, u_nsteps=s1 - s0,
                    u_final=int(s1 == bound.steps and (s1 > s0 or bound.steps == 0)))
        began = time.perf_counter()
        err = _dispatch(ctx, kernel, base, chunk.groups)     # returns after the work is done
        pacer.record(s1 - s0, time.perf_counter() - began)
        COUNTERS.add("dispatches")
        _raise_error(err, call)
        if history and s1 in history and (s1 > s0 or s1 == 0):
            m = history.index(s1)
            if saved[m] is None:
                saved[m] = np.zeros_like(call.state)
            saved[m][:, a:b] = _read_state(kernel, call, count)
        if progress is not None and s1 > s0 and s1 < bound.steps:
            progress((ci * bound.steps + s1) // nc, bound.steps)
    call.state[:, a:b] = _read_state(kernel, call, count)
    if meta["collapse"]:
        taken[a:b] = _read_ints(kernel, "b_steps", count)
    if meta["n_deposits"]:
        dep = _read_array(kernel, "b_dep", 2 * meta["n_deposits"] * count, call)
        _accumulate(dep.reshape(meta["n_deposits"], count, 2), meta, bound, deposits)


def _loop_cap(kernel, dev: dict) -> int | None:
    """The most steps one dispatch may run on a software renderer, else None.

    Mesa's llvmpipe (and softpipe) end every loop of an invocation, silently, once
    65535 loop iterations have run in it during one dispatch (their loop limiter): a
    longer dispatch returns a state that stopped early. Each step runs the step loop
    once plus the kernel's inner loops (serial reductions, lane loops: the lowering
    counts them; a ``vg_powi`` call runs at most 32 more)."""
    if kernel.loop_cap == "unknown":        # once per kernel: the device does not change
        from ..backends.glsl import SOFTWARE_RENDERERS
        kernel.loop_cap = None
        if SOFTWARE_RENDERERS.search(dev.get("renderer", "")):
            meta = kernel.meta
            per_step = (max(1, meta.get("loop_trips_per_step", 1))
                        + 32 * kernel.source.count("vg_powi("))
            kernel.loop_cap = max(1, (LOOP_LIMIT - 1 - meta.get("loop_trips_once", 0))
                                  // per_step)
    return kernel.loop_cap


def _accumulate(dep: np.ndarray, meta: dict, bound: Bound, outputs: dict) -> None:
    """float64 flux: deposits (flat index, value) summed in trajectory order."""
    for slot, name in enumerate(meta["deposit_outputs"]):
        idx, val = dep[slot, :, 0], dep[slot, :, 1]
        keep = idx >= 0
        np.add.at(outputs[name].reshape(-1), idx[keep].astype(np.int64), val[keep])


def _raise_error(err: np.ndarray, call: _Call) -> None:
    if int(err[0]) == NO_ERROR:
        return
    kind, what, line, column = call.meta["errors"][int(err[0])]
    span = Span(line, column) if line else None
    where = f" (line {line})" if line else ""
    if kind != "index":
        raise ZeroDivision(f"integer {what} by zero{where}", span=span)
    bound = call.bound
    role, shape = ("input", bound.inputs[what].shape) if what in bound.inputs else (
        "output", bound.output_shapes[what])
    at = ", ".join(str(int(np.int32(np.uint32(x)))) for x in err[1:1 + len(shape)])
    raise ProgramIndexError(f"index out of range: {what}[{at}] but {role} {what} has shape "
                            f"{tuple(shape)}{where}", span=span)


def _pack(call: _Call, state: np.ndarray) -> np.ndarray:
    grid = call.bound.grid_shape
    out = np.ascontiguousarray(state.T).reshape(grid + (call.n_states,))
    return out[..., 0] if call.n_states == 1 else out


# --- GL work (the caller is on the GL thread) --------------------------------------------
def _upload_shared(ctx, kernel, call: _Call, plan: _Plan) -> None:
    """Inputs, zeroed outputs and the error slot: once per run."""
    inputs = call.bound.inputs
    for buffer, name in plan.inputs:      # bind made them C-ordered arrays of the dtype
        data = inputs[name]
        kernel.ensure(ctx, buffer, data.nbytes).write(data)
    for buffer, _, size in plan.outputs:
        buf = kernel.ensure(ctx, buffer, size)
        if call.meta["n_deposits"] == 0:
            buf.write(bytes(size))
    err = kernel.ensure(ctx, "b_err", 16)
    if kernel.err_dirty:            # reset only after an error was flagged (or at first)
        err.write(NO_ERROR_BYTES)
        kernel.err_dirty = False


def _upload_chunk(ctx, kernel, call: _Call, a: int, b: int) -> None:
    count, item = b - a, call.item
    buf = kernel.ensure(ctx, "b_state", call.n_states * count * item)
    if call.bound.h0 is not None:   # else every state starts from its expression, in-shader
        buf.write(np.ascontiguousarray(call.state[:, a:b]))
    if call.meta["uses_init"]:
        kernel.ensure(ctx, "b_init", call.n_states * count * item)
    if call.meta["collapse"]:
        kernel.ensure(ctx, "b_steps", 2 * count * 4)
    if call.pt:
        p = np.ascontiguousarray(call.params[:, a:b])
        kernel.ensure(ctx, "b_params", p.nbytes).write(p)
    if call.meta["n_deposits"]:
        dep = np.full(2 * call.meta["n_deposits"] * count, -1.0, call.state.dtype)
        kernel.ensure(ctx, "b_dep", dep.nbytes).write(dep)


_bound_buffers: list = [None]     # (kernel, its buffer generation) whose buffers are bound


def _dispatch(ctx, kernel, uniforms: dict, groups) -> np.ndarray:
    prog, last, names = kernel.program, kernel.uniform_values, kernel.uniform_names
    for name, value in uniforms.items():     # only what changed since the last dispatch:
        if last.get(name) != value and name in names:       # uniforms persist in a program
            prog[name].value = value
            last[name] = value
    # Binding points are global state: bind again unless this kernel's buffers, as they are
    # now, were the last bound (a repeated call of one kernel skips it).
    if _bound_buffers[0] != (kernel, kernel.generation):
        for b in kernel.meta["buffers"]:
            kernel.buffers[b["name"]].bind_to_storage_buffer(b["binding"])
        _bound_buffers[0] = (kernel, kernel.generation)
    prog.run(*groups)
    ctx.memory_barrier()
    err = np.frombuffer(kernel.buffers["b_err"].read(16), np.uint32)
    if err[0] != NO_ERROR:
        kernel.err_dirty = True
    return err


def _read_state(kernel, call: _Call, count: int) -> np.ndarray:
    raw = kernel.buffers["b_state"].read(call.n_states * count * call.item)
    return np.frombuffer(raw, call.state.dtype).reshape(call.n_states, count)


def _read_ints(kernel, name: str, count: int) -> np.ndarray:
    return np.frombuffer(kernel.buffers[name].read(count * 4), np.int32).copy()


def _read_array(kernel, name: str, size: int, call: _Call) -> np.ndarray:
    return np.frombuffer(kernel.buffers[name].read(size * call.item), call.state.dtype)


def _read_outputs(kernel, call: _Call, plan: _Plan) -> dict:
    shapes = call.bound.output_shapes
    return {name: np.frombuffer(kernel.buffers[buffer].read(size) if size else b"",
                                call.state.dtype).reshape(shapes[name]).copy()
            for buffer, name, size in plan.outputs}
