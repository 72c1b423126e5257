"""Running an adaptive method's C kernel (templates/adaptive.c.j2), or a fixed-step
method's with save_at: kernel calls until every trajectory has ended, runtime/
adaptive.py's driver on the call's Target (target.py).

Each call runs at most ``attempts`` step attempts per trajectory (about
``runner.WORK_PER_CALL`` lane-stage evaluations in all, so Ctrl-C stops a long run
at the next call); a trajectory resumes where the last call left it (its state,
t, step size, FSAL derivative and counters stay in their buffers). Between
calls the host counts the trajectories still running (the status row: the Target's
``b_run``) and the driver reports progress. Tolerances, t0, t1, dt0, dtmax,
max_steps and the save_at times are run-time values: a new value never recompiles.

Events (templates/events.c.j2) carry their per-lane rows between calls in b_evi
and b_evf (shader/events.py); a stopped lane reports its own status, time (and,
for a fixed-step method, steps). Flux inside `when` goes into an event log of
(attempt, phase, statement, lane) slots, at most one deposit per slot: a call
runs at most ``EVENT_LOG`` slots' worth of attempts, and after it the host adds
the log into the outputs in that order; the outputs are then the end-of-run
flux plus the events' (the reference's order of the two sums).

With events the kernel also keeps a fixed-step method's ``save_every`` history
(u_every: each saved step's end after its events, in b_hist) and an adaptive
method's ``save_at`` values after each step's events; a slot a trajectory never
reached (it stopped, or its basin collapsed) is its final state: the Solution is
shader/adaptive_host.finish's, as on glsl and wgpu.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...call.bound import Progress, Solution, saved_steps
from ...ir import controller as C
from ...runtime import adaptive as driver
from ..shader.adaptive import COUNTERS as ROWS
from ..shader.adaptive_host import finish
from ..shader.events import EVF_ROWS, evi_rows
from . import runner, target as _target
from .runner import _Call


EVENT_LOG = 1 << 22         # event-log slots per call at most (attempts x 2 x statements x lanes)
# The b_ad and b_cnt arrays of finished solves, kept for the next solve of the same shape
# (zeroed again: np.zeros' values): fresh ones are the kernel's first touch, page faults
# inside its parallel region (tsit5 Lorenz 262,144 float32: 10 MB, ~1,000 faults, 5-25 ms of
# system time a solve on the loaded 2-core machine, the kernel itself ~30 ms). At most
# SCRATCH_BYTES in all; only AdaptiveCall's own solve (a Simulation keeps its arrays).
SCRATCH_BYTES = 64 << 20
_scratch: dict = {}         # (shape, dtype) -> [arrays]


def attempts_per_call(field, nslots: int) -> int:
    """Step attempts per call: about ``runner.WORK_PER_CALL`` lane-stage evaluations. A
    fixed-step method's attempt evaluates its stages and F at the step's end; an adaptive
    method's is counted as 7 stages."""
    solver = field.solver
    stages = 7 if solver.adaptive is not None else solver.tableau.stages + 1
    return max(1, runner.WORK_PER_CALL // (max(1, nslots) * stages))


class AdaptiveCall(_Call):
    def __init__(self, k, bound):
        super().__init__(k, bound)
        f = bound.field
        # flux statements inside `when`, in the kernel's order (shader/events.extend)
        self.ev_outputs = [fl.output for ev in f.events for fl in ev.flux]
        self.ev_sums = {o: np.zeros(s, bound.dtype) for o, s in bound.output_shapes.items()}
        self.log_attempts = 0
        if self.ev_outputs:
            per = 2 * len(self.ev_outputs) * self.nslots
            self.log_attempts = max(1, EVENT_LOG // per)
            size = self.log_attempts * per
            self.ev_at = np.full(size, -1, np.int32)
            self.ev_value = np.zeros(size, bound.dtype)
            ptrs = ([a.ctypes.data for a in self.buffers]
                    + [self.dep_at.ctypes.data, self.dep_value.ctypes.data,
                       self.ev_at.ctypes.data, self.ev_value.ctypes.data])
            self.ptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)


    def values(self) -> dict:
        b, cast = self.bound, self.bound.dtype.type
        a, n_save = b.adaptive, 0 if b.save_at is None else len(b.save_at)
        out = {**super().values(), "nsave": n_save, "every": b.save_every or 0}
        if a is None:                   # a fixed-step method run for save_at
            return out
        out.update({"steps": 0, "t1": float(cast(a.t1)), "rtol": float(cast(a.rtol)),
                    "atol": float(cast(a.atol)), "dt0": float(cast(a.dt0 or 0.0)),
                    "dtmax": float(cast(a.dtmax)),
                    "gap": float(cast(C.end_gap(a.t1, b.dtype))),
                    "max_steps": int(a.max_steps), "pause": float(cast(a.t1))})
        return out

    def _buffer(self, b: dict) -> np.ndarray:
        bound, n, dt = self.bound, self.n, self.bound.dtype
        n_states = len(bound.field.states)
        n_save = 0 if bound.save_at is None else len(bound.save_at)
        if bound.save_every:            # a fixed-step method's saved steps (with events)
            n_save = len(saved_steps(bound.steps, bound.save_every))
        role = b["role"]
        if role == "ad":                # t, step size, then the FSAL derivative per state
            self.ad = _zeros((2 + n_states, n), dt)
            return self.ad
        if role == "cnt":               # taken, rejected, status, after a reject, next save
            self.cnt = _zeros((len(ROWS), n), np.int32)
            return self.cnt
        if role == "run":
            return np.zeros(4, np.uint32)
        if role == "save":
            times = np.zeros(max(1, n_save), dt)
            if bound.save_at is not None:
                times[:n_save] = bound.save_at.astype(dt)
            return times
        if role == "hist":              # (time, state, trajectory)
            return np.zeros((max(1, n_save), n_states, n), dt)
        if role == "evi":               # events: prev bits, own status, steps, in step, counts
            self.evi = np.zeros((evi_rows(bound.field.n_when), n), np.int32)
            return self.evi
        if role == "evf":               # events: time stopped, end of the 64-events span
            self.evf = np.zeros((len(EVF_ROWS), n), dt)
            return self.evf
        return super()._buffer(b)

    def solve(self, progress: Progress) -> Solution:
        """The run: runtime/adaptive.py's driver on this call's Target (target.py), at
        most ``attempts_per_call`` attempts a call (and what the event log holds)."""
        bound = self.bound
        attempts = attempts_per_call(bound.field, self.nslots)
        if self.ev_outputs:
            attempts = min(attempts, self.log_attempts)
        done = driver.run(_target.Target(self, attempts, adaptive=True), progress)
        # (no records: the event log was summed into the outputs after each call)
        sol = finish(bound, {}, done, self._pack)
        if type(self) is AdaptiveCall:  # (the Solution holds copies: the arrays are free)
            _keep(self.ad, self.cnt)
        return sol

    def _outputs(self) -> dict:
        """The flux at the trajectories' ends, then the events' (the reference's order)."""
        outputs = super()._outputs()
        if self.bound.field.events:
            for o, v in self.ev_sums.items():
                outputs[o] = (outputs[o] + v).astype(self.bound.dtype)
        return outputs

    def _add_log(self, attempts: int) -> None:
        """The event log of the last call into the events' sums, in its order (slot
        (attempt, phase, statement, lane)); the slots read are emptied again (-1)."""
        n_fx = len(self.ev_outputs)
        used = attempts * 2 * n_fx * self.nslots
        slots = np.flatnonzero(self.ev_at[:used] >= 0)
        if not len(slots):
            return
        at = self.ev_at[slots].astype(np.intp)
        value = self.ev_value[slots]
        self.ev_at[slots] = -1
        statement = (slots // self.nslots) % n_fx
        for o in dict.fromkeys(self.ev_outputs):
            js = [j for j, x in enumerate(self.ev_outputs) if x == o]
            mine = np.isin(statement, js) if len(js) < n_fx else slice(None)
            np.add.at(self.ev_sums[o].reshape(-1), at[mine], value[mine])


def _zeros(shape: tuple, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), a kept array of that shape zeroed again where there is one
    (``_scratch``: its pages are mapped already)."""
    kept = _scratch.get((shape, np.dtype(dtype)))
    try:
        a = kept.pop() if kept else None
    except IndexError:          # (another thread took the last one)
        a = None
    if a is None:
        return np.zeros(shape, dtype)
    a.fill(0)
    return a


def _keep(*arrays: np.ndarray) -> None:
    """Keep these arrays for ``_zeros``, while the kept ones stay under SCRATCH_BYTES."""
    held = sum(a.nbytes for kept in _scratch.values() for a in kept)
    for a in arrays:
        if held + a.nbytes > SCRATCH_BYTES:
            continue
        _scratch.setdefault((a.shape, a.dtype), []).append(a)
        held += a.nbytes
