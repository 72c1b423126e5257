"""A fixed-step Simulation of a field with an observer ``first`` on GLSL and WGSL (glsl/
and wgpu/session.py open it): runtime/located.py's rule, over the events' kernel
(templates/adaptive.*.j2, the field's dense variant: the kernel ``vgpu.solve`` runs) and
runtime/adaptive.py's ``Target`` of the backend, on a private copy of the kernel whose
buffers hold the run between calls (one chunk; a larger ensemble is a BackendError).

An advance of steps ``[step0, step0 + nsteps)`` sets ``u_steps = step0 + nsteps`` and
dispatches until no trajectory runs; its first dispatch (step0 > 0) has ``u_step0 = 2``:
the kernel sets every trajectory running again (ended at once where it is at u_steps:
an advance of no step deposits only the flux on the state), its t, step and F at the
state (``b_ad``: the next step's stage 0) as the last dispatch left them, so the pieces
take the steps of one run bit for bit; where the session is ``fresh`` (no F carried)
the first dispatch has ``u_step0 = 3``: F computed at the state first."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from ...call.interrupt import held
from ...call.session import Snapshot, pack_states
from ...errors import BackendError
from ...ir import controller as C
from ...runtime.adaptive import accumulate
from ...runtime.located import Located
from ...runtime.pacing import Pacer
from . import adaptive_host as host

RESUME, FRESH = 2, 3        # u_step0 of an advance's first dispatch (0: from the start)
_ZERO4 = bytes(4)


class LocatedSession(Located):
    """The session over a backend's Target. A backend gives ``_target(bound)`` (its
    Target on the session's private kernel), ``_lock()`` and ``close()``."""

    name = "shader"

    def __init__(self, prepared, data):
        self.prepared = prepared
        self._seen, self.pending = None, []
        self._bind(host.kernel_field(prepared.bound(data)))
        L = self.target.layout
        if len(self.target.chunks) != 1:
            self.close()
            raise BackendError(f"a Simulation with the observer first on {self.name} keeps "
                               f"its run in one storage block; this ensemble needs more (run "
                               f"fewer trajectories, or use backend='numpy' or 'cpu')")
        self.n, self.ns, self.dtype = L.n, L.n_states, L.dtype

    def _bind(self, bound) -> None:
        """The Target of ``bound`` (its inputs, params, zeroed outputs written by the next
        trip, the buffers of an adaptive run made as runtime/adaptive.py makes them)."""
        with self._lock():
            self.bound, self.target = bound, self._target(bound)
            L, item = self.target.layout, bound.dtype.itemsize
            n_save = len(L.times)
            self.sizes = {"b_ad": (2 + L.n_states) * L.n * item, "b_cnt": L.counters * L.n * 4,
                          "b_hist": n_save * L.n_states * L.n * item, "b_save": n_save * item}
            self.target.begin(0, self.sizes, [])

    def _open(self, data) -> None:
        self._bind(host.kernel_field(self.prepared.bound(data)))

    def _input(self, name: str, array: np.ndarray) -> None:
        inputs = {**self.bound.inputs, name: np.ascontiguousarray(array, self.dtype)}
        self._bind(dataclasses.replace(self.bound, inputs=inputs))

    def _carries(self) -> bool:
        return True

    # --- running -------------------------------------------------------------------------
    def _run(self, step0: int, total: int) -> None:
        L = self.target.layout
        writes = self.pending + [(buffer, bytes(size)) for buffer, _, size in
                                 self.target.outputs]     # (the flux of this advance)
        if L.deposit_outputs:       # float64 flux: the deposit slots empty again
            writes.append(("b_dep", np.full(2 * len(L.deposit_outputs) * self.n, -1.0,
                                            self.dtype).tobytes()))
        mode = 0 if step0 == 0 else FRESH if self.fresh else RESUME
        with self._lock():
            pacer = Pacer(self.target.first(0), self.target.cap, self.target.aim)
            running = 1
            while running:
                with held():
                    got = self.target.trip({"u_step0": mode, "u_attempts": pacer.steps,
                                            "u_logcap": 0, "u_steps": total}, {},
                                           writes + [("b_run", _ZERO4)], [("b_run", 4)])
                    self.target.check(got[0])
                    running = int(np.frombuffer(got[1], np.uint32)[0])
                    mode, writes, self.pending, self.held = 1, [], [], True
                    self._seen = None
        self._seen = None

    # --- reading -------------------------------------------------------------------------
    def _read(self):
        if self._seen is None:
            n, ns, item = self.n, self.ns, self.dtype.itemsize
            names = ["b_state", "b_ad", "b_cnt"] + (["b_init"] if self._uses_init else [])
            sizes = {"b_state": ns * n * item, "b_ad": (2 + ns) * n * item,
                     "b_cnt": self.target.layout.counters * n * 4, "b_init": ns * n * item}
            with self._lock():
                got = self.target.read([(x, sizes[x]) for x in names])
            raw = {x: np.frombuffer(g, np.int32 if x == "b_cnt" else self.dtype).copy()
                   for x, g in zip(names, got)}
            self._seen = {"state": raw["b_state"].reshape(ns, n),
                          "ad": raw["b_ad"].reshape(2 + ns, n), "taken": raw["b_cnt"][:n]}
            if "b_init" in raw:
                self._seen["init"] = raw["b_init"].reshape(ns, n)
        seen = self._seen
        return seen["state"], seen.get("init"), seen["ad"][2:]

    def _counts(self):
        self._read()
        return self._seen["taken"], self._seen["ad"][1] == 0

    @property
    def _uses_init(self) -> bool:
        return bool(self.target.kernel.meta["uses_init"])

    def states(self) -> np.ndarray:
        return pack_states(self._read()[0], self.bound.grid_shape)

    def outputs(self) -> dict:
        L, t = self.target.layout, self.target
        if L.deposit_outputs:
            nd = len(L.deposit_outputs)
            with self._lock():
                raw = t.read([("b_dep", 2 * nd * self.n * self.dtype.itemsize)])[0]
            out = {k: np.zeros(s, self.dtype) for k, s in L.output_shapes.items()}
            accumulate(np.frombuffer(raw, self.dtype).reshape(nd, self.n, 2),
                       L.deposit_outputs, out)
            return out
        with self._lock():
            got = t.read([(buffer, size) for buffer, _, size in t.outputs])
        return {name: np.frombuffer(raw, self.dtype).reshape(L.output_shapes[name]).copy()
                for (_, name, _), raw in zip(t.outputs, got)}

    # --- changing ------------------------------------------------------------------------
    def _write(self, snap: Snapshot) -> None:
        """The buffers of a run that ended at ``snap.step`` (written by the next
        dispatch; read until then from the snapshot): its state, start values, t, step,
        F at the state (the snapshot's slope; without one the next advance computes it),
        the counters of steps that all reached u_steps."""
        taken = np.broadcast_to(snap.taken if self.bound.field.collapse is not None
                                else snap.step, self.n)
        ad = np.zeros((2 + self.ns, self.n), self.dtype)
        ad[0], ad[1] = self.times(taken, snap.done)
        if not self.fresh:
            ad[2:] = snap.slope
        cnt = np.zeros((self.target.layout.counters, self.n), np.int32)
        cnt[0], cnt[2] = taken, C.REACHED_END
        state = np.ascontiguousarray(snap.state, self.dtype)
        self.pending = [("b_state", state.tobytes()), ("b_ad", ad.tobytes()),
                        ("b_cnt", cnt.tobytes())]
        self._seen = {"state": state, "ad": ad, "taken": cnt[0].copy()}
        if self._uses_init:
            init = np.ascontiguousarray(snap.init, self.dtype)
            self.pending.append(("b_init", init.tobytes()))
            self._seen["init"] = init

    # --- the backend's part ----------------------------------------------------------------
    def _target(self, bound):
        raise NotImplementedError

    def _lock(self):
        return contextlib.nullcontext()

    def close(self) -> None:
        pass
