"""``save_every`` histories stored by the C kernel itself (as the GPU backends' shaders
do): the kernel is built with ``history=True`` and its history buffer is the history
array (each call's from the slot of its first saved step on), so a history costs no kernel call per saved step (each call is an OpenMP
parallel region: thousands of them cost more than the steps). Calls end only where
runner.py's would without a history (work per call, progress ticks)."""
from __future__ import annotations

import numpy as np

from ...call.bound import Progress, Solution, saved_steps
from .dispatch import _kernel
from . import runner
from .runner import _Call


class _HistoryCall(_Call):
    def __init__(self, k, bound, saved: np.ndarray):
        self.saved = saved          # (saved steps, states, trajectories): the kernel's layout
        super().__init__(k, bound)

    def _buffer(self, b: dict) -> np.ndarray:
        if b["role"] == "history":
            return self.saved
        return super()._buffer(b)


def run(prepared, data, progress: Progress = None) -> Solution:
    bound = prepared.bound(data)
    k = _kernel(prepared, bound, dense=False, history=True)
    steps, every = bound.steps, bound.save_every
    at = saved_steps(steps, every)
    n_states, n = len(bound.field.states), bound.n_trajectories
    saved = np.empty((len(at), n_states, n), bound.dtype)
    call = _HistoryCall(k, bound, saved)
    call.ints[call.role["every"]] = every
    slot = [b["role"] for b in k.meta["buffers"]].index("history")
    call._call(0, 0, steps == 0)                # the start values (flux too when no step)
    saved[0] = call.state
    tick = max(1, steps // 100) if progress is not None else steps
    chunk = max(1, runner.WORK_PER_CALL // max(1, call.nslots))
    start = 0
    while start < steps:
        end = min(steps, start + chunk, (start // tick + 1) * tick)
        first = min(start // every + 1, len(at) - 1)    # the call's first saved step
        call.ptrs[slot] = saved[first].ctypes.data
        call._call(start, end - start, end == steps)
        if progress is not None and (end % tick == 0 or end == steps):
            progress(end, steps)
        start = end
    sol = Solution(states=call._pack(), outputs=call._outputs(),
                   steps_taken=np.full(bound.grid_shape, steps, np.int32))
    shape = (len(at),) + bound.grid_shape + ((n_states,) if n_states > 1 else ())
    sol.history = saved.transpose(0, 2, 1).reshape(shape)
    dt = bound.dtype
    sol.times = (dt.type(bound.t0) + np.asarray(at).astype(dt) * dt.type(bound.dt)).astype(dt)
    return sol
