"""The one-dispatch fast path: a signature's repeated call, made ready once.

``OneDispatch`` holds what every call of one Prepared that runs as one chunk and
one dispatch repeats (runner.run keeps it in the Prepared's slots and checks it is
still good before each call); everything else runs ``execute.execute``.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS
from . import device as gl
from .plan import LIMITS, Plan
from ..shader.faults import raise_error
from .execute import (NO_ERROR_BYTES, _forget, _segment, key_uniforms,
                      _set_uniforms, bind_buffers)
from .kernel_cache import let_go
from .special import fixed_values, program_for

# --- a signature's one-dispatch call, made ready once ------------------------------------
class OneDispatch:
    """What every call of one signature (one Prepared) that runs as one chunk and one
    dispatch repeats, worked out once after its first run (runner.run keeps it in the
    Prepared's slots): the plan and chunk, the uniforms fixed by the signature, which
    buffer takes which array, the shapes of the results. A repeated call converts its
    data (the API did), writes, dispatches and reads in one GL trip, and builds its
    Solution: what ``execute`` does, without the work whose result the signature
    already decides. Runs with deposits (float64 flux), a history or progress take
    ``execute``; so does a call that finds anything changed (runner.run checks).

    ``call(data)`` returns the Solution, or None when the kernel's program was released
    (evicted) since it was found: the caller then takes the full path."""

    def __init__(self, kernel, bound: Bound, plan: Plan):
        self.kernel, self.base, self.prepared = kernel, kernel.base, bound.prepared
        self.plan = plan
        self.made = (LIMITS.in_force, gl.GL.ctx)     # (runner._still)
        self.chunk = chunk = plan.chunks[0]
        self.groups = chunk.groups
        meta, f = kernel.meta, bound.field
        self.dtype, self.cast = bound.dtype, bound.dtype.type
        self.n = n = bound.n_trajectories
        self.n_states = len(f.states)
        self.grid = bound.grid_shape
        self.steps = bound.steps
        cast = self.cast
        self.fixed = {"u_dt": float(cast(bound.dt)), "u_t0": float(cast(bound.t0)),
                      "u_steps": int(bound.steps), **_segment(0, bound.steps, bound.steps)}
        # the int uniforms a specialised program may hold as constants (special.py)
        self.special = fixed_values(
            bound.prepared.fixed_steps, bound.steps,
            {**chunk.uniforms, "u_steps": int(bound.steps),
             **_segment(0, bound.steps, bound.steps)})
        self.scalars = plan.scalars
        self.inputs = plan.inputs
        self.outputs = tuple((buffer, name, size, bound.output_shapes[name])
                             for buffer, name, size in plan.outputs)
        self.zeros = tuple((buffer, bytes(size)) for buffer, _, size in plan.outputs)
        self.rows = [k for k, s in enumerate(f.states) if s.init is None]
        self.pt = plan.pt
        self.collapse = bool(meta["collapse"])
        self.noisy = bool(f.noises)
        self.state_bytes = self.n_states * n * self.dtype.itemsize
        self.taken = np.full(self.grid, self.steps, np.int32)   # copied for each call

    @staticmethod
    def fits(kernel, bound: Bound, plan: Plan) -> bool:
        """True when every call of ``bound``'s signature is one chunk, one dispatch."""
        return (not bound.save_every and plan.one_dispatch(bound.steps)
                and not kernel.meta["n_deposits"] and plan.chunks[0].a == 0
                and plan.chunks[0].b == bound.n_trajectories)

    def call(self, data) -> Solution | None:
        dtype, n = self.dtype, self.n
        state = None
        if data.h0 is not None:
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
        base = self.base
        base.lock.acquire()
        try:
            got = gl.GL.call(self._trip, data.inputs, state, params, uniforms)
        finally:
            let_go(base)
        if got is None:
            return None
        COUNTERS.add_both("memory_hits", "dispatches")
        err, raw, steps, outputs = got
        if err is not None:
            raise_error(err, self.kernel.meta, self._bound(data))
        if self.n_states == 1:
            states = raw                # read in the grid's shape (_trip)
        else:
            states = np.ascontiguousarray(raw.reshape(self.n_states, n).T).reshape(
                self.grid + (self.n_states,))
        if steps is None:
            steps = self.taken.copy()
        else:
            steps = steps.reshape(self.grid)
        return Solution(states, outputs, steps)

    def _bound(self, data) -> Bound:
        return self.prepared.bound(data)

    def _trip(self, ctx, inputs, state, params, uniforms):
        k = self.base
        if k.program is None:       # released since found: the full path copes
            return None
        try:
            special = None
            if self.special is not None:
                special = program_for(ctx, k, self.special)
            if special is not None:     # the chunk's and steps' uniforms are constants
                if special.uniform_owner is not self:
                    _set_uniforms(special, self.fixed)
                    special.uniform_owner = self
                if uniforms is not None:
                    _set_uniforms(special, uniforms)
                    special.uniform_owner = self
                program = special.program
            else:
                if k.uniform_owner is not self:
                    if k.chunk_uniforms is not self.chunk.uniforms:
                        _set_uniforms(k, self.chunk.uniforms)
                        k.chunk_uniforms = self.chunk.uniforms
                    _set_uniforms(k, self.fixed)
                    k.uniform_owner = self
                if uniforms is not None:
                    _set_uniforms(k, uniforms)
                    k.uniform_owner = self      # (only the scalars changed)
                program = k.program
            bind_buffers(k)
            buffers = k.buffers
            for buffer, name in self.inputs:
                buffers[buffer].write(inputs[name])
            for buffer, zeros in self.zeros:
                buffers[buffer].write(zeros)
            err = buffers["b_err"]
            if k.err_dirty:
                err.write(NO_ERROR_BYTES)
                k.err_dirty = False
            if state is not None:
                buffers["b_state"].write(state)
            if params is not None:
                buffers["b_params"].write(params)
            program.run(*self.groups)
            ctx.memory_barrier()
            if err.read(4) != NO_ERROR_BYTES[:4]:
                k.err_dirty = True
                return np.frombuffer(err.read(16), np.uint32), None, None, None
            raw = np.empty(self.grid if self.n_states == 1 else self.n_states * self.n,
                           self.dtype)
            buffers["b_state"].read_into(raw, self.state_bytes)
            steps = None
            if self.collapse:
                steps = np.empty(self.n, np.int32)
                buffers["b_steps"].read_into(steps, 4 * self.n)
            outputs = {}
            for buffer, name, size, shape in self.outputs:
                out = outputs[name] = np.empty(shape, self.dtype)
                if size:
                    buffers[buffer].read_into(out, size)
            return None, raw, steps, outputs
        except BaseException:       # stopped part way: trust no cached GL state
            _forget(k)
            for special in k.specials.values():
                if special is not None:
                    special.uniform_values, special.uniform_owner = {}, None
            raise

