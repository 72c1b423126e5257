"""The adaptive driver, written once: dispatch an adaptive kernel until no trajectory runs.

An adaptive method's kernel (templates/adaptive.*.j2), or a fixed-step method's run for
``save_at`` or events (its dense variant), runs at most ``u_attempts`` step attempts per
trajectory a dispatch; a trajectory resumes where the last dispatch left it (its state,
t, dt, FSAL derivative and counters wait in ``b_ad``/``b_cnt``, events' rows in
``b_evi``/``b_evf``). After each dispatch the host reads the error slot and one number,
how many trajectories still run (``b_run``), and stops at zero; then the chunk's states,
t, counters, history and events' rows are read back. Chunks of the ensemble (the
backend's split over its storage limits) run one after another. What is written here,
once, for every backend that runs on it (glsl, wgpu, cpu):

- pacing: a chunk's first dispatch runs ``Target.first`` attempts, later ones are paced
  to about ``Target.aim`` seconds (runtime/pacing.py), never past ``Target.cap`` (a
  software renderer's loop limiter);
- progress ``(done, total)`` between dispatches and ``(total, total)`` at the end,
  through the backend's ``Nesting`` (a callback may call again: that call gets a
  private copy of the kernel); Ctrl-C stops the run at
  the next dispatch boundary (a trip to the device ends before the interrupt goes on);
- the event log of float64 flux inside ``when`` (glsl): emptied before each dispatch,
  read after it; when it overflowed, the chunk runs again from its start with a larger
  log, up to the largest storage block, past it with fewer attempts per dispatch;
- float64 flux deposits (glsl): (index, value) slots summed in trajectory order.

What a backend gives it is a ``Target``: the typed ``Layout`` of the run's buffers
(shader/adaptive_host.layout), its chunks and limits, and three operations, each one
trip to the device: ``begin`` (a chunk's buffers and first writes, carried by the next
trip), ``trip`` (writes, one dispatch, reads: the batched operation) and ``read``. The
driver returns the raw arrays (``Finished``); the Solution is made of them by
shader/adaptive_host.finish, shared by every compiled backend (cpu's too).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

import numpy as np

from ..call.counters import COUNTERS
from ..errors import BackendError
from .pacing import Pacer
from .progress import Nesting

LOG_FIRST = 1024            # records of the event log at first (it grows when it overflows)
FIRST_ATTEMPTS = 16         # the least attempts of a chunk's first dispatch (then paced)
RUNNING = -1                # b_cnt status while a trajectory still steps
PAUSED = -2                 # (C) still running, at a Simulation's until (adaptive_session)
CNT_ROWS = ("taken", "rejected", "status", "again", "next")     # b_cnt rows
_ZERO4 = bytes(4)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The buffers of an adaptive run, as the kernel lays them out: (rows, trajectories)."""

    n: int                  # trajectories of the call
    n_states: int
    dtype: np.dtype         # the working dtype (b_state, b_ad, b_hist, b_evf, the log)
    times: np.ndarray       # b_save: the save_at times (or save_every's slots)
    counters: int           # rows of b_cnt (int32)
    evi: int                # rows of b_evi (int32), 0 without events
    evf: int                # rows of b_evf, 0 without events
    log_fields: int         # fields of one event-log record, 0 without a log
    deposit_outputs: tuple  # float64 flux: the output of each deposit slot (() without)
    output_shapes: dict


class Target(Protocol):
    """What the driver needs of a backend's kernel for one call."""

    layout: Layout
    chunks: list            # [(a, b)] trajectory ranges, run one after another
    cap: int | None         # the most attempts one dispatch may run (None: no bound)
    aim: float              # the seconds a dispatch aims at (pacing.target)
    block: int              # the largest storage buffer, bytes (the event log's bound)
    outputs: list           # [(buffer, output name, bytes)] read after the last chunk
    nesting: Nesting        # the backend's progress re-entry record
    kernel: Any             # what ``nesting`` marks while a callback runs

    def first(self, ci: int) -> int:
        """Attempts of chunk ``ci``'s first dispatch."""

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        """Chunk ``ci`` starts (again): its own buffers and writes, the run's first
        writes when ``ci`` is 0, and the buffers of ``sizes`` (name -> bytes) made,
        ``writes`` [(name, bytes)] written; the backend may carry them on the next trip."""

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        """One dispatch of the chunk with ``uniforms`` set: buffers of ``sizes`` made,
        ``writes`` [(name, bytes)] written before it, the error slot and ``reads``
        [(name, bytes)] read after it: [error slot, *reads] (bytes), in one trip."""

    def check(self, err: bytes) -> None:
        """Raise the run-time error the error slot holds, if any (shader/faults)."""

    def read(self, reads: list) -> list:
        """The bytes of each (name, bytes) of ``reads``, in one trip."""


@dataclasses.dataclass
class Finished:
    """A finished run's arrays, (rows, trajectories) each."""

    state: np.ndarray       # (state, ad, cnt: read-only where one chunk held the run)
    ad: np.ndarray          # b_ad's first row: t
    cnt: np.ndarray
    hist: np.ndarray        # (times, states, trajectories)
    evi: np.ndarray
    evf: np.ndarray
    outputs: dict           # the outputs (the deposits' sums with float64 flux)
    records: np.ndarray | None     # the event log's records, lanes in the call's order


