"""Specialised programs: a kernel's text with the int uniforms of one call fixed.

A kernel's GLSL is shared by every shape (dims, grid extents, counts and steps are
uniforms), so a small kernel's step loop has a trip count the driver cannot see.
On llvmpipe that costs: a loop of a uniform count keeps its loop limiter and
execution masks every trip, and the unchecked/checked copies of a loop (``if
(u_steps <= d_K)``) both stay. A call that runs as one dispatch, whose steps come
from the solve statement alone (``Prepared.fixed_steps``: the same for every call
of these dims), and whose run is short (``MAX_STEPS``), gets a *specialised*
program: the same text, those int uniforms declared as constants (the dialect's
``fix_ints``), so the driver unrolls the loop and drops the branch it never takes.
Measured on the 16x16 matmul: the dispatch takes the hand-written kernel's time
instead of about 1.5x it (docs/performance.md).

Nothing here changes what is computed: only int uniforms are fixed, to the values
the generic program would receive; float uniforms (dt, t0, params) stay uniforms.
A kernel keeps at most ``PER_KERNEL`` of them (dims that size no buffer could
otherwise make many), compiled on the GL thread on first use and released with it.
"""
from __future__ import annotations

import logging

from .dialect import DIALECTS

log = logging.getLogger("vgpu")

MAX_STEPS = 32          # a longer run gains nothing measurable from an unrolled loop
PER_KERNEL = 4          # specialised programs kept per kernel (then: the generic one)


class Special:
    """One specialised program and the uniform state ``execute._set_uniforms`` keeps."""

    def __init__(self, program):
        self.program = program
        self.uniform_names = frozenset(program)
        self.uniform_values: dict = {}
        self.uniform_owner = None

    def release(self) -> None:
        self.program.release()


def fixed_values(fixed_steps: bool, steps: int, uniforms: dict) -> dict | None:
    """The int uniforms to fix for a one-dispatch call (``uniforms``: those of its chunk
    and step segment), or None when the call gets the generic program."""
    if not fixed_steps or steps > MAX_STEPS:
        return None
    return {name: int(v) for name, v in uniforms.items()}


def program_for(ctx, kernel, values: dict) -> Special | None:
    """``kernel``'s program with ``values`` fixed, compiled the first time it is asked
    for (on the GL thread); None when the kernel has its quota or the text has no such
    declarations (the caller runs the generic program)."""
    key = tuple(sorted(values.items()))
    specials = kernel.specials
    hit = specials.get(key, False)
    if hit is not False:
        return hit
    if len(specials) >= PER_KERNEL:
        return None
    text = DIALECTS[kernel.dtype].fix_ints(kernel.source, values) if kernel.dtype else None
    special = None
    if text is not None:
        try:
            special = Special(ctx.compute_shader(text))
        except Exception as exc:    # noqa: BLE001 - the generic program still runs
            log.debug("no specialised program for kernel %s: %s", kernel.key, exc)
    specials[key] = special         # (a None is remembered: not tried again)
    return special
