"""The GLSL backend: IR Field -> one OpenGL 4.3 compute shader, through templates/.

``emit_glsl(field, dtype=..., per_trajectory_params=..., reduction=...)`` needs no
shapes: grid extents, dims, dt, steps and t0 are uniforms. Three stages make it:
``describe`` (lower.py) decides the GPU mapping as a kernel description in no
language (kernel.py: IR statements, neutral types, buffers and uniforms with
roles); ``print_kernel`` (printing.py) prints it with a dialect (dialect.py: every
GLSL word, float32 and float64 variants); ``render_kernel`` (template.py) lays the
printed kernel out through the dialect's templates. ``lower`` is the first two:
the printed kernel, whose ``meta()`` the runtime reads.

``reduction`` is how a basin computes sum/mean/min/max: "tree" (a shared-memory
tree, one barrier per level: right for a GPU, and the default, so `vgpuc compile`
is deterministic) or "serial" (lane 0 folds the active lanes: two barriers, right
for a software renderer such as llvmpipe, where a barrier switches through every
invocation of the workgroup). ``reduction_for(renderer)`` picks one for a device.

``build`` (the runtime's way in) refuses, on a software renderer, a field with more
than ``MAX_STATES`` states with a BackendError, so ``backend="auto"`` runs it on
numpy: lowering is linear in the states, but llvmpipe's compiler is not. Every state
is a register live across the step loop, and Mesa llvmpipe's shader compiler takes
time about quadratic in their number (a chain field, rk4, first dispatch: 100 states
0.6 s, 200 1.8 s, 400 7.7 s; euler 400 13 s; the issue's 1000 states 77 s). A GPU's
own driver gets the field (the runtime passes ``software=device_software()``, read
from GL_RENDERER); the environment variable VGPU_GLSL_MAX_STATES sets a limit that
holds on every renderer.
"""
from __future__ import annotations

import os
import re
import sys

from ... import spelling as S
from ...errors import BackendError
from ...ir import observers as _observers
from ...ir.nodes import Field
from ..shader import (adaptive, dialect, kernel, lower as _lowering, printing, render, template,
                      traits)
from ..shader import events as _events
from ..shader import lanes as _lanes
from ..shader import rosenbrock as _rosenbrock

# The language-neutral stages live in backends/shader (shared with the WGSL backend);
# their old names here (backends.glsl.lower, .kernel, .dialect ...) stay importable.
for _m in (adaptive, dialect, kernel, _lowering, printing, render, template, traits):
    sys.modules[f"{__name__}.{_m.__name__.rpartition('.')[2]}"] = _m
del _m

from .dialect import DIALECTS, Dialect  # noqa: E402
from .kernel import Kernel  # noqa: E402
from .lower import (REDUCTION_ENV, REDUCTIONS, VERSION, describe,  # noqa: E402, F401
                    forced_reduction, reduction_on)
from .printing import PrintedKernel, print_kernel  # noqa: E402
from .template import render_kernel  # noqa: E402

# GL_RENDERER strings of CPU (software) renderers: Mesa llvmpipe / softpipe / swrast,
# Google SwiftShader, Microsoft's WARP-based GL ("D3D12 (Microsoft Basic Render Driver)").
SOFTWARE_RENDERERS = re.compile(r"llvmpipe|softpipe|swrast|swiftshader|basic render", re.I)
MAX_STATES = 256                # states of one GLSL kernel (see the module docstring)
MAX_STATES_ENV = "VGPU_GLSL_MAX_STATES"


def max_states(software: bool = True) -> int | None:
    """The most states ``build`` takes: VGPU_GLSL_MAX_STATES if set (on any renderer),
    else MAX_STATES on a software renderer and no limit on a GPU's driver (None)."""
    text = os.environ.get(MAX_STATES_ENV, "").strip()
    if not text:
        return MAX_STATES if software else None
    try:
        value = int(text)
    except ValueError:
        raise BackendError(f"{MAX_STATES_ENV} must be a whole number, not {text!r}") from None
    if value < 1:
        raise BackendError(f"{MAX_STATES_ENV} must be at least 1, not {value}")
    return value


def _check_size(field: Field, software: bool) -> None:
    limit = max_states(software)
    if limit is not None and len(field.states) > limit:
        where = ("on a software renderer (its shader compiler's time grows about "
                 "quadratically with the states: minutes past a thousand)" if software
                 else f"(the limit {MAX_STATES_ENV} sets)")
        raise BackendError(
            f"field `{field.name}` has {len(field.states)} states; the GLSL backend takes at "
            f"most {limit} {where}; use {S.setting('backend', 'numpy')}, or "
            f"raise the limit with {MAX_STATES_ENV}", span=field.span)


