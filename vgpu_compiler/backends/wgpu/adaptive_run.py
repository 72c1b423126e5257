"""An adaptive method's call on wgpu (templates/adaptive.wgsl.j2), or a fixed-step
method's with ``save_at`` or events (its field's ``solver.dense`` variant, a kernel of
its own): the kernel found and runtime/adaptive.py's driver run on it through
``_Target`` (runner.Target, wgpu's part, shared with the fixed-step driver: a dispatch
and its read-backs are one command buffer and one mapping, dispatch.py). Chunks
(the kernel's plan, shader/plan.py) are sized for the history too; on a CPU adapter a dispatch never runs
more attempts than the loop limiter of lavapipe's code generator allows.
"""
from __future__ import annotations


from ...call.bound import Bound, Solution
from ...runtime import adaptive as driver
from ..shader import adaptive_host as host
from ..shader.adaptive_host import FIRST_ATTEMPTS
from . import device as dev
from . import runner as R
from .dispatch import _pack


def run(prepared, data, progress=None) -> Solution:
    """An adaptive method's call, or a fixed-step method's with save_at or events."""
    bound = host.kernel_field(prepared.bound(data))
    R.need(bound)
    kernel = R.kernel_for(bound)
    if R._here.inside(kernel):                      # inside a progress callback of its run
        kernel = kernel.private()
    with R._lock:
        done = driver.run(_Target(kernel, bound), progress)
        return host.finish(bound, kernel.meta, done, lambda rows: _pack(rows, bound))


class _Target(R.Target):
    """runtime/adaptive.py's Target on a wgpu kernel: runner.Target with the controller's
    uniforms, chunks that hold their history, and the attempts' cap and first sizes."""

    def __init__(self, kernel: R.Kernel, bound: Bound):
        meta = kernel.meta
        layout = host.layout(bound, meta)
        # the history of a chunk is one buffer: chunks small enough that it fits one block
        super().__init__(kernel, bound, history=host.history_bytes(meta, bound, layout,
                                                                   R.plan_block()))
        self.layout = layout
        for name, value in host.controller_uniforms(bound).items():
            self.put(name, value)
        self.cap = host.dispatch_cap(meta, bound, R.LIMITS, dev.software(), R.LOOP_LIMIT)

    def first(self, ci: int) -> int:
        return host.first_attempts(self.plan.chunks[ci].first, FIRST_ATTEMPTS)
