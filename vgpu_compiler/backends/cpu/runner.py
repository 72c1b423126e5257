"""A bound call of a fixed-step method on the cpu backend (``_Call``; the adaptive
kernel's call extends it, adaptive_run.py): buffers as numpy arrays, one kernel call
with the call's uniforms (``_run``: serial or OpenMP), run-time errors raised as the
GLSL backend raises them, flux deposits summed in the reference's lane order (bit for
bit the reference's sums). The run itself is runtime/fixed.py's, on the call's Target
(target.py).
"""
from __future__ import annotations

import ctypes
import math
import os

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...call.counters import COUNTERS
from ...call.session import pack_states
from ...runtime import fixed
from ..shader.faults import NO_ERROR, raise_error as _raise_error
from . import target as _target
from .kernel import CpuKernel

# Lane-steps per kernel call at most: a long run is several calls (a fraction of a second
# each), so Ctrl-C stops it at the next one (Python sees signals between ctypes calls).
WORK_PER_CALL = 1 << 26
# OpenMP's thread pool does not survive a fork: a process forked after a kernel ran in
# parallel runs its kernels on one thread (vg_kernel_serial), never waiting on lost threads.
_omp = {"used": False, "forked": False}
# A call of at most this many lane-steps (or of one block) runs on the calling thread: waking
# OpenMP's team costs more than such a call's work (a 16x16 matmul, 4 blocks of one step:
# 2.5 ms a call in parallel on a loaded 2-core machine, 0.1 ms serial).
SERIAL_WORK = 1 << 14


