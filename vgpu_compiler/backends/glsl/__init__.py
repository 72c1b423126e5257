"""The GLSL backend: IR Field -> one OpenGL 4.3 compute shader, through templates/.

``emit_glsl(field, dtype=..., per_trajectory_params=..., reduction=...)`` needs no
shapes: grid extents, dims, dt, steps and t0 are uniforms. ``lower`` gives the
kernel description (kernel.py) that the templates lay out and the runtime reads.

``reduction`` is how a basin computes sum/mean/min/max: "tree" (a shared-memory
tree, one barrier per level: right for a GPU, and the default, so `vgpuc compile`
is deterministic) or "serial" (lane 0 folds the active lanes: two barriers, right
for a software renderer such as llvmpipe, where a barrier switches through every
invocation of the workgroup). ``reduction_for(renderer)`` picks one for a device.
"""
from __future__ import annotations

import os
import re

from ...ir.nodes import Field
from .kernel import Kernel
from .lower import REDUCTIONS, VERSION, lower
from .template import render_kernel

# GL_RENDERER strings of CPU (software) renderers: Mesa llvmpipe / softpipe / swrast,
# Google SwiftShader, Microsoft's WARP-based GL ("D3D12 (Microsoft Basic Render Driver)").
SOFTWARE_RENDERERS = re.compile(r"llvmpipe|softpipe|swrast|swiftshader|basic render", re.I)
REDUCTION_ENV = "VGPU_REDUCTION"


def reduction_for(renderer: str | None) -> str:
    """The reduction strategy for a GL renderer: "serial" on a CPU renderer, else "tree".

    The environment variable VGPU_REDUCTION=tree|serial overrides it (a test and
    diagnosis hook; it is read when a kernel is built, so a kernel already in the
    disk cache keeps the strategy it was built with).
    """
    forced = os.environ.get(REDUCTION_ENV, "").strip().lower()
    if forced:
        if forced not in REDUCTIONS:
            raise ValueError(f"{REDUCTION_ENV} must be one of {REDUCTIONS}, not {forced!r}")
        return forced
    return "serial" if renderer and SOFTWARE_RENDERERS.search(renderer) else "tree"


def device_reduction() -> str:
    """The strategy for this process's OpenGL device (tree without a context)."""
    from ...runtime import gl
    return reduction_for(gl.device_info().get("renderer", ""))


def emit_glsl(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
              source: str | None = None, reduction: str = "tree") -> str:
    """The GLSL compute shader of ``field`` (``source``: the program text, for comments)."""
    return render_kernel(lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                               source=source, reduction=reduction))


def build(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None, reduction: str = "tree") -> tuple[str, Kernel]:
    """The GLSL text and the kernel description (for the runtime).

    The runtime passes ``reduction=reduction_for(renderer)`` (the kernel key holds the
    renderer, so a cached kernel has its device's strategy). On llvmpipe it must also
    cap the steps of one dispatch by ``meta()["loop_trips_per_step"]``: llvmpipe ends
    every loop of an invocation after 65535 iterations in all (see Kernel.meta).
    """
    kernel = lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                   source=source, reduction=reduction)
    return render_kernel(kernel), kernel


__all__ = ["emit_glsl", "build", "lower", "reduction_for", "device_reduction", "Kernel",
           "VERSION", "REDUCTIONS"]
