"""A fixed-step Simulation session (call/session.py) on a compiled backend, written once
(glsl, wgpu, cpu): a private copy of the field's kernel whose buffers hold the run between
calls.

The kernel runs any range of steps ``[u_step0, u_step0 + u_nsteps)`` of a run whose
state waits in its buffers (runtime/fixed.py splits long runs that way), so an
``advance`` is the paced dispatches of that range (runtime/pacing.py): nothing written
unless it changed (``dirty``: a restored state, new per-trajectory params, new inputs;
the outputs are zeroed each advance: its flux is on the state it ends with), nothing read
back until asked for. An ensemble of several chunks keeps each chunk's arrays on the
host between dispatches (each chunk runs all the advance's steps in turn; the host's
arrays are the run's once every chunk has run).

Each dispatch and its count are done whole (call/interrupt.py's ``held``): an
interrupted advance of a resident run (one chunk) leaves ``step`` at the steps the
finished dispatches ran; one of several chunks keeps the host's arrays, and ``step``,
as they were before the advance.

What a backend gives is the fixed-step driver's ``Target`` (runtime/fixed.py: ``trip``,
``check``, ``read`` on named buffers, ``chunks``, ``first``, ``cap``, ``aim``,
``outputs``, ``layout``, ``kernel.meta``) whose ``begin(ci, sizes, writes)`` writes
only what the session gives (and on chunk 0 makes the run's own buffers: outputs, error
slot), with ``inputs`` ((buffer, input name) each), ``pt`` (b_params' rows) and
``rebind(bound)`` (new param values: the scalars' uniforms); ``lock`` is held around
every device operation (wgpu's runner lock).
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from ..call.counters import COUNTERS
from ..call.interrupt import held
from ..call.session import pack_states
from .adaptive import accumulate
from .fixed import param_rows, start_state
from .pacing import Pacer, segments
from .session import HostRun


def _raw(a: np.ndarray) -> np.ndarray:
    """A host array's bytes (a uint8 view: ``len`` is its size; no copy when contiguous)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


