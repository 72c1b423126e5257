"""The one-dispatch fast path of the shader backends: a signature's repeated call, made
ready once.

``OneDispatch`` holds what every call of one Prepared that runs as one chunk and one
dispatch repeats, worked out once after its first full run (each runner keeps it in
the Prepared's slots, ``glsl_fast`` / ``wgpu_fast``, and checks that it still holds
before each call: KernelCache.still): the plan's chunk, the uniforms the signature
fixes, which buffer takes which array, the shapes of the results. A repeated call
lays out its data (the API converted it), hands it to the backend's one trip to the
device (``_trip``: write the call's arrays and uniforms, dispatch once, read back) and
builds its Solution: what the full path does, without the work whose result the
signature already decides. Runs with a history or progress, or a window's (origin),
take the full path; so does a call the backend finds changed (``_trip`` returns None).

A backend subclasses it with its ``_trip`` (glsl/fast.py, wgpu/fast.py); the
algorithm is here once.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS
from ...runtime.fixed import segment
from .faults import raise_error
from .plan import Plan, key_uniforms


class OneDispatch:
    """See the module docstring. ``made``: what it was made under (the limits in force
    and the device's own: runner._still compares). ``call(data)`` returns the Solution,
    or None when the backend's trip found the kernel changed since (released, a new bind
    group): the caller then takes the full path."""

    def __init__(self, kernel, bound: Bound, plan: Plan, made: tuple):
        meta, f = kernel.meta, bound.field
        self.kernel, self.prepared, self.plan, self.made = kernel, bound.prepared, plan, made
        self.chunk = chunk = plan.chunks[0]
        self.groups = chunk.groups
        self.dtype, self.cast = bound.dtype, bound.dtype.type
        self.n = n = bound.n_trajectories
        self.n_states = len(f.states)
        self.grid = bound.grid_shape
        self.steps = steps = int(bound.steps)
        cast = self.cast
        # the uniforms the signature fixes (its dt, t0 and steps: one dispatch of them all)
        self.fixed = {"u_dt": float(cast(bound.dt)), "u_t0": float(cast(bound.t0)),
                      "u_steps": steps, **segment(0, steps, steps)}
        self.scalars = plan.scalars                 # (uniform, param name)
        self.inputs = plan.inputs                   # (buffer, input name)
        self.outputs = tuple((buffer, name, size, bound.output_shapes[name])
                             for buffer, name, size in plan.outputs)
        self.rows = [k for k, s in enumerate(f.states) if s.init is None]
        self.pt = plan.pt
        self.collapse = bool(meta["collapse"])
        self.noisy = bool(f.noises)
        self.state_bytes = self.n_states * n * self.dtype.itemsize
        self.taken = np.full(self.grid, steps, np.int32)     # copied for each call

    @staticmethod
    def fits(bound: Bound, plan: Plan) -> bool:
        """True when every call of ``bound``'s signature is one chunk, one dispatch, of
        the whole ensemble, with no history (a backend may ask more: its ``fits``)."""
        return (not bound.save_every and not bound.origin and plan.one_dispatch(bound.steps)
                and plan.chunks[0].a == 0 and plan.chunks[0].b == bound.n_trajectories)

    def call(self, data) -> Solution | None:
        dtype, n = self.dtype, self.n
        state = None
        if data.h0 is not None:         # the states with a start expression left 0
            state = np.zeros((self.n_states, n), dtype)
            state[self.rows] = data.h0.reshape(n, -1).T
        params = None
        if self.pt:
            params = np.zeros((len(self.pt), n), dtype)
            for k, name in enumerate(self.pt):
                params[k] = np.asarray(data.params[name], dtype).reshape(n)
        uniforms = None
        if self.scalars:
            cast, values = self.cast, data.params
            uniforms = {u: float(cast(values[name])) for u, name in self.scalars}
        if self.noisy:          # the noise key: a uniform per call, like a scalar param
            uniforms = {**(uniforms or {}), **key_uniforms(self.kernel.meta, data.seed)}
        got = self._trip(data.inputs, state, params, uniforms)
        if got is None:
            return None
        COUNTERS.add_both("memory_hits", "dispatches")
        err, raw, steps, outputs = got
        if err is not None:
            raise_error(err, self.kernel.meta, self.prepared.bound(data))
        if self.n_states == 1:
            states = raw
        else:
            states = np.ascontiguousarray(raw.reshape(self.n_states, n).T).reshape(
                self.grid + (self.n_states,))
        steps = self.taken.copy() if steps is None else steps.reshape(self.grid)
        return Solution(states, outputs, steps)

    def _trip(self, inputs: dict, state, params, uniforms: dict | None):
        """The backend's one trip to the device: write ``inputs`` (name -> array),
        zero the outputs, write ``state`` ((n_states, N) or None: keep the kernel's start
        expressions) and ``params`` ((per-trajectory params, N) or None), set the fixed
        uniforms and ``uniforms`` (this call's scalars and noise key, or None), dispatch
        ``groups`` once, read back. Returns (err, state, steps, outputs): err None, or
        the error slot's uint32 words when it reports; the state, a fresh writable array
        of the working dtype (the grid's shape for one state, else N * n_states values);
        steps None (every trajectory took ``steps``: no collapse) or N int32; outputs:
        name -> a fresh array of its shape. None when the kernel changed since (the
        caller takes the full path)."""
        raise NotImplementedError
