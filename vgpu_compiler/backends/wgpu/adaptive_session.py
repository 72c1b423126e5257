"""The wgpu backend's Simulation session of an adaptive method (call/session.py).

A private copy of the field's adaptive kernel (templates/adaptive.wgsl.j2; the same
pipeline, buffers of its own) whose buffers hold the run between calls: the states,
each trajectory's t, step size and FSAL derivative (``b_ad``) and counters
(``b_cnt``). ``advance_to(u)`` dispatches, as adaptive_run.py does, with ``u_pause =
u`` and the one save time ``u``: a trajectory attempts while its t < u; an accepted
step that ends after u writes the state at u from its continuous extension
(``b_hist``, as save_at does) and is not kept, so the next advance takes the same step
again and the steps are those of one run (numpy's adaptive_session.py does the same).
A field with observers ``first`` runs the events' kernel (a Simulation takes no
``when``), which puts that step off the same way: its crossings are located when the
next advance keeps it, as numpy's are (codegen/build/adaptive.py's step_end; C:
templates/adaptive.c.j2).
The first dispatch of an advance has ``u_step0 = 2``: the save index starts again.
One chunk (runner._chunks) holds the run; a larger ensemble is a BackendError.
"""
from __future__ import annotations

import time

import numpy as np

from ... import spelling as S
from ...call.counters import COUNTERS
from ...call.session import Snapshot, pack_states
from ...errors import BackendError
from ...runtime import pacing
from ..shader import adaptive_host as host
from ..shader.adaptive import COUNTERS as ROWS, RUNNING
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import check_dtype
from . import device as dev
from . import runner as R
from .adaptive_run import _attempt_cap
from .dispatch import _dispatch, _initial, _pack_uniforms, _raise_error, _read

_ZERO = bytes(16)


