"""GLSL's side of the plan (backends/shader/plan.py: how a run is split, written once for
both shader backends): its limits, which the environment may set (VGPU_MAX_BLOCK_BYTES,
VGPU_WORK_PER_DISPATCH, VGPU_MAX_STEPS_PER_DISPATCH), and its device (the GL context's
largest storage block and workgroup counts; a software renderer's loop limiter)."""
from __future__ import annotations

from ...call.bound import Bound
from ..shader import plan as _shared
from ..shader.plan import LOOP_LIMIT, Chunk, Plan, uniforms_of  # noqa: F401 (the face)
from . import device as gl

VARIABLES = {"max_block": "VGPU_MAX_BLOCK_BYTES", "work_per_dispatch": "VGPU_WORK_PER_DISPATCH",
             "max_steps": "VGPU_MAX_STEPS_PER_DISPATCH"}
LIMITS = _shared.Limits(VARIABLES)
set_limits, limits = LIMITS.set, LIMITS.within


def device() -> dict:
    """The GL context as the plan sees it: its largest storage block, its workgroup
    counts, whether it is a software renderer (kept: the context does not change)."""
    kept = _device[0]
    if kept is None or kept[0] is not gl.GL.info or not kept[0]:
        from . import SOFTWARE_RENDERERS
        info = gl.device_info()
        _device[0] = (gl.GL.info, {
            "max_block": info.get("max_block"), "max_groups": info.get("max_groups"),
            "software": bool(SOFTWARE_RENDERERS.search(info.get("renderer", "")))})
    return _device[0][1]


_device: list = [None]


def plan_for(kernel, bound: Bound, history: int = 0) -> Plan:
    """The kernel's plan (shader/plan.plan_for) under GLSL's limits on this context."""
    return _shared.plan_for(kernel, bound, LIMITS, device(), history)


def plan_block() -> int:
    """The largest storage block in force: the limit's, else the driver's."""
    return _shared.block(LIMITS, device())