def _after_fork_in_child() -> None:
    if _omp["used"]:
        _omp["forked"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Call:
    ndispatched = 0         # kernel calls made (_dispatch)

    def values(self) -> dict:
        """The value of each uniform role that is not the grid's, a dim or a param."""
        b = self.bound
        return {"dt": b.dt, "t0": b.t0, "steps": b.steps, "count": self.n}

    def __init__(self, k: CpuKernel, bound: Bound):
        self.k, self.bound = k, bound
        f, dt = bound.field, bound.dtype
        self.n = n = bound.n_trajectories
        grid = bound.grid_shape
        if f.basin:
            self.nblocks = math.prod(-(-g // int(a.extent)) for g, a in zip(grid, f.basin))
        else:
            self.nblocks = -(-n // k.lanes)
        self.nslots = self.nblocks * k.lanes
        self.state = np.zeros((len(f.states), n), dt)
        # the rows of the states without a start expression (h0's), a slice where they lead
        free = [i for i, s in enumerate(f.states) if s.init is None]
        self.free = slice(0, len(free)) if free == list(range(len(free))) else free
        self.nfree = len(free)
        if free:
            self.load_h0(bound.h0)
        meta = k.meta
        self.floats, self.ints = [], []
        # a window of a larger grid (Bound.origin, when the call has one): the grid
        # uniforms are the whole grid's, u_origin its first row (basins) or trajectory
        origin = getattr(bound, "origin", 0) or 0
        if origin and not f.basin:
            origin = bound.first_trajectory
        whole = getattr(bound, "whole_shape", grid)
        values = {**self.values(), "origin": origin}
        self.param_slot = {}        # a scalar param's place in the float uniforms
        for u in meta["uniforms"]:
            role, of = u["role"], u["of"]
            if role == "grid":
                v = whole[int(of)]
            elif role == "dim":
                v = bound.dims[of]
            elif role == "param":
                v = bound.params[of]
                self.param_slot[of] = len(self.floats)
            elif role == "key":         # a stochastic field's Philox key, from the seed
                from ...noise.normal import key_of
                v = key_of(bound.seed)[int(of)]
            else:
                v = values.get(role, 0)
            (self.ints if _is_int(u, meta) else self.floats).append(v)
        self.ints.append(self.nslots)
        self.buffers = []
        for b in meta["buffers"]:
            self.buffers.append(self._buffer(b))
        nflux = len(f.flux)
        self.dep_at = np.full(max(nflux, 1) * self.nslots, -1, np.int32)
        self.dep_value = np.zeros(max(nflux, 1) * self.nslots, dt)
        self.err = next(a for a, b in zip(self.buffers, meta["buffers"]) if b["role"] == "err")
        ptrs = [a.ctypes.data for a in self.buffers] + [self.dep_at.ctypes.data,
                                                        self.dep_value.ctypes.data]
        self.ptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.role = {u["role"]: i for i, u in enumerate(u for u in meta["uniforms"]
                                                         if _is_int(u, meta))}
        ints = [u["name"] for u in meta["uniforms"] if _is_int(u, meta)]
        floats = [u["name"] for u in meta["uniforms"] if not _is_int(u, meta)]
        self.slots = {**{name: (self.floats, i) for i, name in enumerate(floats)},
                      **{name: (self.ints, i) for i, name in enumerate(ints)}}

    def per_call(self) -> int:
        """Steps a kernel call runs at most: about WORK_PER_CALL lane-steps."""
        return max(1, WORK_PER_CALL // max(1, self.nslots))

    def _buffer(self, b: dict) -> np.ndarray:
        bound, dt, n = self.bound, self.bound.dtype, self.n
        role = b["role"]
        if role == "state":
            return self.state
        if role == "err":
            return np.array([NO_ERROR, 0, 0, 0], np.uint32)
        if role == "init":
            return np.zeros((len(bound.field.states), n), dt)
        if role == "steps":
            return np.zeros(2 * n, np.int32)
        if role == "params":
            return np.ascontiguousarray(np.stack(
                [np.asarray(bound.params[p], dt).reshape(n) for p in bound.per_trajectory]))
        if role == "input":
            return np.ascontiguousarray(bound.inputs[b["array"]], dt)
        if role == "output":
            return np.zeros(max(1, math.prod(bound.output_shapes[b["array"]])), dt)
        return np.zeros(2, dt)          # deposits (GLSL's float64 flux): not used here

    def _call(self, step0: int, nsteps: int, final: bool, **more: int) -> None:
        ints = list(self.ints)
        ints[self.role["step0"]] = step0
        ints[self.role["nsteps"]] = nsteps
        ints[self.role["final"]] = int(final)
        for role, value in more.items():
            ints[self.role[role]] = value
        COUNTERS.add("dispatches")
        self._run(ints, max(nsteps, more.get("attempts", 0), 1))

    def _run(self, ints: list, steps: int) -> None:
        """One kernel call with these int uniforms and the float ones (``steps``: the
        steps or attempts it runs at most), not counted (runtime's drivers count theirs)."""
        fu = np.array(self.floats or [0.0], np.float64)
        iu = np.array([int(v) & 0xFFFFFFFF for v in ints], np.uint32).view(np.int32)
        self._dispatch(fu, iu, self.nslots * steps)

    def load_h0(self, h0: np.ndarray) -> None:
        """The start values of the states without a start expression (rows ``free``)
        from h0 (grid_shape + (n_free,), any real dtype: cast as numpy casts)."""
        self.state[self.free] = h0.reshape(self.n, self.nfree).T

    def _dispatch(self, fu: np.ndarray, iu: np.ndarray, work: int) -> None:
        """One kernel call with these uniforms (``work``: its lane-steps at most): the
        call ``_launcher`` makes, kept (``dispatched``: what a replay calls again,
        replay.py) and counted (``ndispatched``)."""
        self.dispatched = launch = self._launcher(fu, iu, work)
        self.ndispatched += 1
        launch()

    def _launcher(self, fu: np.ndarray, iu: np.ndarray, work: int):
        """The kernel call over every block with these uniforms, as a function of no
        argument, its run-time error raised (the caller counts it). A small one
        (``work`` lane-steps, SERIAL_WORK, or one block) runs on the calling thread; a
        runner whose kernel runs elsewhere has its own ``_launch(fu, iu)``
        (backends/cuda/device.py: on a GPU). The pointers go as ctypes objects (to the
        kernel's entry points without argtypes, ``CpuKernel.raw``: 0.3 us less a call)."""
        err, meta = self.err, self.k.meta
        elsewhere = getattr(self, "_launch", None)
        if elsewhere is not None:
            def launch():
                elsewhere(fu, iu)
                if err[0] != NO_ERROR:
                    _raise_error(err, meta, self.bound)
        else:
            a, b = ctypes.c_void_p(fu.ctypes.data), ctypes.c_void_p(iu.ctypes.data)
            parallel, serial = self.k.raw or (self.k.fn, self.k.serial)
            ptrs, nblocks = self.ptrs, self.nblocks
            word = memoryview(err)      # (its first word: 0.03 us a read, err[0] 0.07 us)
            if nblocks <= 1 or work <= SERIAL_WORK:
                def launch():           # (one Python frame a call: a replay's, replay.py)
                    serial(a, b, ptrs, nblocks)
                    if word[0] != NO_ERROR:
                        _raise_error(err, meta, self.bound)
            else:
                def launch():
                    if _omp["forked"]:
                        serial(a, b, ptrs, nblocks)
                    else:
                        _omp["used"] = True
                        parallel(a, b, ptrs, nblocks)
                    if word[0] != NO_ERROR:
                        _raise_error(err, meta, self.bound)
        launch.uniforms = (fu, iu)      # (alive while the call is: the kernel reads them)
        return launch

    def solve(self, progress: Progress) -> Solution:
        """The run: runtime/fixed.py's driver on this call's Target (target.py), its
        dispatches at most 1% of the steps apart when ``progress`` is given."""
        steps = self.bound.steps
        tick = max(1, steps // 100) if progress is not None else None
        done = fixed.run(_target.Target(self, min(self.per_call(), tick or self.per_call())),
                         progress)
        if progress is not None and steps:
            progress(steps, steps)
        return fixed.solution(self.bound, done)

    def packer(self):
        """A function of no argument returning ``_pack()`` (of one state: a copy of its
        view in the grid's shape, made once)."""
        if len(self.state) == 1:
            return self.state[0].reshape(self.bound.grid_shape).copy
        return self._pack

    def _pack(self, state: np.ndarray | None = None) -> np.ndarray:
        """(states, trajectories) as the grid's shape (+ the states axis, when several)."""
        return pack_states(self.state if state is None else state, self.bound.grid_shape)

    def _outputs(self) -> dict:
        bound = self.bound
        out = {k: np.zeros(s, bound.dtype) for k, s in bound.output_shapes.items()}
        for i, fl in enumerate(bound.field.flux):
            at = self.dep_at[i * self.nslots:(i + 1) * self.nslots]
            val = self.dep_value[i * self.nslots:(i + 1) * self.nslots]
            keep = at >= 0
            np.add.at(out[fl.output].reshape(-1), at[keep].astype(np.intp), val[keep])
        return out


INT_ROLES = frozenset({"steps", "step0", "nsteps", "final", "count", "origin", "grid", "dim",
                       "key", "max_steps", "attempts", "nsave", "every"})


def _is_int(u: dict, meta: dict) -> bool:
    return u["role"] in INT_ROLES

