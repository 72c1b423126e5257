"""The GLSL backend's Simulation session of an adaptive method (call/session.py).

A private copy of the field's adaptive kernel (templates/adaptive.glsl.j2) whose
buffers hold the run between calls: the states, each trajectory's t, step size and
FSAL derivative (``b_ad``) and counters (``b_cnt``). ``advance_to(u)`` dispatches,
as adaptive_run.py does, with ``u_pause = u`` and the one save time ``u``: a
trajectory attempts while its t < u; an accepted step that ends after u writes the
state at u from its continuous extension (``b_hist``, as save_at does) and is not
kept, so the next advance takes the same step again and the steps are those of one
run (the numpy reference's adaptive_session.py does the same; with observers
``first``, the events' kernel puts that step off too, before it locates them:
codegen/build/adaptive.py's step_end). The first dispatch of an advance has
``u_step0 = 2``: the save index starts again. One storage block holds
the run (one chunk of plan.py); a larger ensemble is a BackendError.
"""
from __future__ import annotations

import time
import weakref

import numpy as np

from ...call.counters import COUNTERS
from ...call.session import Snapshot, pack_states
from ...errors import BackendError
from ..shader import adaptive_host as host
from ..shader.adaptive import COUNTERS as ROWS, RUNNING
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import device as gl
from . import lookup
from .adaptive_run import _attempt_cap
from .execute import (_accumulate, _call_uniforms, _chunk_writes, _dispatch, _forget,
                      _prepare, _raise_error, _read_chunk, _read_outputs, _shared_writes)
from ...runtime.pacing import Pacer
from .plan import plan_for
from .session import _release, private_kernel


