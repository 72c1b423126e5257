"""The cpu backend's replay of a small repeated call (call/replay.py): the ``_Call``
of a fixed-step run that was one kernel call (runner.py), kept with its buffers and
uniforms. A replay writes the new arrays into those buffers (call/replay.Plan), resets
what the kernel writes to what ``_Call`` starts it with (the states zero but h0's rows,
the start values zero, no error), makes that kernel call again (``_Call._launcher``'s:
its serial or OpenMP launch, its count, its run-time error) and packs the states as
solve does.

Only where that is the same run: the kernel reads and writes no other buffer than
those (no flux, outputs, collapse, history, events or adaptive steps: ``Replay.of``),
its one call had every step (no chunk, no progress), and its uniforms depend only on
what the plan's key and arguments fix (a scalar param's value is rewritten in place).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import get
from ...call.status import SMALL
from ..shader.faults import NO_ERROR
from .toolchain import disabled as _disabled
from .runner import _Call

# the buffers a replayed kernel may have: what it reads, and what _Call starts as zeros
ROLES = frozenset({"state", "err", "input", "params", "init"})


class Replay:
    count: list = None      # its tally of COUNTERS["dispatches"] (call/replay._store)

    def __init__(self, call: _Call):
        self.call = c = call
        meta, bound = c.k.meta, c.bound
        self.inputs, self.rows, self.init = {}, {}, None
        for i, b in enumerate(meta["buffers"]):
            if b["role"] == "input":    # (the full path's may be the caller's own array)
                own = c.buffers[i] = np.array(c.buffers[i], copy=True)
                c.ptrs[i] = own.ctypes.data
                self.inputs[b["array"]] = own
            elif b["role"] == "params":
                self.rows = {p: c.buffers[i][j].reshape(bound.grid_shape)
                             for j, p in enumerate(bound.per_trajectory)}
            elif b["role"] == "init":
                self.init = c.buffers[i]
        # the call's Bound without the caller's arrays (errors read the inputs' shapes)
        c.bound = dataclasses.replace(bound, h0=None, inputs=dict(self.inputs), params={
            k: None if isinstance(v, np.ndarray) else v for k, v in bound.params.items()})
        self.launch = c.dispatched          # its one kernel call (_Call._launcher)
        self.free = c.nfree > 0
        self.word = memoryview(c.err)       # (its first word: 0.03 us a write, err[0] 0.07)
        # the sum of the states the last run left: NaN or inf when one is (Plan.run's
        # cheap check before warn_nonfinite's exact one; a dot with ones: 0.35 us for 256
        # float32, numpy's add.reduce 1.2 us)
        flat = c.state.reshape(-1)
        self.total = (functools.partial(np.add.reduce, flat) if flat.size > SMALL else
                      functools.partial(flat.dot, np.ones(flat.size, flat.dtype)))
        self.backend = get("cpu")
        self.pack = c.packer()

    @classmethod
    def of(cls, call) -> "Replay | None":
        """The replay of ``call`` just run, or None where a replay would not be that run."""
        b = call.bound
        if (type(call) is not _Call or getattr(call, "ndispatched", 0) != 1 or b.origin
                or b.save_every is not None or b.adaptive is not None or b.save_at is not None
                or b.field.flux or b.field.collapse is not None
                or any(x["role"] not in ROLES for x in call.k.meta["buffers"])):
            return None
        return cls(call)

    def input_buffer(self, name: str) -> np.ndarray:
        return self.inputs[name]

    def param_row(self, name: str) -> np.ndarray:
        """A per-trajectory param's row of the params buffer, in the grid's shape."""
        return self.rows[name]

    def param_slot(self, name: str):
        """(uniforms, index) of a scalar param's value, or None if the kernel reads none."""
        i = self.call.param_slot.get(name)
        return None if i is None else (self.launch.uniforms[0], i)

    def run(self, h0) -> np.ndarray | None:
        """The states of the call again (its arrays written: call/replay.Plan); None where
        the full path would not run it here: the backend is no longer the registry's
        cpu, or VGPU_NO_CPU was set since (the compiler's probe is made once). The
        states are zeroed only where the kernel does not write them all (it sets every
        state with a start expression in its first step): the rows of h0 without one."""
        if get("cpu") is not self.backend or _disabled():
            return None
        c = self.call
        if h0 is not None:
            c.load_h0(h0)
        elif self.free:
            c.state.fill(0)
        if self.init is not None:
            self.init.fill(0)
        self.word[0] = NO_ERROR     # (a fault writes the index words with the id)
        self.count[0] += 1          # (COUNTERS' tally of the plan, under the plan's lock)
        self.launch()
        return self.pack()
