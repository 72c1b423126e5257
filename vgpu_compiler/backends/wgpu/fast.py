"""The one-dispatch fast path on wgpu: a signature's repeated call, made ready once
(the twin of GLSL's glsl/fast.py).

``OneDispatch`` holds what every call of one Prepared that runs as one chunk and one
dispatch repeats: which buffer takes which array, the bind group and workgroup
counts, the uniforms the signature fixes (and where the call's own go), the sizes
of the read-backs. runner.run keeps it in ``prepared.slots["wgpu_fast"]`` after the
first full run and checks that it still holds before each call; a call it does not
fit (more steps than one dispatch takes, a history) returns None and takes the
full path. The numbers are the full path's: the same kernel, buffers and bytes.
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS
from ...noise.normal import key_of
from . import device as dev
from ...runtime.fixed import param_rows, start_state
from .dispatch import _dispatch, _pack, _pack_uniforms, _raise_error


class OneDispatch:
    """See the module docstring. ``values`` are the uniforms of the run it was made
    from (runner._uniform_values, with the chunk's own: shader/plan.py); ``most`` the
    most steps one dispatch of this signature runs (its chunk's first, within the cap);
    ``made``: the limits and the adapter's limits it was made under (runner._still)."""

    def __init__(self, kernel, bound: Bound, values: list, groups: tuple, most: int,
                 made: tuple):
        meta, f = kernel.meta, bound.field
        self.kernel, self.group, self.groups, self.most = kernel, kernel.group, groups, most
        self.made = made
        self.n, self.n_states, self.grid = bound.n_trajectories, len(f.states), bound.grid_shape
        self.values = list(values)
        index = kernel.uniform_index
        self.at = {name: index[name] for name in
                   ("u_dt", "u_t0", "u_steps", "u_nsteps", "u_final", "u_step0") if name in index}
        self.scalars = [(index[u["name"]], u["of"]) for u in meta["uniforms"]
                        if u["role"] == "param"]
        self.keys = [(index[u["name"]], int(u["of"])) for u in meta["uniforms"]
                     if u["role"] == "key"]
        self.inputs = [(kernel.buffers[b["name"]], b["array"]) for b in meta["buffers"]
                       if b["role"] == "input"]
        self.outputs = [(kernel.buffers[b["name"]], b["array"],
                         4 * int(np.prod(bound.output_shapes[b["array"]])),
                         bound.output_shapes[b["array"]])
                        for b in meta["buffers"] if b["role"] == "output"]
        self.zeros = [bytes(max(16, -(-size // 16) * 16)) for _, _, size, _ in self.outputs]
        self.pt = [p.name for p in f.params if p.name in bound.per_trajectory]
        self.state = kernel.buffers["b_state"]
        self.err = kernel.buffers["b_err"]
        self.steps = kernel.buffers.get("b_steps") if meta["collapse"] else None

    def call(self, prepared, data) -> Solution | None:
        """The call's Solution, or None when it does not fit one dispatch (or the
        kernel's bind group changed): the caller then takes the full path."""
        kernel = self.kernel
        bound = prepared.bound(data)
        if (bound.steps > self.most or bound.save_every or bound.origin
                or kernel.group is not self.group):
            return None
        COUNTERS.add("memory_hits")
        d = dev.get()
        device, queue, n = d.device, d.device.queue, self.n
        values, at = list(self.values), self.at
        steps = int(bound.steps)
        for name, value in (("u_dt", float(np.float32(bound.dt))),
                            ("u_t0", float(np.float32(bound.t0))), ("u_steps", steps),
                            ("u_nsteps", steps), ("u_final", 1), ("u_step0", 0)):
            if name in at:
                values[at[name]] = value
        for i, name in self.scalars:
            values[i] = float(np.float32(bound.params[name]))
        if self.keys:
            words = key_of(bound.seed)
            for i, w in self.keys:
                values[i] = int(words[w])
        packed = _pack_uniforms(kernel, values)
        reads = [(self.err, 16), (self.state, self.n_states * n * 4)]
        if self.steps is not None:
            reads.append((self.steps, n * 4))
        reads += [(buf, size) for buf, _, size, _ in self.outputs]
        with d.lock:
            for buf, name in self.inputs:
                arr = np.ascontiguousarray(bound.inputs[name], np.float32)
                queue.write_buffer(buf, 0, arr.tobytes() or bytes(16))
            for (buf, _, _, _), zero in zip(self.outputs, self.zeros):
                queue.write_buffer(buf, 0, zero)
            state = start_state(bound)
            if state is not None:
                queue.write_buffer(self.state, 0, state.tobytes())
            if self.pt:
                queue.write_buffer(kernel.buffers["b_params"], 0,
                                   param_rows(bound, self.pt).tobytes())
            got = _dispatch(kernel, device, queue, packed, self.group, self.groups, reads)
        COUNTERS.add("dispatches")
        _raise_error(np.frombuffer(got[0], np.uint32), kernel.meta, bound)
        out_state = np.frombuffer(got[1], np.float32).reshape(self.n_states, n)
        taken = (np.frombuffer(got[2], np.int32).copy() if self.steps is not None
                 else np.full(n, steps, np.int32))
        first = 2 + (self.steps is not None)
        outputs = {name: np.frombuffer(raw, np.float32).reshape(shape).copy()
                   for (_, name, _, shape), raw in zip(self.outputs, got[first:])}
        return Solution(states=_pack(out_state, bound), outputs=outputs,
                        steps_taken=taken.reshape(self.grid))