def run(target: Target, progress=None) -> Finished:
    L = target.layout
    n, item, dtype, times = L.n, L.dtype.itemsize, L.dtype, L.times
    n_save = len(times)
    # one chunk of the whole ensemble: its states, t and counters are the arrays read back
    whole = list(target.chunks) == [(0, n)]
    if not whole:
        state = np.zeros((L.n_states, n), dtype)
        ad = np.zeros((1, n), dtype)
        cnt = np.zeros((L.counters, n), np.int32)
    hist = np.zeros((n_save, L.n_states, n), dtype)
    evi = np.zeros((L.evi, n), np.int32)
    evf = np.zeros((L.evf, n), dtype)
    deposits = ({name: np.zeros(shape, dtype) for name, shape in L.output_shapes.items()}
                if L.deposit_outputs else None)
    outputs: dict = {}
    biggest = max((b - a for a, b in target.chunks), default=0)
    most = target.block // (L.log_fields * item) if L.log_fields else 0
    logcap = min(max(LOG_FIRST, 4 * biggest), most) if L.log_fields else 0
    cap, records = target.cap, []
    t_bytes = np.ascontiguousarray(times, dtype).tobytes()
    for ci, (a, b) in enumerate(target.chunks):
        count = b - a
        sizes = {"b_ad": (2 + L.n_states) * count * item, "b_cnt": L.counters * count * 4,
                 "b_hist": n_save * L.n_states * count * item, "b_save": n_save * item}
        if L.evi:       # events: written by the first dispatch, carried between them
            sizes.update({"b_evi": L.evi * count * 4, "b_evf": L.evf * count * item})
        while True:         # (from the chunk's start again when the event log overflowed)
            target.begin(ci, sizes, [("b_save", t_bytes)] if n_save else [])
            first = target.first(ci)
            pacer = Pacer(first, cap, target.aim)
            step0, running, mine, over = 0, count, [], 0
            while running:
                attempts = pacer.steps
                grow = {"b_evlog": logcap * L.log_fields * item} if logcap else {}
                writes = [("b_run", _ZERO4)] + ([("b_evn", _ZERO4)] if logcap else [])
                reads = [("b_run", 4)] + ([("b_evn", 4)] if logcap else [])
                began = time.perf_counter()
                got = target.trip({"u_step0": step0, "u_attempts": attempts,
                                   "u_logcap": logcap}, grow, writes, reads)
                pacer.record(attempts, time.perf_counter() - began)
                COUNTERS.add("dispatches")
                target.check(got[0])
                running = int(np.frombuffer(got[1], np.uint32)[0])
                step0 = 1
                if logcap:
                    logged = int(np.frombuffer(got[2], np.uint32)[0])
                    if logged > logcap:
                        over = logged
                        break
                    if logged:
                        raw = target.read([("b_evlog", logged * L.log_fields * item)])[0]
                        rows = np.frombuffer(raw, dtype).reshape(logged, L.log_fields).copy()
                        rows[:, 5] += a             # (the trajectory's place in the call)
                        mine.append(rows)
                if progress is not None and running:
                    target.nesting.report(target.kernel, progress, a + count - running, n)
            if not over:
                records += mine
                break
            # a larger log, up to the largest storage block; past it, fewer attempts
            if logcap >= most:
                if (cap or first) <= 1 and attempts <= 1:
                    raise BackendError(
                        f"one step of these {count} trajectories deposits more `flux` inside "
                        f"`when` ({over} deposits) than the event log of this driver holds "
                        f"({most}); run fewer trajectories per call, or use backend='numpy'")
                cap = max(1, min(cap or first, attempts) // 2)
            logcap = min(max(2 * logcap, 2 * over), most)
        last = ci == len(target.chunks) - 1
        nd = len(L.deposit_outputs)
        reads = [("b_state", L.n_states * count * item), ("b_ad", count * item),
                 ("b_cnt", sizes["b_cnt"]), ("b_hist", sizes["b_hist"])]
        if L.evi:
            reads += [("b_evi", sizes["b_evi"]), ("b_evf", sizes["b_evf"])]
        if nd:
            reads.append(("b_dep", 2 * nd * count * item))
        shown = target.outputs if last and deposits is None else []
        got = target.read(reads + [(buffer, size) for buffer, _, size in shown])
        parts = (np.frombuffer(got[0], dtype).reshape(L.n_states, count),
                 np.frombuffer(got[1], dtype).reshape(1, count),
                 np.frombuffer(got[2], np.int32).reshape(L.counters, count))
        if whole:
            state, ad, cnt = parts
        else:
            state[:, a:b], ad[:, a:b], cnt[:, a:b] = parts
        if n_save:
            hist[:, :, a:b] = np.frombuffer(got[3], dtype).reshape(n_save, L.n_states, count)
        if L.evi:
            evi[:, a:b] = np.frombuffer(got[4], np.int32).reshape(L.evi, count)
            evf[:, a:b] = np.frombuffer(got[5], dtype).reshape(L.evf, count)
        if nd:
            accumulate(np.frombuffer(got[len(reads) - 1], dtype).reshape(nd, count, 2),
                       L.deposit_outputs, deposits)
        for (_, name, _), raw in zip(shown, got[len(reads):]):
            outputs[name] = np.frombuffer(raw, dtype).reshape(L.output_shapes[name]).copy()
    if progress is not None:        # (marked too: a call from it gets a private kernel)
        target.nesting.report(target.kernel, progress, int(n), int(n))
    return Finished(state, ad, cnt, hist, evi, evf,
                    deposits if deposits is not None else outputs,
                    np.concatenate(records) if records else None)


def accumulate(dep: np.ndarray, deposit_outputs, outputs: dict) -> None:
    """float64 flux: deposits (slot, trajectory, (flat index, value)) summed into
    ``outputs`` in trajectory order (an index < 0: no deposit)."""
    for slot, name in enumerate(deposit_outputs):
        idx, val = dep[slot, :, 0], dep[slot, :, 1]
        keep = idx >= 0
        np.add.at(outputs[name].reshape(-1), idx[keep].astype(np.int64), val[keep])
