"""A tolerance the working dtype cannot meet, said before the run.

An embedded error estimate is a difference of two solutions of the step; once
``rtol * |y|`` is within a few units in the last place of ``y`` it is rounding noise:
steps shrink without gaining accuracy (measured: dopri5, tsit5, bs3 and rodas4 in
float32 stop improving below rtol ~ 3e-7), and a trajectory may end with status 3.
``RTOL_FLOOR_EPS`` machine epsilons is the smallest rtol taken without a warning:
1e-6 for float32 (9.5e-7), 2e-15 for float64 (1.8e-15).
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import spelling as S
from ..errors import ToleranceWarning
from .bound import Bound

RTOL_FLOOR_EPS = 8


def rtol_floor(dtype) -> float:
    """The smallest rtol the dtype resolves: RTOL_FLOOR_EPS machine epsilons."""
    return RTOL_FLOOR_EPS * float(np.finfo(dtype).eps)


def warn_tolerance(template: Bound, stacklevel: int) -> None:
    """One ToleranceWarning when the call's rtol is below its dtype's floor."""
    adaptive = template.adaptive
    if adaptive is None:
        return
    floor = rtol_floor(template.dtype)
    if adaptive.rtol >= floor:
        return
    name = template.dtype.name
    warnings.warn(
        f"{S.name('rtol')} = {adaptive.rtol:g} is below what {name} resolves (machine "
        f"epsilon {np.finfo(template.dtype).eps:.1e}): the error estimate is rounding noise, "
        f"so steps shrink without gaining accuracy and trajectories may end with status 3; "
        f"use {S.name('rtol')} >= {floor:.0e} in {name}"
        + (f", or {S.setting('dtype', 'float64')}" if name == "float32" else ""),
        ToleranceWarning, stacklevel=stacklevel + 1)
