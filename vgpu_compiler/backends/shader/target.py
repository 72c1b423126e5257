"""What the drivers' Target (runtime/fixed.py, runtime/adaptive.py and the Simulation
sessions) of a shader kernel takes from the kernel's plan (plan.py), written once for
glsl (glsl/execute.Target) and wgpu (wgpu/runner.Target): the chunks and their first
sizes, the cap of a dispatch, the outputs read back, the largest storage block, and the
check of a dispatch's error slot. The backend's subclass does its device's part of the
protocol: ``begin`` (a chunk's states and params written), ``trip`` (writes, one
dispatch, the error slot and reads), ``read``; it sets ``bound`` and ``layout``."""
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