class FixedSession(HostRun):
    """See the module. A backend's session makes its private kernel and Target and calls
    ``__init__``; it gives ``close`` (and glsl its aliases: ``aliased`` are input
    buffers the session does not write)."""

    aliased: dict | tuple = ()

    def __init__(self, target, bound, lock=None):
        self.target, self.bound = target, bound
        self.lock = lock or contextlib.nullcontext()
        L, meta = target.layout, target.kernel.meta
        n, ns, dtype = L.n, L.n_states, L.dtype
        state = start_state(bound)
        self.state = state if state is not None else np.zeros((ns, n), dtype)
        self.init = np.zeros((ns, n), dtype) if meta["uses_init"] else None
        self.steps2 = np.zeros((2, n), np.int32) if L.collapse else None
        nd = len(L.deposit_outputs)
        self.dep = np.full((nd, n, 2), -1.0, dtype) if nd else None
        self.params = self._params(bound)
        self.resident = len(target.chunks) == 1
        self.dirty = {"state", "params", "inputs"}      # the device needs these from the host
        self.step = 0

    def _params(self, bound) -> np.ndarray | None:
        return param_rows(bound, self.target.pt)

    def _rows(self) -> list:
        """(buffer, host array, what makes it dirty): the run's arrays as the kernel
        holds them, (rows, trajectories[, 2]) each."""
        rows = [("b_state", self.state, "state")]
        if self.init is not None:
            rows.append(("b_init", self.init, "state"))
        if self.steps2 is not None:
            rows.append(("b_steps", self.steps2, "state"))
        if self.params is not None:
            rows.append(("b_params", self.params, "params"))
        if self.dep is not None:
            rows.append(("b_dep", self.dep, "state"))
        return rows

    # --- running -------------------------------------------------------------------------
    def advance(self, step0: int, nsteps: int) -> None:
        """Steps [step0, step0 + nsteps), paced dispatches (see the module)."""
        with self.lock:
            self._advance(step0, nsteps)

    def _advance(self, step0: int, nsteps: int) -> None:
        t = self.target
        total, back = step0 + nsteps, []
        for ci, (a, b) in enumerate(t.chunks):
            upload = set(self.dirty) if self.resident else {"state", "params"}
            if ci == 0:
                upload |= {"outputs"} | (self.dirty & {"inputs"})
            t.begin(ci, *self._writes(a, b, upload))
            pacer = Pacer(t.first(ci), t.cap, t.aim)
            for s0, s1 in segments(total, pacer, start=step0):
                last = s1 == total and not self.resident
                reads = self._reads(b - a) if last else []
                uniforms = {"u_step0": s0, "u_nsteps": s1 - s0, "u_final": int(s1 == total),
                            "u_steps": total}
                began = time.perf_counter()
                with held():
                    got = t.trip(uniforms, {}, [], reads)
                    if self.resident:       # the device holds the run: this is its step
                        self.dirty, self.step = set(), s1
                pacer.record(s1 - s0, time.perf_counter() - began)
                COUNTERS.add("dispatches")
                t.check(got[0])
                if last:
                    back.append((a, b, got[1:]))
        if self.resident:       # (the last dispatch set dirty and step)
            return
        with held():            # every chunk has run: the host's arrays are the run's
            for a, b, got in back:
                self._absorb(a, b, got)
            self.dirty = set()
            self.step = total

    def _writes(self, a: int, b: int, upload: set) -> tuple[dict, list]:
        """(sizes, writes) of chunk [a, b)'s first dispatch: its buffers, and what of
        ``upload`` the device needs from the host."""
        t, writes = self.target, []
        if "inputs" in upload:
            dtype = self.bound.dtype
            writes += [(buffer, _raw(np.asarray(self.bound.inputs[name], dtype)))
                       for buffer, name in t.inputs if buffer not in self.aliased]
        if "outputs" in upload:         # an advance's flux: on the state it ends with
            writes += [(buffer, bytes(size)) for buffer, _, size in t.outputs]
        sizes = {}
        for buffer, arr, when in self._rows():
            sizes[buffer] = arr.nbytes // arr.shape[1] * (b - a)
            if when in upload:
                writes.append((buffer, _raw(arr[:, a:b])))
        return sizes, writes

    def _reads(self, count: int) -> list:
        """What the device holds of a chunk of ``count`` trajectories: states, start
        values, collapse counters, deposit slots."""
        return [(buffer, arr[:, :count].nbytes) for buffer, arr, when in self._rows()
                if buffer != "b_params"]

    def _absorb(self, a: int, b: int, got: list) -> None:
        rows = [arr for buffer, arr, _ in self._rows() if buffer != "b_params"]
        for arr, raw in zip(rows, got):
            part = arr[:, a:b]
            part[...] = np.frombuffer(raw, arr.dtype).reshape(part.shape)

    def _on_device(self) -> bool:
        """Whether the device holds the run's state (one chunk, and no state from the host
        waiting to be written: new params or inputs do not change the state)."""
        return self.resident and "state" not in self.dirty

    def _sync(self) -> None:
        """Bring the host arrays up to the device's (one chunk: the device holds the run)."""
        if self._on_device():
            n = self.target.layout.n
            with self.lock:
                got = self.target.read(self._reads(n))
            self._absorb(0, n, got)

    # --- reading -------------------------------------------------------------------------
    def states(self) -> np.ndarray:
        grid = self.bound.grid_shape
        if self._on_device():
            with self.lock:
                raw = self.target.read([("b_state", self.state.nbytes)])[0]
            return pack_states(np.frombuffer(raw, self.state.dtype).reshape(
                self.state.shape), grid)
        return pack_states(self.state, grid)

    def outputs(self) -> dict:
        t, dtype, shapes = self.target, self.bound.dtype, self.bound.output_shapes
        if self.dep is not None:        # float64 flux: summed on the host from the deposits
            self._sync()
            out = {name: np.zeros(shape, dtype) for name, shape in shapes.items()}
            accumulate(self.dep, t.layout.deposit_outputs, out)
            return out
        reads = [(buffer, size) for buffer, _, size in t.outputs]
        with self.lock:
            got = t.read(reads) if reads else []
        return {name: np.frombuffer(raw, dtype).reshape(shapes[name]).copy()
                for (_, name, _), raw in zip(t.outputs, got)}

    # --- changing (checkpoints: runtime/session.HostRun) ------------------------------
    def _arrays(self) -> tuple:
        return self.state, self.init, self.steps2

    def _restored(self) -> None:
        self.dirty |= {"state", "params"}

    def set_data(self, data) -> None:
        """New param values of the same signature: scalars are uniforms (set at the next
        dispatch), per-trajectory params are written when they changed."""
        bound = self.bound.prepared.bound(data)
        params = self._params(bound)
        self.target.rebind(bound)
        self.bound = bound
        if params is not None and not np.array_equal(params, self.params):
            self.params = params
            self.dirty |= {"params"}

    def set_input(self, name: str, array: np.ndarray) -> None:
        """A new value of input ``name`` (same shape), written before the next dispatch."""
        self.bound.inputs[name] = np.ascontiguousarray(array, self.bound.dtype)
        self.dirty |= {"inputs"}

    def alias_input(self, name, source, output) -> bool:
        return False
