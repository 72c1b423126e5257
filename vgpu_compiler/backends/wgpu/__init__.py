"""The WGSL backend: IR Field -> one WGSL compute shader, run through wgpu.

The same three stages as GLSL, shared in backends/shader: ``describe`` (the GPU
mapping, in no language), ``print_kernel`` with the WGSL dialect (dialect.py), and
``render_kernel`` through templates/field.wgsl.j2. WGSL has no float64: a float64
call is a BackendError naming the backend (``auto`` moves on to GLSL or numpy).
Events (``when``, ``stop when``) run in the adaptive template, a fixed-step method's
too (codegen/build/events.py, shader/events.py), as on GLSL; ``shader/events.check``
names what they do not cover.
"""
from __future__ import annotations

from ... import spelling as S
from ...errors import BackendError
from .. import fastest
from ...ir import observers as _observers
from ...ir.nodes import Field
from ..shader import adaptive, rosenbrock
from ..shader import events as _events
from ..shader.lower import REDUCTIONS, describe
from ..shader.printing import PrintedKernel, print_kernel
from ..shader.template import render_kernel
from .dialect import DIALECTS, WGSL

VERSION = "wgsl-1"
MEMORY_CAPACITY = 64    # kernels in its memory cache (disk_cache.MEMORY)
MAX_STATES = 256        # as GLSL: the driver's compile time grows fast with the states


def check_dtype(dtype: str, span=None) -> None:
    if dtype not in DIALECTS:
        instead = fastest(dtype, exclude=("wgpu",))     # the fastest that has the dtype
        also = ""
        if instead == "glsl":       # which lacks some float64 functions (shader/dialect.py)
            also = (f" ({S.setting('backend', fastest(dtype, exclude=('wgpu', 'glsl')))} "
                    f"where GLSL has no double-precision version of a function)")
        raise BackendError(
            f"the wgpu backend has no {dtype} (WGSL has no 64-bit floats); use "
            f"{S.setting('dtype', 'float32')}, or {S.setting('backend', instead)} for "
            f"{dtype}{also}", span=span)


def lower(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None, reduction: str = "tree",
          history: bool = False) -> PrintedKernel:
    """The kernel description of ``field`` printed in WGSL."""
    check_dtype(dtype, field.span)
    _events.check(field, "wgpu")
    kernel = describe(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                      source=source, reduction=reduction, history=history)
    adaptive_method = field.solver.adaptive is not None or field.solver.dense
    located = _observers.located(field)     # events, or an observer `first` to locate
    try:
        if not adaptive_method and not located:
            return print_kernel(kernel, DIALECTS[dtype])
        # bs3, dopri5, tsit5 (and save_at): templates/adaptive.wgsl.j2, shader/adaptive.py;
        # events (codegen/build/events.py, shader/events.py): a fixed-step method's in
        # the same template (its dense variant, adaptive_host.kernel_field)
        kernel = adaptive.extend(kernel, field)
        if field.jacobian is not None:   # rodas4: the Jacobian, W's LU, the stage solves
            kernel = rosenbrock.extend(kernel, field)
        if located:
            kernel = _events.extend(kernel, field, rows=bool(field.events))
        printed = print_kernel(kernel, DIALECTS[dtype])
        printed.ad = adaptive.print_parts(printed, DIALECTS[dtype])
        if located:
            printed.ev = _events.print_parts(printed, DIALECTS[dtype], adaptive.RUNNING)
        return printed
    except RecursionError:
        raise BackendError(f"an expression of field `{field.name}` is nested too deeply for "
                           f"the wgpu backend; write it in smaller pieces, or use "
                           f"{S.setting('backend', 'numpy')}", span=field.span) from None


def emit_wgsl(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
              source: str | None = None, reduction: str = "tree") -> str:
    """The WGSL compute shader of ``field`` (``source``: the program text, for comments)."""
    return render_kernel(lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                               source=source, reduction=reduction))


def build(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          reduction: str = "tree", history: bool = False) -> tuple[str, PrintedKernel]:
    """The WGSL text and the printed kernel (whose ``meta()`` the runtime reads)."""
    if len(field.states) > MAX_STATES:
        raise BackendError(f"field `{field.name}` has {len(field.states)} states; the wgpu "
                           f"backend takes at most {MAX_STATES}; use "
                           f"{S.setting('backend', 'numpy')}", span=field.span)
    kernel = lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                   reduction=reduction, history=history)
    return render_kernel(kernel), kernel


__all__ = ["emit_wgsl", "build", "lower", "check_dtype", "WGSL", "DIALECTS",
           "VERSION", "REDUCTIONS"]
