"""``save_every`` histories written by the shader: the step loop stores every saved
step's state into a history buffer (``b_hist``) inside the dispatch, so a history costs
no dispatch per saved state; each dispatch's saved steps are read back after it.

The history kernel is the field's kernel built with ``history=True`` (shader/lower.py),
cached beside it under its own key (the plain kernel's key plus ``-h``:
lookup.kernel_of_call's ``history``), and run by runtime/fixed.py's driver
(execute.execute: each dispatch ends where the history buffer is full, and reads back
its saved steps). Fields with ``collapse`` keep the plain
kernel (a dispatch ends at every saved step): a collapsed basin repeats its final state
in the history, which the loop, stopped, does not write.
"""
from __future__ import annotations

from ...call.bound import Bound, Progress, Solution
from ...errors import BackendError
from . import device as gl
from .execute import execute, private_if_busy
from .kernel_cache import holding
from . import lookup


def run(bound: Bound, progress: Progress) -> Solution:
    if not lookup.available():
        raise BackendError(f"no OpenGL 4.3 context can be made here ({gl.GL.error})")
    found = lookup.kernel_of_call(bound, history=True)
    kernel = private_if_busy(found)
    with holding(kernel):
        sol = execute(kernel, bound, progress)     # (runtime/fixed.py: its kernel writes b_hist)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol

