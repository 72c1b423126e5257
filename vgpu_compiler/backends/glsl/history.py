"""``save_every`` histories written by the shader: the step loop stores every saved
step's state into a history buffer (``b_hist``) inside the dispatch, so a history costs
no dispatch per saved state; each dispatch's saved steps are read back after it.

The history kernel is the field's kernel built with ``history=True`` (shader/lower.py),
cached beside it under its own key (the plain kernel's key plus ``-h``). Fields with
``collapse`` keep execute.py's path (a dispatch ends at every saved step): a collapsed
basin repeats its final state in the history, which the loop, stopped, does not write.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ...call.bound import Bound, Progress, Solution, saved_steps
from ...call.counters import COUNTERS
from ...errors import BackendError
from . import REDUCTION_ENV, build, device_reduction
from . import device as gl
from ...runtime.pacing import Pacer, history_end
from .execute import (_absorb, _call_uniforms, _chunk_writes, _dispatch,
                      _on_gl_thread, _prepare, _raise_error, _read_chunk,
                      _read_outputs, _report, _shared_writes, _solution, private_if_busy)
from .kernel_cache import FieldView, GpuKernel, holding
from .plan import plan_for
from . import lookup

MAX_SLOTS = 4096            # saved steps one dispatch writes, at most


def run(bound: Bound, progress: Progress) -> Solution:
    if not lookup.available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    found = _kernel(bound)
    kernel = private_if_busy(found)
    with holding(kernel):
        sol = _run(kernel, bound, progress)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol


def _kernel(bound: Bound):
    """The field's history kernel for this call's shapes (memory, then disk, then built)."""
    env = os.environ.get(REDUCTION_ENV)
    slots = bound.prepared.slots if bound.prepared is not None else {}
    hit = slots.get("glsl_hist")
    if hit is not None and hit[0] == env and lookup.MEMORY.get(hit[1].base.key) is hit[1].base:
        COUNTERS.add("memory_hits")
        return hit[1]
    dtype, pt = bound.dtype.name, tuple(sorted(bound.per_trajectory))
    key, fid, spans = lookup._identity(bound.field, dtype, pt, env)
    key += "-h"
    mkey = lookup.memory_key(key, lookup.shape_signature(bound))
    kernel = lookup.MEMORY.get(mkey)
    if kernel is None:
        found = lookup.DISK.load(key)
        if found is not None:
            COUNTERS.add("disk_hits")
            source, meta = found
        else:
            from . import device_software      # (looked up now: tests replace it)
            source, desc = build(bound.field, dtype=dtype, per_trajectory_params=pt,
                                 reduction=device_reduction(), history=True,
                                 software=device_software())
            meta = dict(desc.meta(), spans=spans, dtype=dtype, pt=list(pt))
            lookup.DISK.store(key, source, meta)
        kernel = GpuKernel(mkey, source, meta)
        kernel.disk_key, kernel.field_id, kernel.dtype, kernel.pt = key, fid, dtype, pt
        try:
            gl.call(kernel.compile)
        except gl.NoContext as exc:
            raise BackendError(f"no OpenGL context: {exc}") from None
        except Exception as exc:        # noqa: BLE001 - a driver that rejects the shader
            lookup.DISK.evict(key)
            raise BackendError(f"the OpenGL driver rejected the history shader of field "
                               f"`{bound.field.name}`: {exc}") from None
        COUNTERS.add("compiles")
        kernel = lookup.MEMORY.put(kernel)
    else:
        COUNTERS.add("memory_hits")
    if kernel.meta.get("spans") != spans:
        kernel = FieldView(kernel, lookup._ErrorTable(bound.field, dtype, pt, kernel.meta))
    slots["glsl_hist"] = (env, kernel)
    return kernel


def _last_slot(s1: int, steps: int, every: int) -> int:
    """The history slot of the last saved step at or before step s1."""
    return -(-s1 // every) if s1 == steps else s1 // every


def _run(kernel, bound: Bound, progress) -> Solution:
    plan = plan_for(kernel, bound).at(bound)
    call = _prepare(kernel.meta, bound, plan)
    uniforms = _call_uniforms(call, plan)
    steps, every = bound.steps, bound.save_every
    saved_at = saved_steps(steps, every)
    # (saved step, state, trajectory): as the shader writes it (each state's lanes side
    # by side: the stores of neighbouring lanes are neighbours); the history is its view
    saved = np.empty((len(saved_at), call.n_states, call.n), bound.dtype)
    max_block = plan_limits_block()
    outputs: dict = {}
    if kernel.program is None:          # evicted since found: a private program
        gl.call(kernel.compile)
    for ci, chunk in enumerate(plan.chunks):
        count = chunk.b - chunk.a
        per_slot = call.n_states * count * call.item
        room = max(1, min(MAX_SLOTS, max_block // max(1, per_slot)))
        pacer = Pacer(chunk.first, plan.cap)
        s0, first = 0, True
        while True:
            if first:
                s1 = 0              # the start state, slot 0, read from b_state
            else:
                s1 = history_end(s0, steps, every, room, pacer.steps)
            hist0 = s0 // every + 1
            slots = 0 if first else _last_slot(s1, steps, every) - hist0 + 1
            u = {**uniforms, "u_step0": s0, "u_nsteps": s1 - s0, "u_every": every,
                 "u_final": int(s1 == steps)}
            end = s1 == steps
            what = (ci == 0 and first, first, slots, per_slot, end,
                    end and ci == len(plan.chunks) - 1)
            began = time.perf_counter()
            into = saved if len(plan.chunks) == 1 else None    # read straight into it
            err, start, hist, raw, out = gl.call(_on_gl_thread, _trip, kernel, call, plan,
                                                 chunk, u, what, into, hist0)
            pacer.record(s1 - s0, time.perf_counter() - began)
            COUNTERS.add("dispatches")
            _raise_error(err, call)
            if start is not None:
                saved[0, :, chunk.a:chunk.b] = start
            if hist is not None:
                saved[hist0:hist0 + slots, :, chunk.a:chunk.b] = hist.reshape(
                    slots, call.n_states, count)
            if end:
                _absorb(call, chunk, raw)
                outputs = out if out is not None else outputs
                break
            if progress is not None and s1 > s0:
                _report(kernel, progress, (ci * steps + s1) // len(plan.chunks), steps)
            s0, first = s1, False
    sol = _solution(call, call.deposits if call.deposits is not None else outputs)
    grid = bound.grid_shape
    shape = (len(saved_at),) + grid + ((call.n_states,) if call.n_states > 1 else ())
    sol.history = saved.transpose(0, 2, 1).reshape(shape)     # a view where it can be
    cast = bound.dtype.type
    sol.times = (cast(bound.t0) + np.asarray(saved_at).astype(bound.dtype) * cast(bound.dt)
                 ).astype(bound.dtype)
    return sol


def plan_limits_block() -> int:
    from .plan import _in_force
    return _in_force[0][0] or gl.device_info().get("max_block", 1 << 27)


def _trip(ctx, kernel, call, plan, chunk, uniforms: dict, what: tuple, into, hist0: int):
    shared, first, slots, per_slot, end, last = what
    writes = _shared_writes(ctx, kernel, call, plan) if shared else []
    if first:
        writes += _chunk_writes(ctx, kernel, call, chunk)
    hist = kernel.ensure(ctx, "b_hist", max(1, slots) * per_slot)
    err = _dispatch(ctx, kernel, chunk, uniforms, writes)
    count = chunk.b - chunk.a
    start = None
    if first:
        raw = kernel.buffers["b_state"].read(call.n_states * count * call.item)
        start = np.frombuffer(raw, call.bound.dtype).reshape(call.n_states, count)
    got = None
    if slots and into is not None:
        hist.read_into(into, slots * per_slot, write_offset=hist0 * per_slot)
    elif slots:
        got = np.frombuffer(hist.read(slots * per_slot), call.bound.dtype)
    raw = _read_chunk(kernel, call, chunk) if end else None
    return err, start, got, raw, _read_outputs(kernel, call, plan) if last else None
