"""The wgpu backend's Simulation session (call/session.py): a private copy of the
field's kernel (the same pipeline, buffers of its own) whose buffers hold the run
between calls. An ``advance`` is the dispatches of steps ``[step0, step0 + nsteps)``
(the kernel runs any such range, as runner.py's segments do); nothing is uploaded
unless it changed and nothing read back until asked for. An ensemble of several
chunks (runner._chunks) keeps each chunk's arrays on the host between dispatches."""
from __future__ import annotations

import time

import numpy as np

from ... import spelling as S
from ...call.counters import COUNTERS
from ...call.interrupt import held
from ...call.session import pack_states
from ...errors import BackendError
from ...ir.step import step_program
from ...noise.normal import key_of
from ...runtime import pacing
from ...runtime.session import HostRun
from ..shader import located as _located
from . import check_dtype
from . import device as dev
from .dispatch import _read
from .runner import (FIRST_WORK, _chunks, _dispatch,
                     _groups, _loop_cap, _lock, _pack_uniforms, _raise_error, available,
                     kernel_for)


class Session(HostRun):
    def __init__(self, prepared, data):
        t = prepared.template
        if t.adaptive is not None or t.save_at is not None:
            raise BackendError("a Simulation on wgpu runs fixed-step methods only so far")
        if not available():
            raise BackendError(f"no wgpu device here ({dev.get().error}); "
                               f"use {S.setting('backend', 'numpy')}")
        bound = prepared.bound(data)
        check_dtype(bound.dtype.name, bound.field.span)
        self.bound = bound
        self.kernel = k = kernel_for(bound).private()
        meta, f, n = k.meta, bound.field, bound.n_trajectories
        self.n, self.n_states = n, len(f.states)
        self.state = np.zeros((self.n_states, n), np.float32)
        if bound.h0 is not None:
            free = np.asarray(bound.h0, np.float32).reshape(n, -1)
            self.state[[i for i, s in enumerate(f.states) if s.init is None]] = free.T
        self.init = np.zeros_like(self.state) if meta["uses_init"] else None
        self.steps2 = np.zeros((2, n), np.int32) if meta["collapse"] else None
        self.pt = [p.name for p in f.params if p.name in bound.per_trajectory]
        self.chunks = _chunks(k, bound)
        self.resident = len(self.chunks) == 1
        self.cap = _loop_cap(meta)
        self.stages = len(step_program(f.solver.tableau).stages)
        self.row = int(np.prod(bound.grid_shape[1:])) if meta["has_basin"] else 1
        self.values = [0.0] * (len(k.uniform_index) + 1)
        self._uniforms(bound)
        self.outputs_meta = [b for b in meta["buffers"] if b["role"] == "output"]
        self.out_sizes = [4 * int(np.prod(bound.output_shapes[b["array"]]))
                          for b in self.outputs_meta]
        self.dirty = {"state", "params", "inputs"}
        self.step = 0
        self.outs: dict | None = None

    def _put(self, name, value) -> None:
        u = self.kernel.uniform_index
        if name in u:
            self.values[u[name]] = value

    def _uniforms(self, bound) -> None:
        meta = self.kernel.meta
        self._put("u_dt", float(np.float32(bound.dt)))
        self._put("u_t0", float(np.float32(bound.t0)))
        for x in meta["uniforms"]:
            role = x["role"]
            if role == "key":
                self._put(x["name"], int(key_of(bound.seed)[int(x["of"])]))
            elif role == "grid":
                self._put(x["name"], int(bound.whole_shape[int(x["of"])]))
            elif role == "dim":
                self._put(x["name"], int(bound.dims[x["of"]]))
            elif role == "param":
                self._put(x["name"], float(np.float32(bound.params[x["of"]])))

    # --- running -------------------------------------------------------------------------
    def advance(self, step0: int, nsteps: int) -> None:
        """Steps [step0, step0 + nsteps), paced dispatches. Each dispatch and its count
        are done whole (a Ctrl-C is held until the dispatch's read-back ends): an
        interrupted advance of a resident run leaves ``step`` at the steps the finished
        dispatches ran; one of several chunks (each runs all its steps in turn) keeps
        the host's arrays, and ``step``, as they were before the advance."""
        with _lock:
            self._advance(step0, nsteps)

    def _advance(self, step0: int, nsteps: int) -> None:
        d = dev.get()
        device, queue, k, meta = d.device, d.device.queue, self.kernel, self.kernel.meta
        total = step0 + nsteps
        self._put("u_steps", total)
        aim = pacing.target(dev.software())
        if "inputs" in self.dirty:
            for b in meta["buffers"]:
                if b["role"] == "input":
                    arr = np.ascontiguousarray(self.bound.inputs[b["array"]], np.float32)
                    queue.write_buffer(k.ensure(b["name"], arr.nbytes), 0,
                                       arr.tobytes() or bytes(16))
        for b, size in zip(self.outputs_meta, self.out_sizes):     # flux of this advance
            queue.write_buffer(k.ensure(b["name"], size), 0, bytes(max(16, -(-size // 16) * 16)))
        err = k.ensure("b_err", 16)
        self.outs = None
        finished = []
        for a, b in self.chunks:
            count = b - a
            self._put("u_count", count)
            self._put("u_origin", a // self.row if meta["has_basin"] else a)
            upload = self.dirty if self.resident else {"state", "params"}
            self._upload(queue, a, b, upload)
            group, groups = k.bind_group(), _groups(k, self.bound, a, b)
            pacer = pacing.Pacer(pacing.first_steps(FIRST_WORK, count, self.stages, self.cap),
                                 self.cap, aim)
            for s0, s1 in pacing.segments(total, pacer, start=step0):
                self._put("u_step0", s0)
                self._put("u_nsteps", s1 - s0)
                self._put("u_final", int(s1 == total))
                reads = [(err, 16)]
                back = s1 == total and not self.resident
                if back:
                    reads += self._reads(count)
                began = time.perf_counter()
                with held(), d.lock:
                    got = _dispatch(k, device, queue, _pack_uniforms(k, self.values), group,
                                    groups, reads)
                    if self.resident:       # the device holds the run: this is its step
                        self.dirty, self.step = set(), s1
                COUNTERS.add("dispatches")
                pacer.record(s1 - s0, time.perf_counter() - began)
                _raise_error(np.frombuffer(got[0], np.uint32), meta, self.bound)
                if back:
                    finished.append((a, b, got[1:]))
        with held():            # every chunk has run: the host's arrays are the run's
            for a, b, got in finished:
                self._absorb(a, b, got)
            self.dirty = set()
            self.step = total

    def _upload(self, queue, a: int, b: int, upload) -> None:
        k, meta, count = self.kernel, self.kernel.meta, b - a
        buf = k.ensure("b_state", self.n_states * count * 4)
        if "state" in upload:
            queue.write_buffer(buf, 0, np.ascontiguousarray(self.state[:, a:b]).tobytes())
        if meta["uses_init"]:
            buf = k.ensure("b_init", self.n_states * count * 4)
            if "state" in upload:
                queue.write_buffer(buf, 0, np.ascontiguousarray(self.init[:, a:b]).tobytes())
        if meta["collapse"]:
            buf = k.ensure("b_steps", 2 * count * 4)
            if "state" in upload:
                queue.write_buffer(buf, 0, np.ascontiguousarray(self.steps2[:, a:b]).tobytes())
        if self.pt:
            p = np.stack([np.asarray(self.bound.params[name], np.float32).reshape(self.n)[a:b]
                          for name in self.pt])
            buf = k.ensure("b_params", p.nbytes)
            if "params" in upload:
                queue.write_buffer(buf, 0, p.tobytes())

    def _reads(self, count: int) -> list:
        k, meta = self.kernel, self.kernel.meta
        reads = [(k.buffers["b_state"], self.n_states * count * 4)]
        if meta["uses_init"]:
            reads.append((k.buffers["b_init"], self.n_states * count * 4))
        if meta["collapse"]:
            reads.append((k.buffers["b_steps"], 8 * count))
        return reads

    def _absorb(self, a: int, b: int, got: list) -> None:
        count, meta = b - a, self.kernel.meta
        self.state[:, a:b] = np.frombuffer(got[0], np.float32).reshape(self.n_states, count)
        i = 1
        if meta["uses_init"]:
            self.init[:, a:b] = np.frombuffer(got[i], np.float32).reshape(self.n_states, count)
            i += 1
        if meta["collapse"]:
            self.steps2[:, a:b] = np.frombuffer(got[i], np.int32).reshape(2, count)

    def _read_back(self, extra=()) -> list:
        """The one chunk's arrays (and ``extra`` buffers), read from the device."""
        d = dev.get()
        k = self.kernel
        with _lock, d.lock:
            got = _dispatch_reads(k, d.device, self._reads(self.n) + list(extra))
        self._absorb(0, self.n, got)
        return got

    def _sync(self) -> None:
        """Bring the host arrays up to the device's (one chunk, and no state from the
        host waiting to be written: new params or inputs do not change the state)."""
        if self.resident and "state" not in self.dirty:
            self._read_back()

    # --- reading -------------------------------------------------------------------------
    def states(self) -> np.ndarray:
        self._sync()
        return pack_states(self.state, self.bound.grid_shape)

    def outputs(self) -> dict:
        k, out = self.kernel, {}
        reads = [(k.buffers[b["name"]], size) for b, size in zip(self.outputs_meta,
                                                                  self.out_sizes)]
        if reads:
            d = dev.get()
            with _lock, d.lock:
                got = _dispatch_reads(k, d.device, reads)
            for b, raw in zip(self.outputs_meta, got):
                out[b["array"]] = np.frombuffer(raw, np.float32).reshape(
                    self.bound.output_shapes[b["array"]]).copy()
        return out

    # --- changing (checkpoints: runtime/session.HostRun) ------------------------------
    def _arrays(self) -> tuple:
        return self.state, self.init, self.steps2

    def _restored(self) -> None:
        self.dirty |= {"state", "params"}

    def set_data(self, data) -> None:
        bound = self.bound.prepared.bound(data)
        changed = any(not np.array_equal(bound.params[p], self.bound.params[p])
                      for p in self.pt)
        self.bound = bound
        self._uniforms(bound)
        if changed:
            self._sync()
            self.dirty |= {"params"}

    def set_input(self, name: str, array: np.ndarray) -> None:
        self.bound.inputs[name] = np.ascontiguousarray(array, np.float32)
        self.dirty |= {"inputs"}

    def alias_input(self, name, source, output) -> bool:
        return False

    def close(self) -> None:
        self.kernel.buffers.clear()
        self.kernel.group = None


def _dispatch_reads(k, device, reads: list) -> list:
    """Copy ``reads`` (buffer, bytes) into the kernel's staging buffer and map it once."""
    return _read(k, device.queue, device.create_command_encoder(), reads)


class LocatedSession(_located.LocatedSession):
    """A fixed-step Simulation of a field with an observer ``first`` (shader/located.py)
    on a private copy of the events' kernel, through adaptive_run's Target."""

    name = "wgpu"

    def _target(self, bound):
        from .adaptive_run import _Target
        if not available():
            raise BackendError(f"no wgpu device here ({dev.get().error}); "
                               f"use {S.setting('backend', 'numpy')}")
        check_dtype(bound.dtype.name, bound.field.span)
        k = getattr(self, "kernel", None)
        if k is None:
            k = self.kernel = kernel_for(bound).private()
        return _Target(k, bound)

    def _lock(self):
        return _lock

    def close(self) -> None:
        k = getattr(self, "kernel", None)
        if k is not None:
            k.buffers.clear()
            k.group = None
