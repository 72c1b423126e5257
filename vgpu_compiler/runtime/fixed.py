"""The fixed-step driver, written once: a fixed-step kernel's run, chunk by chunk, dispatch by dispatch.

A fixed-step kernel (templates/kernel.*.j2) runs steps ``[u_step0, u_step0 + u_nsteps)``
of every trajectory of a chunk a dispatch; the state waits in ``b_state`` between
dispatches, exactly, so where a run is split never changes its numbers. What is written
here, once, for every backend that runs on it (glsl, wgpu):

- chunks (the backend's split over its storage and workgroup limits) one after another;
- pacing: a chunk's first dispatch runs ``Target.first`` steps, later ones are paced to
  about ``Target.aim`` seconds (runtime/pacing.py), never past ``Target.cap`` (a software
  renderer's loop limiter, or a forced limit); every saved step of ``save_every`` ends a
  dispatch (pacing.segments), whose states are read back with it;
- progress ``(done, total)`` between dispatches through the backend's ``Nesting`` (the
  final ``(total, total)`` is the backend's, once its kernel's lock is let go); Ctrl-C
  stops the run at the next dispatch boundary (a trip to the device ends first);
- the read-back of a chunk's last dispatch: states, the steps taken (``collapse``),
  float64 flux deposits (summed in trajectory order: adaptive.accumulate), and after the
  last chunk the outputs.

What a backend gives it is the adaptive driver's ``Target`` (runtime/adaptive.py: one
class per backend serves both drivers) with this module's ``Layout``: ``begin`` (a chunk's
buffers and first writes, carried by the next trip), ``trip`` (writes, one dispatch,
reads, in one trip to the device), ``check``. ``solution`` makes the Solution.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..call.bound import Solution, saved_steps
from ..call.counters import COUNTERS
from .adaptive import accumulate
from .pacing import Pacer, segments


@dataclasses.dataclass(frozen=True)
class Layout:
    """The buffers of a fixed-step run, as the kernel lays them out: (rows, trajectories)."""

    n: int                  # trajectories of the call
    n_states: int
    dtype: np.dtype         # the working dtype (b_state, b_dep, the outputs)
    steps: int
    every: int              # save_every (0: no history)
    collapse: bool          # b_steps: the steps each trajectory took (2 int32 a trajectory)
    deposit_outputs: tuple  # float64 flux: the output of each deposit slot (() without)
    output_shapes: dict


def layout(bound, meta: dict) -> Layout:
    """The Layout of ``bound``'s call on a fixed-step kernel of ``meta``."""
    return Layout(bound.n_trajectories, len(bound.field.states), bound.dtype, int(bound.steps),
                  int(bound.save_every or 0), bool(meta["collapse"]),
                  tuple(meta.get("deposit_outputs") or ()) if meta.get("n_deposits") else (),
                  bound.output_shapes)


@dataclasses.dataclass
class Finished:
    """A finished run's arrays: states (n_states, n), steps taken (n,), outputs (the
    deposits' sums with float64 flux), the saved steps and their states (or None)."""

    state: np.ndarray
    taken: np.ndarray
    outputs: dict
    saved_at: list | None
    saved: list | None


def run(target, progress=None) -> Finished:
    L = target.layout
    n, n_states, dtype, steps, item = L.n, L.n_states, L.dtype, L.steps, L.dtype.itemsize
    history = saved_steps(steps, L.every) if L.every else None
    where = {s: m for m, s in enumerate(history)} if history else {}
    saved = [None] * len(history) if history else None
    taken = np.full(n, steps, np.int32)
    nd = len(L.deposit_outputs)
    deposits = ({name: np.zeros(shape, dtype) for name, shape in L.output_shapes.items()}
                if nd else None)
    chunks = target.chunks
    whole = len(chunks) == 1 and chunks[0] == (0, n)
    state = None if whole else np.zeros((n_states, n), dtype)
    outputs: dict = {}
    for ci, (a, b) in enumerate(chunks):
        count = b - a
        last = ci == len(chunks) - 1
        target.begin(ci, {"b_steps": 2 * count * 4} if L.collapse else {}, [])
        pacer = Pacer(target.first(ci), target.cap, target.aim)
        for s0, s1 in segments(steps, pacer, history):      # saved steps end one
            end = s1 == steps
            save = s1 in where and (s1 > s0 or s1 == 0)
            reads = [("b_state", n_states * count * item)] if save or end else []
            if end:
                if L.collapse:
                    reads.append(("b_steps", count * 4))
                if nd:
                    reads.append(("b_dep", 2 * nd * count * item))
                if last:
                    reads += [(buffer, size) for buffer, _, size in target.outputs]
            began = time.perf_counter()
            got = target.trip({"u_step0": s0, "u_nsteps": s1 - s0,
                               "u_final": int(end and (s1 > s0 or steps == 0))}, {}, [], reads)
            pacer.record(s1 - s0, time.perf_counter() - began)
            COUNTERS.add("dispatches")
            target.check(got[0])
            if save or end:
                states = np.frombuffer(got[1], dtype).reshape(n_states, count)
            if save:
                m = where[s1]
                if saved[m] is None:
                    saved[m] = np.zeros((n_states, n), dtype)
                saved[m][:, a:b] = states
            if end:
                if whole:
                    state = states
                else:
                    state[:, a:b] = states
                k = 2
                if L.collapse:
                    taken[a:b] = np.frombuffer(got[k], np.int32)
                    k += 1
                if nd:
                    accumulate(np.frombuffer(got[k], dtype).reshape(nd, count, 2),
                               L.deposit_outputs, deposits)
                    k += 1
                if last:
                    for (_, name, _), raw in zip(target.outputs, got[k:]):
                        outputs[name] = np.frombuffer(raw, dtype).reshape(
                            L.output_shapes[name]).copy()
            if progress is not None and s1 > s0 and s1 < steps:
                target.nesting.report(target.kernel, progress,
                                      (ci * steps + s1) // len(chunks), steps)
    return Finished(state, taken, deposits if deposits is not None else outputs, history, saved)


def pack(state: np.ndarray, grid: tuple) -> np.ndarray:
    """(n_states, N) kernel layout -> grid (+ (n_states,)), a new writable array
    (``state`` may be a read-only view of a read-back)."""
    if state.shape[0] == 1:
        return state.reshape(grid).copy()
    return np.ascontiguousarray(state.T).reshape(grid + (state.shape[0],))


def solution(bound, done: Finished) -> Solution:
    """The Solution of a finished fixed-step run of ``bound``."""
    grid, dtype = bound.grid_shape, bound.dtype
    sol = Solution(states=pack(done.state, grid), outputs=done.outputs,
                   steps_taken=done.taken.reshape(grid))
    if done.saved_at:
        sol.history = np.stack([pack(h, grid) for h in done.saved])
        cast = dtype.type
        sol.times = (cast(bound.t0) + np.asarray(done.saved_at).astype(dtype) * cast(bound.dt)
                     ).astype(dtype)
    return sol
