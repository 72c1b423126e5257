"""How a run is split for the driver: the plan of a kernel, made once per kernel and limits.

Two kinds of splitting keep every dispatch within the driver's limits:
- trajectories: an ensemble whose per-trajectory buffers would exceed the
  largest storage block (GL_MAX_SHADER_STORAGE_BLOCK_SIZE), or whose
  workgroups would exceed the workgroup-count limit, runs as several chunks of
  whole basins (rows of basins along the first grid axis), one after another;
- steps: a long integration runs as several dispatches of bounded length; the
  first dispatch of a chunk gets a fixed budget of work (then runtime/fixed.py
  paces them by time), and on a software renderer no dispatch may run more steps than
  its loop limiter allows (``loop_cap``).

A kernel has fixed shapes, so everything here depends only on the kernel, the
device and the limits: ``plan_for`` makes it once and keeps it on the kernel, and
a repeated call only writes data, sets uniforms and dispatches.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, replace

import numpy as np

from ... import spelling as S
from ...errors import BackendError
from . import device as gl
from ...call.bound import Bound
from ...ir.step import step_program
from ..shader.adaptive import COUNTERS as ADAPTIVE_ROWS

LOOP_LIMIT = 65535          # llvmpipe's loop limiter: iterations per invocation and dispatch
# Limits; tests lower them to exercise the splitting on small problems.
LIMITS = {
    "max_block": None,              # bytes; None: the driver's (env VGPU_MAX_BLOCK_BYTES)
    "work_per_dispatch": None,      # trajectory-stages in a chunk's first dispatch, then
                                    # paced by time; None: 2^27 (env VGPU_WORK_PER_DISPATCH)
    "max_steps": None,              # most steps per dispatch (env VGPU_MAX_STEPS_PER_DISPATCH)
}
VARIABLES = {"max_block": "VGPU_MAX_BLOCK_BYTES", "work_per_dispatch": "VGPU_WORK_PER_DISPATCH",
             "max_steps": "VGPU_MAX_STEPS_PER_DISPATCH"}


def _read_environment() -> tuple[dict, str]:
    """The limits the environment sets, and what is wrong with it ("" when nothing):
    a bad value is reported when a GLSL run is planned (a BackendError, so ``auto``
    moves on), never at import."""
    values, wrong = {}, []
    for name, var in VARIABLES.items():
        text = (os.environ.get(var) or "").strip()
        values[name] = int(text) if text.isdigit() else None
        if text and not text.isdigit():
            wrong.append(f"{var} must be a whole number >= 0, not {text!r}")
    return values, "; ".join(wrong)


# The environment is read once, when vgpu is imported (a lookup per call costs
# microseconds that a small repeated call notices).
_ENV, _ENV_WRONG = _read_environment()
_DEFAULTS = {"max_block": 0, "work_per_dispatch": 1 << 27, "max_steps": 0}   # 0: none


def set_limits(**kwargs) -> dict:
    """Override splitting limits (None restores the default); returns the old values."""
    old = dict(LIMITS)
    for k, v in kwargs.items():
        if k not in LIMITS:
            raise KeyError(k)
        LIMITS[k] = v
    _in_force[0] = _resolve()
    return old


@contextlib.contextmanager
def limits(**kwargs):
    """``with limits(max_steps=9): ...``: set_limits for a block, restored afterwards."""
    old = set_limits(**kwargs)
    try:
        yield
    finally:
        set_limits(**old)


def _resolve() -> tuple[int, int, int]:
    """(max_block, work_per_dispatch, max_steps) in force; 0 means the driver's / none."""
    out = []
    for name in ("max_block", "work_per_dispatch", "max_steps"):
        v = LIMITS[name] if LIMITS[name] is not None else _ENV[name]
        out.append(_DEFAULTS[name] if v is None else int(v))
    return tuple(out)


_in_force = [_resolve()]        # recomputed by set_limits


@dataclass(frozen=True)
class Chunk:
    """One range of trajectories, dispatched on its own: rows [lo, hi) of the first grid
    axis (trajectories without a basin), trajectories [a, b)."""

    lo: int
    hi: int
    a: int
    b: int
    groups: tuple[int, int, int]
    uniforms: dict              # what locates the chunk: u_count, u_origin, grid, dims
    first: int                  # steps in its first dispatch (then paced by time)


