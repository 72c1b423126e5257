"""An adaptive method's Simulation session (call/session.py), written once.

The adaptive kernel's buffers hold the run between calls: the states, each trajectory's
t, step size and FSAL derivative (``b_ad``) and counters (``b_cnt``). ``advance_to(u)``
runs the kernel, as an adaptive call does, with ``u_pause = u`` and the one save time
``u``: a trajectory attempts while its t < u; an accepted step that ends after u writes
the state at u from its continuous extension (``b_hist``, as save_at does) and is not
kept, so the next advance takes the same step again and the steps are those of one run
(numpy's adaptive_session.py does the same). A field with observers ``first`` runs
the events' kernel (a Simulation takes no ``when``), which puts that step off the same
way: its crossings are located when the next advance keeps it, as numpy's are
(codegen/build/adaptive.py's step_end; C: templates/adaptive.c.j2). The first dispatch
of an advance has ``u_step0 = 2``: the save index starts again.

- ``Session``: what every compiled backend's session reads (glsl, wgpu, cpu): the states
  at ``until``, t, status, counters, outputs once every trajectory has ended, and the
  checkpoints (``snapshot``, ``restore``); a backend gives ``_raw`` (its buffers as
  (rows, trajectories) arrays), ``_write`` (a checkpoint's arrays into them) and
  ``_outputs``.
- ``TargetSession``: the whole session over the adaptive driver's ``Target``
  (runtime/adaptive.py: ``begin``, ``trip``, ``read`` on named buffers), for glsl,
  wgpu and cpu: one chunk holds the run (a larger ensemble is a BackendError), dispatches
  paced (runtime/pacing.py) until no trajectory runs, a restored checkpoint written by
  the next dispatch.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from ..call.counters import COUNTERS
from ..call.session import Snapshot, pack_states
from ..errors import BackendError
from .adaptive import CNT_ROWS, FIRST_ATTEMPTS, RUNNING, accumulate
from .pacing import Pacer


def no_save_at(prepared) -> None:
    if prepared.template.save_at is not None:
        raise BackendError("a Simulation takes no save_at (advance(until=...) reads "
                           "the states at any time)")


class Session:
    """The reading and checkpoint half (see the module). Set by the backend: ``dtype``,
    ``field``, ``grid`` (the call's grid shape), ``n``, ``until``, ``uses_init``."""

    flux_lost = False       # a restored checkpoint's run had ended trajectories

    def _raw(self) -> dict:
        """{"state", "ad", "cnt", "hist"[, "init"]}: (rows, trajectories) arrays."""
        raise NotImplementedError

    def _write(self, arrays: dict) -> None:
        """A checkpoint's arrays (b_state, b_ad, b_cnt, b_hist[, b_init]) into the run."""
        raise NotImplementedError

    def _outputs(self) -> dict:
        raise NotImplementedError

    def _running(self, cnt: np.ndarray) -> np.ndarray:
        return cnt[2] == RUNNING

    def _at(self, raw: dict) -> np.ndarray:
        """The states at ``until``: the covering step's value where a running trajectory
        is still before it, else the state held."""
        inside = self._running(raw["cnt"]) & (raw["ad"][0] < self.until)
        return states_at(inside, raw["hist"], raw["state"], self.field)

    def _grid(self, a) -> np.ndarray:
        return np.asarray(a).reshape(self.grid).copy()

    def states(self) -> np.ndarray:
        return pack_states(self._at(self._raw()), self.grid)

    def times(self) -> np.ndarray:
        raw = self._raw()
        return self._grid(np.where(self._running(raw["cnt"]), self.until,
                                   raw["ad"][0]).astype(self.dtype))

    def status_codes(self) -> np.ndarray:
        cnt = self._raw()["cnt"]
        return self._grid(np.where(self._running(cnt), 0, cnt[2]).astype(np.int8))

    def steps_taken(self) -> np.ndarray:
        return self._grid(self._raw()["cnt"][0])

    def steps_rejected(self) -> np.ndarray:
        return self._grid(self._raw()["cnt"][1])

    def outputs(self) -> dict | None:
        """The flux, deposited as each trajectory ends: None while some still run."""
        if self._running(self._raw()["cnt"]).any() or self.flux_lost:
            return None
        return self._outputs()

    # --- checkpoints ---------------------------------------------------------------------
    def snapshot(self, step: int) -> Snapshot:
        raw = self._raw()
        state, cnt = raw["state"], raw["cnt"]
        return controller_snapshot(step, state, raw.get("init", state), raw["ad"], cnt,
                                   self._at(raw), self.until, self._running(cnt), self.dtype)

    def restore(self, snap: Snapshot) -> None:
        ctl, dtype = snap.controller, self.dtype
        ad, cnt = controller_buffers(snap, self.n, dtype)
        arrays = {"b_state": np.ascontiguousarray(snap.state, dtype), "b_ad": ad,
                  "b_cnt": cnt, "b_hist": np.ascontiguousarray(ctl["at"], dtype)}
        if self.uses_init:
            arrays["b_init"] = np.ascontiguousarray(snap.init, dtype)
        self._write(arrays)
        self.until = dtype.type(ctl["until"])
        # the flux of trajectories that ended before the checkpoint was deposited in the
        # saved session's buffers, not in these: no outputs for this run
        self.flux_lost = not np.asarray(ctl["running"]).all()


class TargetSession(Session):
    """A session on a backend's adaptive ``Target`` (runtime/adaptive.py) of a private
    kernel; ``lock``: held around every trip (wgpu's runner lock); ``where``: the words
    of the one-chunk error (the backend, what its storage is called)."""

    def __init__(self, target, bound, where: tuple[str, str], lock=None):
        if len(target.chunks) != 1:
            name, block = where
            raise BackendError(f"an adaptive Simulation on {name} keeps its run in one "
                               f"{block}; this ensemble needs more (run fewer trajectories, "
                               f"or use backend='numpy' or 'cpu')")
        self.target, self.lock = target, lock or contextlib.nullcontext()
        L = target.layout
        self.dtype, self.field, self.grid = L.dtype, bound.field, bound.grid_shape
        self.n, self.ns, self.uses_init = L.n, L.n_states, bool(target.kernel.meta["uses_init"])
        item = L.dtype.itemsize
        self.rows = {"state": (self.ns, L.dtype), "ad": (2 + self.ns, L.dtype),
                     "cnt": (L.counters, np.int32), "hist": (self.ns, L.dtype)}
        if self.uses_init:
            self.rows["init"] = (self.ns, L.dtype)
        self.sizes = {f"b_{key}": r * self.n * np.dtype(dt).itemsize
                      for key, (r, dt) in self.rows.items()}
        self._pending, self._seen = [], None
        self.until = self.dtype.type(bound.t0)
        with self.lock:
            target.begin(0, {"b_ad": self.sizes["b_ad"], "b_cnt": self.sizes["b_cnt"],
                             "b_hist": self.sizes["b_hist"], "b_save": item}, [])
        self._dispatches(self.until, start=True)    # the start: F there, the first step

    def advance_to(self, until: float) -> None:
        self._dispatches(self.dtype.type(until), start=False)

    def _dispatches(self, u, start: bool) -> None:
        t = self.target
        pacer = Pacer(FIRST_ATTEMPTS, t.cap, t.aim)
        step0, running = (0 if start else 2), 1
        with self.lock:
            while running:
                writes = [("b_save", np.array([u], self.dtype).tobytes())] if step0 != 1 else []
                writes += self._pending + [("b_run", bytes(4))]
                self._pending = []      # (once, even if this trip is interrupted)
                uniforms = {"u_nsave": 1, "u_step0": step0, "u_attempts": pacer.steps,
                            "u_pause": float(u)}
                began = time.perf_counter()
                got = t.trip(uniforms, {}, writes, [("b_run", 4)])
                pacer.record(uniforms["u_attempts"], time.perf_counter() - began)
                COUNTERS.add("dispatches")
                t.check(got[0])
                running = int(np.frombuffer(got[1], np.uint32)[0])
                step0 = 1
        self.until = u
        self._seen = None

    def _raw(self) -> dict:
        if self._seen is None:
            with self.lock:
                got = self.target.read(list(self.sizes.items()))
            self._seen = {key: np.frombuffer(raw, dt).reshape(r, self.n).copy()
                          for (key, (r, dt)), raw in zip(self.rows.items(), got)}
        return self._seen

    def _write(self, arrays: dict) -> None:
        """Written by the next dispatch; until then the reads are the checkpoint's."""
        self._pending = [(name, np.ascontiguousarray(a).tobytes())
                         for name, a in arrays.items()]
        self._seen = {name[2:]: a.copy() for name, a in arrays.items()}

    def _outputs(self) -> dict:
        L, t, dtype = self.target.layout, self.target, self.dtype
        shapes = L.output_shapes
        if L.deposit_outputs:       # float64 flux: summed on the host from the deposits
            out = {name: np.zeros(shape, dtype) for name, shape in shapes.items()}
            nd = len(L.deposit_outputs)
            with self.lock:
                dep = t.read([("b_dep", 2 * nd * self.n * dtype.itemsize)])[0]
            accumulate(np.frombuffer(dep, dtype).reshape(nd, self.n, 2), L.deposit_outputs,
                       out)
            return out
        with self.lock:
            got = t.read([(buffer, size) for buffer, _, size in t.outputs]) if t.outputs else []
        return {name: np.frombuffer(raw, dtype).reshape(shapes[name]).copy()
                for (_, name, _), raw in zip(t.outputs, got)}


# --- the checkpoint's arrays ------------------------------------------------------------
def states_at(inside: np.ndarray, hist: np.ndarray, state: np.ndarray, field) -> np.ndarray:
    """An adaptive Simulation's states at its ``until`` (n_states, N): the covering step's
    continuous extension where ``inside`` (a running trajectory still before it), else
    the state held; a step-end observer's row (peak, trough: ir/observers.py) is the value
    held (the steps kept so far; the extension of a constant is it only to rounding)."""
    at = np.where(inside, hist, state)
    rows = [r.index for r in field.observer_rules]
    if rows:
        at[rows] = state[rows]
    return at


def controller_snapshot(step: int, state: np.ndarray, init: np.ndarray, ad: np.ndarray,
                        cnt: np.ndarray, at: np.ndarray, until, running: np.ndarray,
                        dtype) -> Snapshot:
    """The checkpoint of an adaptive Simulation on a compiled backend, from its buffers
    (rows, trajectories) each: ``ad`` the b_ad rows (t, dt, then the FSAL derivative),
    ``cnt`` the b_cnt rows (adaptive.CNT_ROWS), ``at`` the states at ``until``;
    ``running``: the trajectories that still step."""
    ctl = {"until": np.asarray(until, dtype), "t": ad[0].copy(), "dt": ad[1].copy(),
           "k0": ad[2:].copy(), "at": at, "taken": cnt[0].copy(),
           "rejected": cnt[1].copy(), "status": np.where(running, 0, cnt[2]).astype(np.int8),
           "again": cnt[3] != 0, "running": running}
    return Snapshot(step, state.copy(), init.copy(), cnt[0].copy(), ~running, ctl)


def controller_buffers(snap: Snapshot, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(b_ad, b_cnt) of a checkpoint's controller, as the adaptive kernels hold them."""
    ctl = snap.controller
    if ctl is None:
        raise BackendError("the checkpoint holds no adaptive controller")
    ad = np.concatenate([np.asarray(ctl["t"], dtype)[None], np.asarray(ctl["dt"], dtype)[None],
                         np.asarray(ctl["k0"], dtype)]).astype(dtype)
    cnt = np.zeros((len(CNT_ROWS), n), np.int32)
    cnt[0], cnt[1] = ctl["taken"], ctl["rejected"]
    cnt[2] = np.where(np.asarray(ctl["running"], bool), RUNNING, ctl["status"])
    cnt[3] = np.asarray(ctl["again"], bool)
    return ad, cnt
