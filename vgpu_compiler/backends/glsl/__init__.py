"""The GLSL backend: IR Field -> one OpenGL 4.3 compute shader, through templates/.

``emit_glsl(field, dtype=..., per_trajectory_params=...)`` needs no shapes:
grid extents, dims, dt, steps and t0 are uniforms. ``lower`` gives the kernel
description (kernel.py) that the templates lay out and the runtime reads.
"""
from __future__ import annotations

from ...ir.nodes import Field
from .kernel import Kernel
from .lower import VERSION, lower
from .template import render_kernel


def emit_glsl(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
              source: str | None = None) -> str:
    """The GLSL compute shader of ``field`` (``source``: the program text, for comments)."""
    return render_kernel(lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                               source=source))


def build(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None) -> tuple[str, Kernel]:
    """The GLSL text and the kernel description (for the runtime)."""
    kernel = lower(field, dtype=dtype, per_trajectory_params=per_trajectory_params,
                   source=source)
    return render_kernel(kernel), kernel


__all__ = ["emit_glsl", "build", "lower", "Kernel", "VERSION"]
