"""``save_every`` histories written by the WGSL shader (as glsl/history.py does for GLSL):
the step loop stores every saved step's state into ``b_hist`` inside the dispatch; each
dispatch's saved states are copied into the staging buffer with the dispatch's own
read-backs (one map per dispatch). Fields with ``collapse`` keep runner.py's path (a
dispatch ends at every saved step: a collapsed basin repeats its final state, which the
stopped loop does not write)."""
from __future__ import annotations

import hashlib
import time

import numpy as np

from ...call.bound import Bound, Solution, saved_steps
from ...call.counters import COUNTERS
from ...errors import BackendError
from ...ir.step import step_program
from ...noise.normal import key_of
from ...runtime import pacing
from ...runtime.pacing import history_end
from . import build, check_dtype
from . import device as dev
from .disk_cache import DISK
from .runner import (FIRST_WORK, MEMORY, Kernel,
                     _chunks, _dispatch, _groups, _here, _lock, _loop_cap, _pack,
                     _pack_uniforms, _raise_error, _report, _states, field_id, identity,
                     reduction)

MAX_SLOTS = 4096            # saved steps one dispatch writes, at most


def _kernel(bound: Bound) -> Kernel:
    dtype = bound.dtype.name
    check_dtype(dtype, bound.field.span)
    pt = tuple(sorted(bound.per_trajectory))
    red = reduction()
    key = identity(bound.field, dtype, pt, red) + "-h"
    shapes = (bound.grid_shape, tuple(sorted(bound.dims.items())),
              tuple((k, v.shape) for k, v in bound.inputs.items()),
              tuple(bound.output_shapes.items()))
    mkey = hashlib.sha256(f"{key}\x00{shapes!r}".encode()).hexdigest()[:40]
    kernel = MEMORY.get(mkey)
    if kernel is not None:
        COUNTERS.add("memory_hits")
        return kernel
    found = DISK.load(key)
    if found is not None:
        COUNTERS.add("disk_hits")
        source, meta = found
    else:
        source, printed = build(bound.field, dtype=dtype, per_trajectory_params=pt,
                                reduction=red, history=True)
        k = printed.kernel
        shared = 4 * (k.basin_size * (len(k.coupled_arrays) + len(k.reductions))
                      + k.results) if k.has_basin else 0
        meta = dict(printed.meta(), dtype=dtype, pt=list(pt), workgroup_bytes=shared)
        DISK.store(key, source, meta)
    with dev.get().lock:
        try:
            kernel = Kernel(mkey, source, meta)
        except Exception as exc:        # noqa: BLE001 - naga refused the WGSL: a bug
            DISK.evict(key)
            raise BackendError(f"wgpu rejected the history WGSL of field "
                               f"`{bound.field.name}`: {exc}") from None
    kernel.field_id, kernel.dtype, kernel.pt = field_id(bound.field), dtype, pt
    COUNTERS.add("compiles")
    MEMORY.put(mkey, kernel)
    return kernel


def run(bound: Bound, progress) -> Solution:
    if not dev.available():
        raise BackendError(f"no wgpu device here ({dev.get().error})")
    kernel = _kernel(bound)
    if _here.inside(kernel):                        # inside a progress callback of its run
        kernel = kernel.private()
    with _lock:
        sol = _run(kernel, bound, progress)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol


def _uniforms(kernel: Kernel, bound: Bound) -> tuple[list, callable]:
    values = [0.0] * (len(kernel.uniform_index) + 1)
    u = kernel.uniform_index

    def put(name, value):
        if name in u:
            values[u[name]] = value

    put("u_dt", float(np.float32(bound.dt)))
    put("u_t0", float(np.float32(bound.t0)))
    put("u_steps", int(bound.steps))
    put("u_every", int(bound.save_every))
    for x in kernel.meta["uniforms"]:
        if x["role"] == "key":
            put(x["name"], int(key_of(bound.seed)[int(x["of"])]))
        elif x["role"] == "grid":
            put(x["name"], int(bound.whole_shape[int(x["of"])]))
        elif x["role"] == "dim":
            put(x["name"], int(bound.dims[x["of"]]))
        elif x["role"] == "param":
            put(x["name"], float(np.float32(bound.params[x["of"]])))
    return values, put


def _run(kernel: Kernel, bound: Bound, progress) -> Solution:
    run = _HistoryRun(kernel, bound, progress)
    for ci, (a, b) in enumerate(run.chunks):
        run.chunk(ci, a, b)
    return run.solution()


