"""An adaptive method's call on GLSL (templates/adaptive.glsl.j2), or a fixed-step
method's with save_at or events (its ``solver.dense`` variant, a kernel of its own): the
kernel found, held and compiled, and runtime/adaptive.py's driver run on it through
``_Target`` (execute.Target, GL's part, shared with the fixed-step driver: one trip to
the GL context per dispatch). Chunks (plan.py) are sized so that a chunk's history fits
one storage block.
"""
from __future__ import annotations

from ...call.bound import Bound, Progress, Solution
from ...runtime import adaptive as driver
from ..shader import adaptive_host as host
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import device as gl
from .execute import Target, _pack, private_if_busy
from .kernel_cache import holding
from .lookup import kernel_of_call, need
from .plan import LIMITS, LOOP_LIMIT, device, plan_block, plan_for


def run(prepared, data, progress: Progress = None) -> Solution:
    bound = host.kernel_field(prepared.bound(data))
    need()
    found = kernel_of_call(bound)
    kernel = private_if_busy(found)     # (a call from a progress callback of its run)
    with holding(kernel):
        if kernel.program is None:
            gl.call(kernel.compile)
        try:
            target = _Target(kernel, bound)
            done = driver.run(target, progress)
        finally:
            if kernel is not found:     # a private copy: its program and buffers go
                gl.call(kernel.release)
        return host.finish(bound, kernel.meta, done, lambda rows: _pack(target.call, rows))


class _Target(Target):
    """runtime/adaptive.py's Target on a GLSL kernel: execute.Target with the
    controller's uniforms, a plan whose chunks hold their history, and the attempts'
    cap and first sizes."""

    def __init__(self, kernel, bound: Bound):
        layout = host.layout(bound, kernel.meta)
        # the history of a chunk is one buffer: chunks small enough that it fits one block
        history = host.history_bytes(kernel.meta, bound, layout, plan_block())
        super().__init__(kernel, bound, plan_for(kernel, bound, history=history).at(bound))
        self.layout = layout
        self.uniforms.update(host.controller_uniforms(bound))
        self.cap = host.dispatch_cap(kernel.meta, bound, LIMITS, device()["software"],
                                     LOOP_LIMIT)     # (aim: execute's, pacing.TARGET_SECONDS)

    def first(self, ci: int) -> int:
        return host.first_attempts(self.plan.chunks[ci].first, FIRST_ATTEMPTS)

