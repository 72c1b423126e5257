"""What the drivers' Target (runtime/fixed.py, runtime/adaptive.py and the Simulation
sessions) of a shader kernel takes from the kernel's plan (plan.py), written once for
glsl (glsl/execute.Target) and wgpu (wgpu/runner.Target): the chunks and their first
sizes, the cap of a dispatch, the outputs read back, the largest storage block, and the
check of a dispatch's error slot. The backend's subclass does its device's part of the
protocol: ``begin`` (a chunk's states and params written), ``trip`` (writes, one
dispatch, the error slot and reads, ``chunk_writes`` the buffers a chunk starts with),
``read``, ``put`` (one uniform's value for the next dispatch); it sets ``bound`` and
``layout``."""
from __future__ import annotations

import numpy as np

from .faults import raise_error
from .plan import Plan


class PlanTarget:
    nesting = None              # the backend's runtime/progress.Nesting (a class attribute)

    def __init__(self, kernel, plan: Plan, aim: float):
        self.kernel, self.plan = kernel, plan
        self.chunks = [(c.a, c.b) for c in plan.chunks]
        self.cap, self.aim = plan.cap, aim
        self.outputs = plan.outputs

    @property
    def block(self) -> int:
        """The largest storage block (a history's buffer is at most that)."""
        return self.plan.block

    def first(self, ci: int) -> int:
        """The steps of chunk ``ci``'s first dispatch (then paced by time)."""
        return self.plan.chunks[ci].first

    def check(self, err: bytes) -> None:
        """A dispatch's error slot (shader/faults.py) raised as the user's error."""
        raise_error(np.frombuffer(err, np.uint32), self.kernel.meta, self.bound)

    def rebind(self, bound) -> None:
        """A session's call with new scalar params (runtime/fixed_session.py): their
        uniforms, as the kernel's dtype holds them."""
        cast = bound.dtype.type
        for uniform, name in self.plan.scalars:
            self.put(uniform, float(cast(bound.params[name])))
        self.bound = bound


def chunk_writes(meta: dict, bound, state, params, a: int, b: int) -> list:
    """The buffers chunk [a, b) of a run starts with: (buffer, bytes, data or None: made,
    not written): its states (``state``, (n_states, N): given by h0; None: every state
    starts from its expression, in-shader), the start states' copy (``init``), the
    steps taken (collapse), its per-trajectory params (``params``, (n_pt, N), or None),
    its deposit slots (float64 flux, -1: empty)."""
    count, n_states, item = b - a, len(bound.field.states), bound.dtype.itemsize
    out = [("b_state", n_states * count * item,
            None if state is None else np.ascontiguousarray(state[:, a:b]))]
    if meta["uses_init"]:
        out.append(("b_init", n_states * count * item, None))
    if meta["collapse"]:
        out.append(("b_steps", 2 * count * 4, None))
    if params is not None:
        p = np.ascontiguousarray(params[:, a:b])
        out.append(("b_params", p.nbytes, p))
    if meta.get("n_deposits"):
        dep = np.full(2 * meta["n_deposits"] * count, -1.0, bound.dtype)
        out.append(("b_dep", dep.nbytes, dep))
    return out