@dataclass(frozen=True)
class Plan:
    chunks: tuple[Chunk, ...]
    cap: int | None             # most steps in one dispatch
    inputs: tuple[tuple[str, str], ...]          # (buffer, input name)
    outputs: tuple[tuple[str, str, int], ...]    # (buffer, output name, bytes)
    scalars: tuple[tuple[str, str], ...]         # (uniform, param name)
    pt: tuple[str, ...]                          # params passed per trajectory
    origin_uniform: str = ""                     # the uniform locating a chunk
    origin_unit: str = "row"                     # its unit: a row (basins) or a trajectory

    def at(self, bound: Bound) -> "Plan":
        """The plan of a window of a larger grid (call/window.py): every chunk's origin
        moved to the window's place in the whole grid (a uniform: no new kernel)."""
        if not bound.origin:
            return self
        shift = bound.origin if self.origin_unit == "row" else bound.first_trajectory
        moved = tuple(replace(c, uniforms={**c.uniforms,
                                           self.origin_uniform: c.lo + shift})
                      for c in self.chunks)
        return replace(self, chunks=moved)

    def one_dispatch(self, steps: int) -> bool:
        """True when a run of ``steps`` is one chunk and one dispatch."""
        c = self.chunks
        return len(c) == 1 and steps <= c[0].first and (self.cap is None or steps <= self.cap)


def plan_for(kernel, bound: Bound, history: int = 0) -> Plan:
    """The kernel's plan; ``history``: bytes per trajectory of a history the call keeps in
    one buffer (save_at, or save_every with events: times x states), which then also
    bounds the chunks (a call's value, not the kernel's: such a plan is made afresh
    when the kernel's own chunks would not hold it)."""
    if _ENV_WRONG:
        raise BackendError(_ENV_WRONG)
    limits = _in_force[0]
    plan = kernel.plans.get(limits)
    if plan is None:
        plan = _make(kernel, bound, *limits)
        kernel.plans[limits] = plan
    if history:
        block = plan_block()
        if max(c.b - c.a for c in plan.chunks) * history > block:
            plan = _make(kernel, bound, *limits, history=history)
    return plan


def plan_block() -> int:
    """The largest storage block in force: the limit's, else the driver's."""
    return _in_force[0][0] or gl.device_info().get("max_block", 1 << 27)


