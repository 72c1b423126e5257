"""The wgpu backend's Simulation session of an adaptive method: runtime/adaptive_session.py's
``TargetSession`` on a private copy of the field's adaptive kernel
(templates/adaptive.wgsl.j2; the same pipeline, buffers of its own) through
adaptive_run's ``_Target``, under the runner's lock. One chunk (runner._chunks) holds
the run; a larger ensemble is a BackendError.
"""
from __future__ import annotations

from ...runtime import adaptive_session as driver
from ..shader import adaptive_host as host
from . import runner as R
from .adaptive_run import _Target


class AdaptiveSession(driver.TargetSession):
    def __init__(self, prepared, data):
        driver.no_save_at(prepared)
        bound = host.kernel_field(prepared.bound(data), session=True)   # (save code)
        R.need(bound)
        with R._lock:
            self.kernel = R.kernel_for(bound).private()
            target = _Target(self.kernel, bound)
        super().__init__(target, bound, ("wgpu", "storage buffer"), R._lock)

    def close(self) -> None:
        self.kernel.buffers.clear()
        self.kernel.group = None
