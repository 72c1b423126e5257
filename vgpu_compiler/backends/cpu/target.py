"""The cpu backend's ``Target`` of runtime's host drivers (runtime/fixed.py, runtime/
adaptive.py, the Simulations of runtime/fixed_session.py and adaptive_session.py): the
"device" is the C library called on a ``_Call``'s numpy arrays (runner.py), so what is
cpu-particular is only this:

- a buffer is one of the kernel's arrays, found by its name (meta["buffers"]); a write
  copies bytes into it (an input's gets a new array: never the caller's, nor an array a
  Simulation was given), a read is a view of it (no copy: a driver copies what it keeps
  past the call's life), and a read that names where its bytes go (fixed.py's history, one chunk) points
  the kernel at that place instead, so the kernel writes the history where it is kept;
- the uniforms a trip sets stay set (as a GPU's uniform block does), by their names;
- a trip is one C call (runner._Call._run: serial or OpenMP, its run-time
  error raised as the shaders' error slot is: ``check`` has nothing left to do);
- the outputs are no buffers of the kernel (its flux deposits are summed on the host in
  the reference's lane order, runner._Call._outputs): ``outputs`` names one virtual
  buffer per output, whose read is that sum;
- the C kernel counts no running trajectories (``b_run``): the host counts b_cnt's
  status row; its event log (flux inside `when`) is summed after each call;
- one chunk, the whole ensemble (host memory); a dispatch runs at most about
  ``runner.WORK_PER_CALL`` lane-steps (``cap``: Ctrl-C is seen between C calls), paced
  to TARGET_CPU_SECONDS.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ...runtime import fixed
from ...runtime.adaptive import RUNNING
from ...runtime.pacing import TARGET_CPU_SECONDS
from ...runtime.progress import Nesting
from ..shader import adaptive_host as host

OUT = "out:"                # a virtual buffer's name: an output's sums (see the module)
_here = Nesting()           # (no kernel is shared by two runs on cpu: only the protocol's)


class Target:
    nesting = _here
    block = 1 << 62         # host memory: no storage block to split at
    aim = TARGET_CPU_SECONDS

    def __init__(self, call, cap: int, adaptive: bool = False):
        """``cap``: the steps (``adaptive``: attempts) a dispatch runs at most."""
        self.call, self.kernel, self.bound = call, call.k, call.bound
        meta, bound = call.k.meta, call.bound
        # (no float64 deposit slots on cpu: its kernel keeps every deposit, runner.py; no
        # event log of records either: its own is summed after each call, adaptive_run.py)
        if adaptive:
            self.layout = dataclasses.replace(host.layout(bound, meta), deposit_outputs=(),
                                              log_fields=0)
        else:
            self.layout = dataclasses.replace(fixed.layout(bound, meta), deposit_outputs=())
        self.chunks = [(0, call.n)]
        self.cap = cap
        self.log = bool(getattr(call, "ev_outputs", None))
        self.index = {b["name"]: i for i, b in enumerate(meta["buffers"])}
        self.outputs = [(OUT + name, name, int(np.prod(shape)) * bound.dtype.itemsize)
                        for name, shape in bound.output_shapes.items()]
        self.inputs = [(b["name"], b["array"]) for b in meta["buffers"] if b["role"] == "input"]
        self.pt = list(bound.per_trajectory)

    def first(self, ci: int) -> int:
        return self.cap

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        self._write(writes)             # (``sizes``: the call's arrays are made whole)

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        if writes:
            self._write(writes)
        c, slots = self.call, self.call.slots
        for name, value in uniforms.items():
            slot = slots.get(name)
            if slot is not None:
                slot[0][slot[1]] = value
        for read in reads:
            if len(read) == 3:          # (into, offset): the kernel writes it there
                c.ptrs[self.index[read[0]]] = read[2][0].ctypes.data + read[2][1]
        attempts = uniforms.get("u_attempts", 0)
        c._run(c.ints, max(uniforms.get("u_nsteps", 0), attempts, 1))
        if self.log:                    # the event log of the call, summed
            c._add_log(attempts)
        return [b""] + self.read(reads) if reads else [b""]

    def check(self, err: bytes) -> None:
        """(the C call raised its run-time error already: runner._Call._launcher)"""

    def read(self, reads: list) -> list:
        got, sums = [], None
        for name, size, *into in reads:
            if into:                    # (written in place by the kernel: trip)
                got.append(b"")
            elif name == "b_run":       # (the trajectories still running: b_cnt's status)
                running = np.count_nonzero(self.call.cnt[2] == RUNNING)
                got.append(np.uint32(running).tobytes())
            elif name.startswith(OUT):
                sums = sums if sums is not None else self.call._outputs()
                got.append(sums[name[len(OUT):]].reshape(-1).view(np.uint8))
            else:
                got.append(self._bytes(name)[:size])
        return got

    def rebind(self, bound) -> None:
        """New values of the same signature: the scalar params' uniforms."""
        c = self.call
        for name, slot in c.param_slot.items():
            c.floats[slot] = bound.params[name]
        c.bound = self.bound = bound

    def _bytes(self, name: str) -> np.ndarray:
        return self.call.buffers[self.index[name]].reshape(-1).view(np.uint8)

    def _write(self, writes: list) -> None:
        c, buffers = self.call, self.call.k.meta["buffers"]
        for name, data in writes:
            if name.startswith(OUT):    # (the kernel's deposits: rewritten by a final call)
                continue
            i = self.index[name]
            raw = np.frombuffer(data, np.uint8)
            if buffers[i]["role"] == "input":
                new = raw.copy().view(c.buffers[i].dtype)
                c.buffers[i], c.ptrs[i] = new, new.ctypes.data
            else:
                self._bytes(name)[:len(raw)] = raw
