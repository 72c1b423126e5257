"""``save_every`` histories written by the WGSL shader (as glsl/history.py does for GLSL):
the step loop stores every saved step's state into ``b_hist`` inside the dispatch; each
dispatch's saved states are copied into the staging buffer with the dispatch's own
read-backs (one map per dispatch). The kernel is runner.kernel_for's (``history``),
run by runtime/fixed.py's driver (runner._execute). Fields with ``collapse`` keep the
plain kernel (a dispatch ends at every saved step: a collapsed basin repeats its final
state, which the stopped loop does not write)."""
from __future__ import annotations

from ...call.bound import Bound, Solution
from ...errors import BackendError
from . import device as dev
from .runner import _execute, _here, _lock, kernel_for


def run(bound: Bound, progress) -> Solution:
    if not dev.available():
        raise BackendError(f"no wgpu device here ({dev.get().error})")
    kernel = kernel_for(bound, history=True)
    if _here.inside(kernel):                        # inside a progress callback of its run
        kernel = kernel.private()
    with _lock:
        sol = _execute(kernel, bound, progress)    # (runtime/fixed.py: its kernel writes b_hist)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol
