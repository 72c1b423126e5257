"""The fixed-step driver, written once: a fixed-step kernel's run, chunk by chunk, dispatch by dispatch.

A fixed-step kernel (templates/kernel.*.j2) runs steps ``[u_step0, u_step0 + u_nsteps)``
of every trajectory of a chunk a dispatch; the state waits in ``b_state`` between
dispatches, exactly, so where a run is split never changes its numbers. What is written
here, once, for every backend that runs on it (glsl, wgpu, cpu):

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
from ..call.session import pack_states as pack
from .adaptive import accumulate
from .pacing import Pacer, history_end, segments

MAX_SLOTS = 4096            # saved steps one dispatch writes, at most (``hist``)


@dataclasses.dataclass(slots=True)      # (not frozen: made once a call, and cheaply)
class Layout:
    """The buffers of a fixed-step run, as the kernel lays them out: (rows, trajectories)."""

    n: int                  # trajectories of the call
    n_states: int
    dtype: np.dtype         # the working dtype (b_state, b_dep, the outputs)
    steps: int
    every: int              # save_every (0: no history)
    collapse: bool          # b_steps: the steps each trajectory took (2 int32 a trajectory)
    hist: bool              # the kernel writes the saved steps' states into b_hist itself
    deposit_outputs: tuple  # float64 flux: the output of each deposit slot (() without)
    output_shapes: dict


def layout(bound, meta: dict) -> Layout:
    """The Layout of ``bound``'s call on a fixed-step kernel of ``meta``."""
    return Layout(bound.n_trajectories, len(bound.field.states), bound.dtype, int(bound.steps),
                  int(bound.save_every or 0), bool(meta["collapse"]),
                  any(b["name"] == "b_hist" for b in meta["buffers"]),
                  tuple(meta.get("deposit_outputs") or ()) if meta.get("n_deposits") else (),
                  bound.output_shapes)


@dataclasses.dataclass(slots=True)
class Finished:
    """A finished run's arrays: states (n_states, n), steps taken (n,), outputs (the
    deposits' sums with float64 flux), the saved steps and their states (or None):
    a list of (n_states, n) arrays, or one (saved steps, n_states, n) array (``hist``)."""

    state: np.ndarray
    taken: np.ndarray
    outputs: dict
    saved_at: list | None
    saved: list | np.ndarray | None


def run(target, progress=None) -> Finished:
    L = target.layout
    n, n_states, dtype, steps, item = L.n, L.n_states, L.dtype, L.steps, L.dtype.itemsize
    every = L.every
    history = saved_steps(steps, every) if every else None
    where = {s: m for m, s in enumerate(history)} if history and not L.hist else {}
    if L.hist:      # (saved step, state, trajectory): as the kernel writes b_hist
        saved = np.empty((len(history), n_states, n), dtype)
    else:
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
        per_slot = n_states * count * item
        last = ci == len(chunks) - 1
        sizes = {"b_steps": 2 * count * 4} if L.collapse else {}
        if L.hist:      # saved steps a dispatch writes: as many as one storage block holds
            room = max(1, min(MAX_SLOTS, target.block // max(1, per_slot)))
            sizes["b_hist"] = room * per_slot
        target.begin(ci, sizes, [])
        pacer = Pacer(target.first(ci), target.cap, target.aim)
        if L.hist:
            spans = _filled(steps, pacer, every, room)
        elif history is None and 0 < steps <= pacer.steps:
            spans = ((0, steps),)       # (one dispatch: what segments yields, sooner)
        else:
            spans = segments(steps, pacer, history)     # saved steps end one
        for s0, s1 in spans:
            end = s1 == steps
            start = L.hist and s1 == 0          # (the start state: slot 0, from b_state)
            save = start or (s1 in where and (s1 > s0 or s1 == 0))
            reads = [("b_state", per_slot)] if save or end else []
            uniforms = segment(s0, s1, steps)
            if L.hist:
                uniforms["u_every"] = every
                hist0 = s0 // every + 1
                slots = 0 if start else (-(-s1 // every) if end else s1 // every) - hist0 + 1
                if slots:       # (one chunk: read straight into the history)
                    reads.append(("b_hist", slots * per_slot) if not whole else
                                 ("b_hist", slots * per_slot, (saved, hist0 * per_slot)))
            if end:
                if L.collapse:
                    reads.append(("b_steps", count * 4))
                if nd:
                    reads.append(("b_dep", 2 * nd * count * item))
                if last:
                    reads += [(buffer, size) for buffer, _, size in target.outputs]
            began = time.perf_counter()
            got = target.trip(uniforms, {}, [], reads)
            pacer.record(s1 - s0, time.perf_counter() - began)
            COUNTERS.add("dispatches")
            target.check(got[0])
            k = 1
            if save or end:
                states = np.frombuffer(got[1], dtype).reshape(n_states, count)
                k = 2
            if start:
                saved[0, :, a:b] = states
            elif save:
                m = where[s1]
                if saved[m] is None:
                    saved[m] = np.zeros((n_states, n), dtype)
                saved[m][:, a:b] = states
            if L.hist and slots:
                if not whole:
                    saved[hist0:hist0 + slots, :, a:b] = np.frombuffer(
                        got[k], dtype).reshape(slots, n_states, count)
                k += 1
            if end:
                if whole:
                    state = states
                else:
                    state[:, a:b] = states
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


def start_state(bound) -> np.ndarray | None:
    """The given initial states as (n_states, N) in the working dtype (the states with a
    start expression left 0: the kernel computes them), or None when none are given."""
    if bound.h0 is None:
        return None
    f, n = bound.field, bound.n_trajectories
    state = np.zeros((len(f.states), n), bound.dtype)
    free = np.asarray(bound.h0, bound.dtype).reshape(n, -1)
    state[[k for k, s in enumerate(f.states) if s.init is None]] = free.T
    return state


def param_rows(bound, names) -> np.ndarray | None:
    """The per-trajectory params ``names`` as (params, N) rows in the working dtype (the
    kernels' b_params), or None when there are none."""
    if not names:
        return None
    n = bound.n_trajectories
    return np.stack([np.asarray(bound.params[p], bound.dtype).reshape(n) for p in names])


def segment(s0: int, s1: int, steps: int) -> dict:
    """The uniforms of the dispatch that runs steps [s0, s1) of ``steps``."""
    return {"u_step0": s0, "u_nsteps": s1 - s0,
            "u_final": int(s1 == steps and (s1 > s0 or steps == 0))}


def _filled(steps: int, pacer: Pacer, every: int, room: int):
    """(first step, end step) of each dispatch of a run whose kernel writes its saved
    steps (``hist``): one of no steps first (the start state), then paced ones, each
    ending where the history buffer (``room`` slots) is full (pacing.history_end)."""
    yield 0, 0
    s0 = 0
    while s0 < steps:
        s1 = history_end(s0, steps, every, room, pacer.steps)
        yield s0, s1
        s0 = s1


def solution(bound, done: Finished) -> Solution:
    """The Solution of a finished fixed-step run of ``bound``."""
    grid, dtype = bound.grid_shape, bound.dtype
    sol = Solution(states=pack(done.state, grid), outputs=done.outputs,
                   steps_taken=done.taken.reshape(grid))
    if isinstance(done.saved, np.ndarray):     # (saved step, state, trajectory): a view
        n_states = done.saved.shape[1]
        sol.history = done.saved.transpose(0, 2, 1).reshape(
            (len(done.saved_at),) + grid + ((n_states,) if n_states > 1 else ()))
    elif done.saved_at:
        sol.history = np.stack([pack(h, grid) for h in done.saved])
    if done.saved_at:
        cast = dtype.type
        sol.times = (cast(bound.t0) + np.asarray(done.saved_at).astype(dtype) * cast(bound.dt)
                     ).astype(dtype)
    return sol