def _make(kernel, bound: Bound, max_block: int, work: int, max_steps: int,
          history: int = 0) -> Plan:
    meta, dev = kernel.meta, gl.device_info()
    pt = bound.per_trajectory
    item = np.dtype(bound.dtype).itemsize
    grid = bound.grid_shape
    row = math.prod(grid[1:]) if meta["has_basin"] else 1
    stages = max(1, step_program(bound.field.solver.tableau).n_stages)
    grid_u, dim_u, param_u = (uniforms_of(meta, role) for role in ("grid", "dim", "param"))
    count_u, origin_u = uniforms_of(meta, "count")[""], uniforms_of(meta, "origin")[""]
    # the whole grid's extents: a window of it (call/window.py) indexes it globally
    static = {grid_u[str(k)]: int(extent) for k, extent in enumerate(bound.whole_shape)}
    static.update({dim_u[name]: int(value) for name, value in bound.dims.items()})
    chunks = []
    for lo, hi in _ranges(bound, meta, dev, item, len(pt),
                          max_block or dev.get("max_block", 1 << 27), history):
        a, b = lo * row, hi * row
        chunks.append(Chunk(lo, hi, a, b, _groups(meta, grid, dev, hi - lo, b - a),
                            {**static, count_u: b - a, origin_u: lo},
                            max(1, work // max(1, (b - a) * stages))))
    cap = max_steps or None
    loops = loop_cap(kernel, dev)
    if loops is not None:
        cap = min(cap, loops) if cap else loops
    buffers = meta["buffers"]
    return Plan(
        chunks=tuple(chunks), cap=cap,
        inputs=tuple((b["name"], b["array"]) for b in buffers if b["role"] == "input"),
        outputs=tuple((b["name"], b["array"], math.prod(bound.output_shapes[b["array"]]) * item)
                      for b in buffers if b["role"] == "output"),
        scalars=tuple((param_u[p.name], p.name) for p in bound.field.params
                      if p.name not in pt),
        pt=pt, origin_uniform=origin_u, origin_unit="row" if meta["has_basin"] else "trajectory")


def uniforms_of(meta: dict, role: str) -> dict[str, str]:
    """{what: uniform name} of one role in a kernel's meta (grid: the axis number as text;
    dim, param: the user's name)."""
    return {u["of"]: u["name"] for u in meta["uniforms"] if u["role"] == role}


def _per_trajectory_bytes(meta: dict, n_states: int, n_pt: int, item: int) -> int:
    sizes = [n_states * item, n_pt * item]
    if meta["collapse"]:
        sizes.append(8)
    if meta["uses_init"]:
        sizes.append(n_states * item)
    if meta["n_deposits"]:
        sizes.append(2 * meta["n_deposits"] * item)
    if any(b["role"] == "ad" for b in meta["buffers"]):     # an adaptive kernel's b_ad, b_cnt
        sizes += [(2 + n_states) * item, 4 * len(ADAPTIVE_ROWS)]
    return max(sizes)


def _ranges(bound: Bound, meta: dict, dev: dict, item: int, n_pt: int,
            max_block: int, history: int = 0) -> list[tuple[int, int]]:
    """Ranges [lo, hi) of the first grid axis (of trajectories without a basin);
    ``history``: bytes per trajectory of one more buffer (plan_for)."""
    groups = dev.get("max_groups", (65535, 65535, 65535))
    grid = bound.grid_shape
    for name, arr in bound.inputs.items():
        if arr.size * item > max_block:
            raise BackendError(f"input {name} ({arr.size * item} bytes) is larger than "
                               f"the largest storage block of this driver ({max_block} bytes); "
                               f"use {S.setting('backend', 'numpy')}")
    per = max(_per_trajectory_bytes(meta, len(bound.field.states), n_pt, item), history)
    if not meta["has_basin"]:
        most = min(max_block // per,
                   meta["local_size"][0] * meta.get("lanes", 1) * groups[0] * groups[1])
        total, unit = bound.n_trajectories, 1
    else:
        basin, rank = meta["basin"], len(grid)
        for k in range(1, rank):
            if math.ceil(grid[k] / basin[k]) > groups[rank - 1 - k]:
                raise BackendError(f"grid axis {k} needs more workgroups than the driver allows")
        most = min(max_block // (per * math.prod(grid[1:])), basin[0] * groups[rank - 1])
        total, unit = grid[0], basin[0]
        most -= most % unit
    if most < unit:
        raise BackendError("one row of basins is larger than the largest storage block; "
                           f"use {S.setting('backend', 'numpy')}")
    return [(lo, min(lo + most, total)) for lo in range(0, total, most)] or [(0, 0)]


def _groups(meta: dict, grid: tuple, dev: dict, rows: int, count: int) -> tuple[int, int, int]:
    if not meta["has_basin"]:
        total = max(1, math.ceil(count / (meta["local_size"][0] * meta.get("lanes", 1))))
        gx = min(total, dev.get("max_groups", (65535,))[0])
        return gx, math.ceil(total / gx), 1
    basin, rank = meta["basin"], len(grid)
    out = [1, 1, 1]
    for k in range(rank):
        extent = rows if k == 0 else grid[k]
        out[rank - 1 - k] = max(1, math.ceil(extent / basin[k]))
    return tuple(out)


def loop_cap(kernel, dev: dict) -> int | None:
    """The most steps one dispatch may run on a software renderer, else None.

    Mesa's llvmpipe (and softpipe) end every loop of an invocation, silently, once
    65535 loop iterations have run in it during one dispatch (their loop limiter): a
    longer dispatch returns a state that stopped early. Each step runs the step loop
    once plus the kernel's inner loops (serial reductions, lane loops, the loops of
    helpers such as ``vg_powi``): the lowering counts them in the kernel's meta."""
    if kernel.loop_cap == "unknown":        # once per kernel: the device does not change
        from . import SOFTWARE_RENDERERS
        kernel.loop_cap = None
        if SOFTWARE_RENDERERS.search(dev.get("renderer", "")):
            meta = kernel.meta
            per_step = max(1, meta["loop_trips_per_step"])
            kernel.loop_cap = max(1, (LOOP_LIMIT - 1 - meta["loop_trips_once"]) // per_step)
    return kernel.loop_cap
