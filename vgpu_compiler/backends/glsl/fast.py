"""The one-dispatch fast path on GLSL: shader/fast.py's OneDispatch (the algorithm),
with its one GL trip (the program, specialised or not, its uniforms, the buffers).

runner.run keeps it in the Prepared's ``slots["glsl_fast"]`` and checks it is still
good before each call; runs with deposits (float64 flux) take ``execute``.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound
from . import device as gl
from .plan import LIMITS, Plan
from ..shader import fast as shared
from ...runtime.fixed import segment
from .execute import NO_ERROR_BYTES, _forget, _set_uniforms, bind_buffers
from .kernel_cache import let_go
from .special import fixed_values, program_for


class OneDispatch(shared.OneDispatch):
    """shader/fast.py's, on the kernel's program (or its specialisation: special.py,
    whose int uniforms of the chunk and steps are constants), in one GL trip."""

    def __init__(self, kernel, bound: Bound, plan: Plan):
        super().__init__(kernel, bound, plan, (LIMITS.in_force, gl.GL.ctx))
        self.base = kernel.base
        self.special = fixed_values(
            bound.prepared.fixed_steps, bound.steps,
            {**self.chunk.uniforms, "u_steps": self.steps,
             **segment(0, self.steps, self.steps)})
        self.zeros = tuple((buffer, bytes(size)) for buffer, _, size in plan.outputs)

    @staticmethod
    def fits(kernel, bound: Bound, plan: Plan) -> bool:
        return shared.OneDispatch.fits(bound, plan) and not kernel.meta["n_deposits"]

    def _trip(self, inputs, state, params, uniforms):
        base = self.base
        base.lock.acquire()
        try:
            return gl.GL.call(self._on_gl, inputs, state, params, uniforms)
        finally:
            let_go(base)

    def _on_gl(self, ctx, inputs, state, params, uniforms):
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