class _HistoryRun:
    """One call's host arrays (states, the history, outputs) and its dispatches."""

    def __init__(self, kernel: Kernel, bound: Bound, progress):
        self.kernel, self.bound, self.progress = kernel, bound, progress
        self.d = dev.get()
        meta, f, n = kernel.meta, bound.field, bound.n_trajectories
        self.n, self.n_states = n, len(f.states)
        self.steps, self.every = bound.steps, bound.save_every
        self.state = np.zeros((self.n_states, n), np.float32)
        if bound.h0 is not None:
            free = np.asarray(bound.h0, np.float32).reshape(n, -1)
            self.state[[k for k, s in enumerate(f.states) if s.init is None]] = free.T
        self.pt = [p.name for p in f.params if p.name in bound.per_trajectory]
        self.saved_at = saved_steps(self.steps, self.every)
        self.saved = np.empty((len(self.saved_at), self.n_states, n), np.float32)
        self.outputs: dict = {}
        self.out_meta = [b for b in meta["buffers"] if b["role"] == "output"]
        self.out_sizes = [4 * int(np.prod(bound.output_shapes[b["array"]]))
                          for b in self.out_meta]
        queue = self.d.device.queue
        for b in meta["buffers"]:
            if b["role"] == "input":
                arr = np.ascontiguousarray(bound.inputs[b["array"]], np.float32)
                queue.write_buffer(kernel.ensure(b["name"], arr.nbytes), 0,
                                   arr.tobytes() or bytes(16))
        for b, size in zip(self.out_meta, self.out_sizes):
            queue.write_buffer(kernel.ensure(b["name"], size), 0,
                               bytes(max(16, -(-size // 16) * 16)))
        self.err = kernel.ensure("b_err", 16)
        self.values, self.put = _uniforms(kernel, bound)
        self.cap = _loop_cap(meta)
        self.stages = len(step_program(f.solver.tableau).stages)
        self.aim = pacing.target(dev.software())
        self.row = int(np.prod(bound.grid_shape[1:])) if meta["has_basin"] else 1
        self.most = self.d.limits.get("max_storage_buffer_binding_size", 1 << 27)
        self.chunks = _chunks(kernel, bound)

    def chunk(self, ci: int, a: int, b: int) -> None:
        """Every dispatch of trajectories [a, b): the start, then paced segments, each
        ending where the history buffer is full."""
        k, bound, meta, put = self.kernel, self.bound, self.kernel.meta, self.put
        count = b - a
        per_slot = self.n_states * count * 4
        room = max(1, min(MAX_SLOTS, self.most // per_slot))
        put("u_count", count)
        put("u_origin", a // self.row + bound.origin if meta["has_basin"]
            else a + bound.first_trajectory)
        queue = self.d.device.queue
        buf = k.ensure("b_state", self.n_states * count * 4)
        queue.write_buffer(buf, 0, np.ascontiguousarray(self.state[:, a:b]).tobytes())
        if meta["uses_init"]:
            k.ensure("b_init", self.n_states * count * 4)
        if self.pt:
            p = np.stack([np.asarray(bound.params[name], np.float32).reshape(self.n)[a:b]
                          for name in self.pt])
            queue.write_buffer(k.ensure("b_params", p.nbytes), 0, p.tobytes())
        self.hist = k.ensure("b_hist", room * per_slot)
        self.group, self.groups = k.bind_group(), _groups(k, bound, a, b)
        pacer = pacing.Pacer(pacing.first_steps(FIRST_WORK, count, self.stages, self.cap),
                             self.cap, self.aim)
        s0, start = 0, True
        while True:
            s1 = 0 if start else history_end(s0, self.steps, self.every, room, pacer.steps)
            began = time.perf_counter()
            self._segment(ci, a, b, s0, s1, start)
            pacer.record(s1 - s0, time.perf_counter() - began)
            if s1 == self.steps:
                return
            if self.progress is not None and s1 > s0:
                _report(k, self.progress, (ci * self.steps + s1) // len(self.chunks),
                        self.steps)
            s0, start = s1, False

    def _segment(self, ci: int, a: int, b: int, s0: int, s1: int, start: bool) -> None:
        """One dispatch of steps [s0, s1) of trajectories [a, b), and what it reads back:
        the start state, the saved steps, at the end the states and outputs."""
        k, steps, every, count = self.kernel, self.steps, self.every, b - a
        hist0 = s0 // every + 1
        last = -(-s1 // every) if s1 == steps else s1 // every
        slots = 0 if start else last - hist0 + 1
        self.put("u_step0", s0)
        self.put("u_nsteps", s1 - s0)
        self.put("u_final", int(s1 == steps))
        end, outputs = s1 == steps, s1 == steps and ci == len(self.chunks) - 1
        reads = [(self.err, 16)]
        if start or end:
            reads.append((k.buffers["b_state"], self.n_states * count * 4))
        if slots:
            reads.append((self.hist, slots * self.n_states * count * 4))
        if outputs:
            reads += [(k.buffers[x["name"]], size)
                      for x, size in zip(self.out_meta, self.out_sizes)]
        with self.d.lock:
            got = _dispatch(k, self.d.device, self.d.device.queue,
                            _pack_uniforms(k, self.values), self.group, self.groups, reads)
        COUNTERS.add("dispatches")
        _raise_error(np.frombuffer(got[0], np.uint32), k.meta, self.bound)
        got = got[1:]
        if start or end:
            state = _states(got.pop(0), self.n_states, count)
            if start:
                self.saved[0, :, a:b] = state
            if end:
                self.state[:, a:b] = state
        if slots:
            self.saved[hist0:hist0 + slots, :, a:b] = np.frombuffer(
                got.pop(0), np.float32).reshape(slots, self.n_states, count)
        if outputs:
            for x, raw in zip(self.out_meta, got):
                self.outputs[x["array"]] = np.frombuffer(raw, np.float32).reshape(
                    self.bound.output_shapes[x["array"]]).copy()

    def solution(self) -> Solution:
        bound, n_states = self.bound, self.n_states
        sol = Solution(states=_pack(self.state, bound), outputs=self.outputs,
                       steps_taken=np.full(bound.grid_shape, self.steps, np.int32))
        shape = (len(self.saved_at),) + bound.grid_shape + ((n_states,) if n_states > 1
                                                             else ())
        sol.history = self.saved.transpose(0, 2, 1).reshape(shape)
        sol.times = (np.float32(bound.t0) + np.asarray(self.saved_at).astype(np.float32)
                     * np.float32(bound.dt)).astype(np.float32)
        return sol