def software_renderer(renderer: str | None) -> bool:
    """Whether a GL_RENDERER string names a CPU (software) renderer."""
    return bool(renderer) and SOFTWARE_RENDERERS.search(renderer) is not None


def device_software() -> bool:
    """Whether this process's OpenGL renderer is a software one (True without a
    context: the cautious answer)."""
    from . import device as gl
    info = gl.device_info()
    return software_renderer(info.get("renderer", "")) if info else True


def reduction_for(renderer: str | None) -> str:
    """The reduction strategy for a GL renderer: "serial" on a CPU renderer, else "tree".

    The environment variable VGPU_REDUCTION=tree|serial overrides it (a test and
    diagnosis hook; it is read when a kernel is built, so a kernel already in the
    disk cache keeps the strategy it was built with).
    """
    return reduction_on(software_renderer(renderer))


def device_reduction() -> str:
    """The strategy for this process's OpenGL device (tree without a context)."""
    from . import device as gl
    return reduction_for(gl.device_info().get("renderer", ""))


def emit_glsl(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
              source: str | None = None, reduction: str = "tree") -> str:
    """The GLSL compute shader of ``field`` (``source``: the program text, for comments)."""
    return render_kernel(_lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                                source=source, reduction=reduction))


def lower(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None, reduction: str = "tree",
          history: bool = False) -> PrintedKernel:
    """The kernel description of ``field`` (lower.describe) printed in GLSL for ``dtype``
    (printing.print_kernel with the dialect DIALECTS[dtype]): what the templates lay out;
    its ``meta()`` is what the runtime reads."""
    _events.check(field, "GLSL")
    kernel = describe(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                      source=source, reduction=reduction, history=history)
    located = _observers.located(field)     # events, or an observer `first` to locate
    if field.solver.adaptive is None and not field.solver.dense and not located:
        return print_kernel(kernel, DIALECTS[dtype])
    # bs3, dopri5, tsit5 (and save_at): templates/adaptive.glsl.j2, shader/adaptive.py
    kernel = adaptive.extend(kernel, field)
    if field.jacobian is not None:   # rodas4: the Jacobian, W's LU, the stage solves
        kernel = _rosenbrock.extend(kernel, field)
    if located:                      # (a fixed-step method's events: its dense variant)
        kernel = _events.extend(kernel, field, log=True,   # (float64 flux: a log)
                                rows=bool(field.events))
    printed = print_kernel(kernel, DIALECTS[dtype])
    printed.ad = adaptive.print_parts(printed, DIALECTS[dtype])
    if located:
        printed.ev = _events.print_parts(printed, DIALECTS[dtype], adaptive.RUNNING)
    printed.lanes = _lanes.lanes_for(printed, DIALECTS[dtype])
    if printed.lanes > 1:
        printed.lane_names = _lanes.lane_names(printed)
    return printed


def _lower(field: Field, **options) -> PrintedKernel:
    """``lower``, with a safety net: the printer and the lowering walk expressions on
    explicit stacks, so a RecursionError means a helper that still recurses; it is a
    BackendError (so ``auto`` runs the field on numpy), not a crash."""
    try:
        return lower(field, **options)
    except RecursionError:
        raise BackendError(f"an expression of field `{field.name}` is nested too deeply for "
                           f"the GLSL backend; write it in smaller pieces, or use "
                           f"{S.setting('backend', 'numpy')}", span=field.span) from None


def build(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None, reduction: str = "tree",
          history: bool = False, software: bool = True) -> tuple[str, PrintedKernel]:
    """The GLSL text and the kernel description (for the runtime).

    The runtime passes ``reduction=reduction_for(renderer)`` (the kernel key holds the
    renderer, so a cached kernel has its device's strategy) and ``software``, whether
    the renderer is a CPU one. On llvmpipe it must also cap the steps of one dispatch
    by ``meta()["loop_trips_per_step"]``: llvmpipe ends every loop of an invocation
    after 65535 iterations in all (see Kernel.meta). A field with more than
    ``max_states(software)`` states is a BackendError.
    """
    _check_size(field, software)
    kernel = _lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                    source=source, reduction=reduction, history=history)
    return render_kernel(kernel), kernel


__all__ = ["emit_glsl", "build", "lower", "describe", "print_kernel", "reduction_for",
           "device_reduction", "Kernel", "PrintedKernel", "Dialect", "DIALECTS", "VERSION",
           "REDUCTIONS", "REDUCTION_ENV", "MAX_STATES", "max_states", "device_software",
           "software_renderer"]
