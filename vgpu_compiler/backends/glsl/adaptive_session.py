"""The GLSL backend's Simulation session of an adaptive method: runtime/adaptive_session.py's
``TargetSession`` on a private copy of the field's adaptive kernel
(templates/adaptive.glsl.j2) through adaptive_run's ``_Target`` (one trip to the GL context
per dispatch). One storage block holds the run (one chunk of plan.py); a larger ensemble
is a BackendError.
"""
from __future__ import annotations

import weakref

from ...runtime import adaptive_session as driver
from ..shader import adaptive_host as host
from . import lookup
from .adaptive_run import _Target
from .session import _release, private_kernel


class AdaptiveSession(driver.TargetSession):
    def __init__(self, prepared, data):
        driver.no_save_at(prepared)
        lookup.need()
        bound = host.kernel_field(prepared.bound(data), session=True)   # (save code)
        k = private_kernel(lookup.kernel_of_call(bound))
        self._free = weakref.finalize(self, _release, k)
        self._free.atexit = False
        super().__init__(_Target(k, bound), bound, ("glsl", "storage block"))

    def close(self) -> None:
        self._free()