class AdaptiveSession:
    def __init__(self, prepared, data):
        t = prepared.template
        if t.save_at is not None:
            raise BackendError("a Simulation takes no save_at (advance(until=...) reads "
                               "the states at any time)")
        if not lookup.available():
            raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
        bound = host.kernel_field(prepared.bound(data), session=True)   # (save code)
        found = lookup.kernel_of_call(bound)
        k = private_kernel(found)
        self.kernel = k
        self._free = weakref.finalize(self, _release, k)
        self._free.atexit = False
        self.plan = plan_for(k, bound).at(bound)
        if len(self.plan.chunks) != 1:
            raise BackendError("an adaptive Simulation on glsl keeps its run in one storage "
                               "block; this ensemble needs more (run fewer trajectories, or "
                               "use backend='numpy' or 'cpu')")
        self.chunk = self.plan.chunks[0]
        self.call = call = _prepare(k.meta, bound, self.plan)
        self.uniforms = {**_call_uniforms(call, self.plan), **host.controller_uniforms(bound),
                         "u_nsave": 1}
        self.cap = _attempt_cap(k, bound)
        self.dtype, self.field = bound.dtype, bound.field
        self._seen = None
        self.until = self.dtype.type(bound.t0)
        # the start: F there, the first step, no attempt (paused at t0)
        self._dispatches(self.until, start=True)

    # --- running -------------------------------------------------------------------------
    def advance_to(self, until: float) -> None:
        self._dispatches(self.dtype.type(until), start=False)

    def _dispatches(self, u, start: bool, restored: bool = False) -> None:
        pacer = Pacer(FIRST_ATTEMPTS, self.cap)
        step0 = 0 if start else 2
        running = 1
        while running:
            uniforms = {**self.uniforms, "u_step0": step0, "u_attempts": pacer.steps,
                        "u_pause": float(u)}
            began = time.perf_counter()
            err, running = gl.call(self._trip, uniforms, u, step0 != 1, start)
            pacer.record(uniforms["u_attempts"], time.perf_counter() - began)
            COUNTERS.add("dispatches")
            _raise_error(err, self.call)
            start, step0 = False, 1
        self.until = u
        self._seen = None

    def _trip(self, ctx, uniforms: dict, u, first: bool, start: bool):
        k, call, chunk = self.kernel, self.call, self.chunk
        count, item = chunk.b - chunk.a, call.item
        try:
            writes = []
            if start:
                writes += _shared_writes(ctx, k, call, self.plan)
                writes += _chunk_writes(ctx, k, call, chunk)
                k.ensure(ctx, "b_ad", (2 + call.n_states) * count * item)
                k.ensure(ctx, "b_cnt", len(ROWS) * count * 4)
                k.ensure(ctx, "b_hist", call.n_states * count * item)
            if first:
                save = k.ensure(ctx, "b_save", item)
                writes.append((save, np.array([u], self.dtype)))
            writes += self._pending(ctx)
            run = k.ensure(ctx, "b_run", 4)
            writes.append((run, np.zeros(4, np.uint32).tobytes()))
            err = _dispatch(ctx, k, chunk, uniforms, writes)
            running = int(np.frombuffer(k.buffers["b_run"].read(4), np.uint32)[0])
            return err, running
        except BaseException:       # stopped part way: trust no cached GL state
            _forget(k)
            raise

    def _pending(self, ctx) -> list:
        """A restored checkpoint's buffers, written before the next dispatch."""
        pending, self._restored = getattr(self, "_restored", None), None
        if not pending:
            return []
        return [(self.kernel.ensure(ctx, name, data.nbytes), data)
                for name, data in pending.items()]

    # --- reading -------------------------------------------------------------------------
    def _read(self) -> dict:
        if self._seen is None:
            self._seen = gl.call(self._read_back)
        return self._seen

    def _read_back(self, ctx) -> dict:
        k, call, chunk = self.kernel, self.call, self.chunk
        n, item, dtype, ns = chunk.b - chunk.a, call.item, self.dtype, call.n_states
        raw = {key: np.array(v) for key, v in _read_chunk(k, call, chunk).items()}
        raw["state"] = raw["state"].reshape(ns, n)
        raw["ad"] = np.frombuffer(k.buffers["b_ad"].read((2 + ns) * n * item),
                                  dtype).reshape(2 + ns, n).copy()
        raw["cnt"] = np.frombuffer(k.buffers["b_cnt"].read(len(ROWS) * n * 4),
                                   np.int32).reshape(len(ROWS), n).copy()
        raw["hist"] = np.frombuffer(k.buffers["b_hist"].read(ns * n * item),
                                    dtype).reshape(ns, n).copy()
        if call.meta["uses_init"]:
            raw["init"] = np.frombuffer(k.buffers["b_init"].read(ns * n * item),
                                        dtype).reshape(ns, n).copy()
        if not (raw["cnt"][2] == RUNNING).any():
            raw["outputs"] = _read_outputs(k, call, self.plan)
        return raw

    def _at(self, raw) -> np.ndarray:
        """The states at ``until``: the covering step's value where a running trajectory
        is still before it, else the state held."""
        inside = (raw["cnt"][2] == RUNNING) & (raw["ad"][0] < self.until)
        return host.states_at(inside, raw["hist"], raw["state"], self.field)

    def states(self) -> np.ndarray:
        return pack_states(self._at(self._read()), self.call.bound.grid_shape)

    def times(self) -> np.ndarray:
        raw = self._read()
        t = np.where(raw["cnt"][2] == RUNNING, self.until, raw["ad"][0]).astype(self.dtype)
        return t.reshape(self.call.bound.grid_shape)

    def status_codes(self) -> np.ndarray:
        s = self._read()["cnt"][2]
        return np.where(s == RUNNING, 0, s).astype(np.int8).reshape(self.call.bound.grid_shape)

    def steps_taken(self) -> np.ndarray:
        return self._read()["cnt"][0].reshape(self.call.bound.grid_shape).copy()

    def steps_rejected(self) -> np.ndarray:
        return self._read()["cnt"][1].reshape(self.call.bound.grid_shape).copy()

    def outputs(self) -> dict | None:
        """The flux, deposited as each trajectory ends: None while some still run."""
        raw, call = self._read(), self.call
        if "outputs" not in raw or getattr(self, "_flux_lost", False):
            return None
        if call.deposits is None:
            return raw["outputs"]
        out = {name: np.zeros(shape, self.dtype)
               for name, shape in call.bound.output_shapes.items()}
        if "dep" in raw:
            n = self.chunk.b - self.chunk.a
            _accumulate(raw["dep"].reshape(call.meta["n_deposits"], n, 2), call.meta, out)
        return out

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self, step: int) -> Snapshot:
        raw = self._read()
        state = raw["state"]
        return host.controller_snapshot(step, state, raw.get("init", state), raw["ad"],
                                        raw["cnt"], self._at(raw), self.until,
                                        raw["cnt"][2] == RUNNING, self.dtype)

    def restore(self, snap: Snapshot) -> None:
        ctl, dtype = snap.controller, self.dtype
        ad, cnt = host.controller_buffers(snap, self.call.n, dtype)
        pending = {"b_state": np.ascontiguousarray(snap.state, dtype),
                   "b_ad": np.ascontiguousarray(ad), "b_cnt": cnt}
        if self.call.meta["uses_init"]:
            pending["b_init"] = np.ascontiguousarray(snap.init, dtype)
        self._restored = pending
        self.until = dtype.type(ctl["until"])
        # written at the next dispatch; until then the reads are the snapshot's
        self._seen = {"state": np.array(snap.state, dtype), "ad": ad, "cnt": cnt,
                      "hist": np.array(ctl["at"], dtype),
                      **({"init": pending["b_init"]} if "b_init" in pending else {})}
        # the flux of trajectories that ended before the checkpoint was deposited in the
        # saved session's buffers, not in these: no outputs for this run
        self._flux_lost = not np.asarray(ctl["running"]).all()

    def close(self) -> None:
        self._free()