class AdaptiveSession:
    def __init__(self, prepared, data):
        t = prepared.template
        if t.save_at is not None:
            raise BackendError("a Simulation takes no save_at (advance(until=...) reads "
                               "the states at any time)")
        if not R.available():
            raise BackendError(f"no wgpu device here ({dev.get().error}); "
                               f"use {S.setting('backend', 'numpy')}")
        bound = host.kernel_field(prepared.bound(data), session=True)   # (save code)
        check_dtype(bound.dtype.name, bound.field.span)
        self.bound, f, n = bound, bound.field, bound.n_trajectories
        self.n, self.ns = n, len(f.states)
        with R._lock:
            self.kernel = k = R.kernel_for(bound).private()
            chunks = R._chunks(k, bound, max(2 + self.ns, len(ROWS)))
            if len(chunks) != 1:
                raise BackendError("an adaptive Simulation on wgpu keeps its run in one "
                                   "storage buffer; this ensemble needs more (run fewer "
                                   "trajectories, or use backend='numpy' or 'cpu')")
            self.values, self.put = R._setup(k, bound)
        meta, put = k.meta, self.put
        for name, value in host.controller_uniforms(bound).items():
            put(name, value)
        put("u_nsave", 1)
        put("u_count", n)
        put("u_origin", bound.origin if meta["has_basin"] else bound.first_trajectory)
        self.cap = _attempt_cap(meta, bound)
        self.groups = R._groups(k, bound, 0, n)
        queue = dev.get().device.queue
        state = _initial(bound)
        buf = k.ensure("b_state", self.ns * n * 4)
        if state is not None:
            queue.write_buffer(buf, 0, np.ascontiguousarray(state).tobytes())
        if meta["uses_init"]:
            k.ensure("b_init", self.ns * n * 4)
        pt = [p.name for p in f.params if p.name in bound.per_trajectory]
        if pt:
            p = np.stack([np.asarray(bound.params[name], np.float32).reshape(n)
                          for name in pt])
            queue.write_buffer(k.ensure("b_params", p.nbytes), 0, p.tobytes())
        self.sizes = {"b_state": self.ns * n * 4, "b_ad": (2 + self.ns) * n * 4,
                      "b_cnt": len(ROWS) * n * 4, "b_hist": self.ns * n * 4}
        if meta["uses_init"]:
            self.sizes["b_init"] = self.ns * n * 4
        for name, size in self.sizes.items():
            k.ensure(name, size)
        k.ensure("b_save", 4)
        k.ensure("b_run", 4)
        self.out_bufs = [b for b in meta["buffers"] if b["role"] == "output"]
        self.flux_lost = False
        self.until = np.float32(bound.t0)
        self._seen = None
        self._dispatches(self.until, start=True)    # the start: F there, the first step

    # --- running -------------------------------------------------------------------------
    def advance_to(self, until: float) -> None:
        self._dispatches(np.float32(until), start=False)

    def _dispatches(self, u, start: bool) -> None:
        d = dev.get()
        device, queue, k, meta = d.device, d.device.queue, self.kernel, self.kernel.meta
        pacer = pacing.Pacer(FIRST_ATTEMPTS, self.cap, pacing.target(dev.software()))
        with R._lock:
            self.put("u_pause", float(u))
            queue.write_buffer(k.buffers["b_save"], 0, np.array([u, 0, 0, 0],
                                                               np.float32).tobytes())
            step0, running = (0 if start else 2), 1
            group = k.bind_group()
            run_buf = k.buffers["b_run"]
            while running:
                self.put("u_step0", step0)
                self.put("u_attempts", pacer.steps)
                packed = _pack_uniforms(k, self.values)
                began = time.perf_counter()
                with d.lock:
                    queue.write_buffer(run_buf, 0, _ZERO)
                    got = _dispatch(k, device, queue, packed, group, self.groups,
                                    [(k.buffers["b_err"], 16), (run_buf, 4)])
                pacer.record(pacer.steps, time.perf_counter() - began)
                COUNTERS.add("dispatches")
                _raise_error(np.frombuffer(got[0], np.uint32), meta, self.bound)
                running = int(np.frombuffer(got[1], np.uint32)[0])
                step0 = 1
        self.until = u
        self._seen = None

    # --- reading -------------------------------------------------------------------------
    def _read(self) -> dict:
        if self._seen is None:
            d, k, n, ns = dev.get(), self.kernel, self.n, self.ns
            names = list(self.sizes)
            reads = [(k.buffers[x], self.sizes[x]) for x in names]
            with R._lock, d.lock:
                got = _read(k, d.device.queue, d.device.create_command_encoder(), reads)
            raw = dict(zip(names, got))
            seen = {"state": np.frombuffer(raw["b_state"], np.float32).reshape(ns, n).copy(),
                    "ad": np.frombuffer(raw["b_ad"], np.float32).reshape(2 + ns, n).copy(),
                    "cnt": np.frombuffer(raw["b_cnt"], np.int32).reshape(len(ROWS), n).copy(),
                    "hist": np.frombuffer(raw["b_hist"], np.float32).reshape(ns, n).copy()}
            if "b_init" in raw:
                seen["init"] = np.frombuffer(raw["b_init"], np.float32).reshape(ns, n).copy()
            self._seen = seen
        return self._seen

    def _at(self, raw) -> np.ndarray:
        inside = (raw["cnt"][2] == RUNNING) & (raw["ad"][0] < self.until)
        return host.states_at(inside, raw["hist"], raw["state"], self.bound.field)

    def _grid(self, a) -> np.ndarray:
        return np.asarray(a).reshape(self.bound.grid_shape).copy()

    def states(self) -> np.ndarray:
        return pack_states(self._at(self._read()), self.bound.grid_shape)

    def times(self) -> np.ndarray:
        raw = self._read()
        return self._grid(np.where(raw["cnt"][2] == RUNNING, self.until,
                                   raw["ad"][0]).astype(np.float32))

    def status_codes(self) -> np.ndarray:
        s = self._read()["cnt"][2]
        return self._grid(np.where(s == RUNNING, 0, s).astype(np.int8))

    def steps_taken(self) -> np.ndarray:
        return self._grid(self._read()["cnt"][0])

    def steps_rejected(self) -> np.ndarray:
        return self._grid(self._read()["cnt"][1])

    def outputs(self) -> dict | None:
        """The flux, deposited as each trajectory ends: None while some still run."""
        if (self._read()["cnt"][2] == RUNNING).any() or self.flux_lost:
            return None
        d, k, out = dev.get(), self.kernel, {}
        sizes = [4 * int(np.prod(self.bound.output_shapes[b["array"]]))
                 for b in self.out_bufs]
        reads = [(k.buffers[b["name"]], size) for b, size in zip(self.out_bufs, sizes)]
        if reads:
            with R._lock, d.lock:
                got = _read(k, d.device.queue, d.device.create_command_encoder(), reads)
            for b, raw in zip(self.out_bufs, got):
                out[b["array"]] = np.frombuffer(raw, np.float32).reshape(
                    self.bound.output_shapes[b["array"]]).copy()
        return out

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self, step: int) -> Snapshot:
        raw = self._read()
        state = raw["state"]
        return host.controller_snapshot(step, state, raw.get("init", state), raw["ad"],
                                        raw["cnt"], self._at(raw), self.until,
                                        raw["cnt"][2] == RUNNING, np.float32)

    def restore(self, snap: Snapshot) -> None:
        ctl = snap.controller
        ad, cnt = host.controller_buffers(snap, self.n, np.float32)
        running = np.asarray(ctl["running"], bool)
        arrays = {"b_state": np.asarray(snap.state, np.float32), "b_ad": ad, "b_cnt": cnt,
                  "b_hist": np.asarray(ctl["at"], np.float32)}
        if "b_init" in self.sizes:
            arrays["b_init"] = np.asarray(snap.init, np.float32)
        queue, k = dev.get().device.queue, self.kernel
        with R._lock:
            for name, a in arrays.items():
                queue.write_buffer(k.buffers[name], 0, np.ascontiguousarray(a).tobytes())
        self.until = np.float32(ctl["until"])
        self.flux_lost = not running.all()
        self._seen = None

    def close(self) -> None:
        self.kernel.buffers.clear()
        self.kernel.group = None
