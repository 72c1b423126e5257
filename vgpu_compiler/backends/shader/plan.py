"""How a run of a shader kernel is split for the device: the plan of a kernel, made once
per kernel and limits, for every shading-language backend (glsl, wgpu).

Two kinds of splitting keep every dispatch within the device's limits:
- trajectories: an ensemble whose per-trajectory buffers would exceed the
  largest storage block (binding), or whose workgroups would exceed the
  workgroup-count limit, runs as several chunks of whole basins (rows of basins
  along the first grid axis), one after another;
- steps: a long integration runs as several dispatches of bounded length; the
  first dispatch of a chunk gets a fixed budget of work (then runtime/fixed.py
  paces them by time), and on a software renderer (llvmpipe, lavapipe) no dispatch
  may run more steps than its loop limiter allows (``loop_cap``).

A kernel has fixed shapes, so everything here depends only on the kernel, the
device and the limits: ``plan_for`` makes it once and keeps it on the kernel
(``kernel.plans``), and a repeated call only writes data, sets uniforms and
dispatches. What differs between the backends is a ``device`` dict (``max_block``:
bytes of the largest storage block; ``max_groups``: workgroups per dimension, x, y,
z; ``software``: a CPU renderer) and the backend's ``Limits``.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, replace

import numpy as np

from ... import spelling as S
from ...call.bound import Bound
from ...errors import BackendError
from ...ir.step import step_program
from ...noise.normal import key_of
from .adaptive import COUNTERS as ADAPTIVE_ROWS

LOOP_LIMIT = 65535          # llvmpipe's loop limiter: iterations per invocation and dispatch
DEFAULT_BLOCK = 1 << 27     # a device that does not say its largest storage block
DEFAULT_GROUPS = (65535, 65535, 65535)
_DEFAULTS = {"max_block": 0, "work_per_dispatch": 1 << 27, "max_steps": 0}   # 0: none


class Limits:
    """A backend's splitting limits: ``max_block`` (bytes; 0 or None: the device's),
    ``work_per_dispatch`` (trajectory-stages in a chunk's first dispatch, then paced by
    time; None: 2^27), ``max_steps`` (most steps per dispatch; None: none). Tests lower
    them to exercise the splitting on small problems. ``variables``: the environment
    variables that set them, read once (at import: a look-up per call costs
    microseconds a small repeated call notices); a bad value is reported when a run is
    planned (a BackendError, so ``auto`` moves on), never at import.

    ``in_force`` is the (max_block, work_per_dispatch, max_steps) tuple now in force, a
    new tuple only when ``set`` changes it: the key of a kernel's plans, and what a
    one-dispatch fast path compares by identity."""

    def __init__(self, variables: dict | None = None):
        self.variables = dict(variables or {})
        self.values = {name: None for name in _DEFAULTS}
        self.env, self.wrong = self._read_environment()
        self.in_force = self._resolve()

    def _read_environment(self) -> tuple[dict, str]:
        values, wrong = {}, []
        for name, var in self.variables.items():
            text = (os.environ.get(var) or "").strip()
            values[name] = int(text) if text.isdigit() else None
            if text and not text.isdigit():
                wrong.append(f"{var} must be a whole number >= 0, not {text!r}")
        return values, "; ".join(wrong)

    def _resolve(self) -> tuple[int, int, int]:
        out = []
        for name in ("max_block", "work_per_dispatch", "max_steps"):
            v = self.values[name] if self.values[name] is not None else self.env.get(name)
            out.append(_DEFAULTS[name] if v is None else int(v))
        return tuple(out)

    def set(self, **kwargs) -> dict:
        """Override limits (None restores the default); returns the old values."""
        old = dict(self.values)
        for k, v in kwargs.items():
            if k not in self.values:
                raise KeyError(k)
            self.values[k] = v
        self.in_force = self._resolve()
        return old

    @contextlib.contextmanager
    def within(self, **kwargs):
        """``with limits.within(max_steps=9): ...``: set for a block, restored afterwards."""
        old = self.set(**kwargs)
        try:
            yield
        finally:
            self.set(**old)


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
    block: int = DEFAULT_BLOCK                   # the largest storage block it was made for

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


def plan_for(kernel, bound: Bound, limits: Limits, device: dict, history: int = 0) -> Plan:
    """The kernel's plan under ``limits`` on ``device`` (kept in ``kernel.plans``);
    ``history``: bytes per trajectory of a history the call keeps in one buffer (save_at,
    or save_every with events: times x states), which then also bounds the chunks (a
    call's value, not the kernel's: such a plan is made afresh when the kernel's own
    chunks would not hold it)."""
    if limits.wrong:
        raise BackendError(limits.wrong)
    key = limits.in_force
    kept = kernel.plans.get(key)        # (device, plan): a device's limits may change
    if kept is not None and kept[0] is device:
        plan = kept[1]
    else:
        plan = _make(kernel.meta, bound, device, *key)
        kernel.plans[key] = (device, plan)
    if history and max(c.b - c.a for c in plan.chunks) * history > plan.block:
        plan = _make(kernel.meta, bound, device, *key, history=history)
    return plan


def block(limits: Limits, device: dict) -> int:
    """The largest storage block in force: the limit's, else the device's."""
    return limits.in_force[0] or device.get("max_block") or DEFAULT_BLOCK


def _make(meta: dict, bound: Bound, dev: dict, max_block: int, work: int, max_steps: int,
          history: int = 0) -> Plan:
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
    most_block = max_block or dev.get("max_block") or DEFAULT_BLOCK
    chunks = []
    for lo, hi in _ranges(bound, meta, dev, item, len(pt), most_block, history):
        a, b = lo * row, hi * row
        chunks.append(Chunk(lo, hi, a, b, groups(meta, grid, dev, hi - lo, b - a),
                            {**static, count_u: b - a, origin_u: lo},
                            max(1, work // max(1, (b - a) * stages))))
    cap = max_steps or None
    loops = loop_cap(meta) if dev.get("software") else None
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
        pt=pt, origin_uniform=origin_u, origin_unit="row" if meta["has_basin"] else "trajectory",
        block=most_block)


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
    if meta.get("n_deposits"):
        sizes.append(2 * meta["n_deposits"] * item)
    if any(b["role"] == "ad" for b in meta["buffers"]):     # an adaptive kernel's b_ad, b_cnt
        sizes += [(2 + n_states) * item, 4 * len(ADAPTIVE_ROWS)]
    return max(sizes)


def _ranges(bound: Bound, meta: dict, dev: dict, item: int, n_pt: int,
            max_block: int, history: int = 0) -> list[tuple[int, int]]:
    """Ranges [lo, hi) of the first grid axis (of trajectories without a basin);
    ``history``: bytes per trajectory of one more buffer (plan_for)."""
    most_groups = dev.get("max_groups") or DEFAULT_GROUPS
    grid = bound.grid_shape
    for name, arr in bound.inputs.items():
        if arr.size * item > max_block:
            raise BackendError(f"input {name} ({arr.size * item} bytes) is larger than "
                               f"the largest storage block of this driver ({max_block} bytes); "
                               f"use {S.setting('backend', 'numpy')}")
    per = max(_per_trajectory_bytes(meta, len(bound.field.states), n_pt, item), history)
    if not meta["has_basin"]:
        most = min(max_block // per, meta["local_size"][0] * meta.get("lanes", 1)
                   * most_groups[0] * most_groups[1])
        total, unit = bound.n_trajectories, 1
    else:
        basin, rank = meta["basin"], len(grid)
        for k in range(1, rank):
            if math.ceil(grid[k] / basin[k]) > most_groups[rank - 1 - k]:
                raise BackendError(f"grid axis {k} needs more workgroups than the driver allows")
        most = min(max_block // (per * math.prod(grid[1:])), basin[0] * most_groups[rank - 1])
        total, unit = grid[0], basin[0]
        most -= most % unit
    if most < unit:
        raise BackendError("one row of basins is larger than the largest storage block; "
                           f"use {S.setting('backend', 'numpy')}")
    return [(lo, min(lo + most, total)) for lo in range(0, total, most)] or [(0, 0)]


def groups(meta: dict, grid: tuple, dev: dict, rows: int, count: int) -> tuple[int, int, int]:
    """The workgroups of a chunk of ``rows`` rows (``count`` trajectories)."""
    if not meta["has_basin"]:
        total = max(1, math.ceil(count / (meta["local_size"][0] * meta.get("lanes", 1))))
        gx = min(total, (dev.get("max_groups") or DEFAULT_GROUPS)[0])
        return gx, math.ceil(total / gx), 1
    basin, rank = meta["basin"], len(grid)
    out = [1, 1, 1]
    for k in range(rank):
        extent = rows if k == 0 else grid[k]
        out[rank - 1 - k] = max(1, math.ceil(extent / basin[k]))
    return tuple(out)


def loop_cap(meta: dict) -> int:
    """The most steps one dispatch may run on a software renderer.

    Mesa's llvmpipe (and softpipe, and lavapipe, which shares its code generator) end
    every loop of an invocation, silently, once 65535 loop iterations have run in it
    during one dispatch (their loop limiter): a longer dispatch returns a state that
    stopped early. Each step runs the step loop once plus the kernel's inner loops
    (serial reductions, lane loops, the loops of helpers such as ``vg_powi``): the
    lowering counts them in the kernel's meta."""
    per_step = max(1, meta["loop_trips_per_step"])
    return max(1, (LOOP_LIMIT - 1 - meta["loop_trips_once"]) // per_step)


def call_uniforms(meta: dict, bound: Bound, plan: Plan) -> dict:
    """The uniforms of a call that may change from call to call (the plan's chunks hold
    the rest): the step, the start time, the steps, the scalar params (as the kernel's
    dtype holds them) and the noise key."""
    cast = bound.dtype.type
    u = {"u_dt": float(cast(bound.dt)), "u_t0": float(cast(bound.t0)),
         "u_steps": int(bound.steps)}
    for uniform, name in plan.scalars:
        u[uniform] = float(cast(bound.params[name]))
    u.update(key_uniforms(meta, bound.seed))
    return u


def key_uniforms(meta: dict, seed: int) -> dict:
    """The noise key's uniforms (role ``key``) for ``seed``; {} without noise."""
    names = uniforms_of(meta, "key")
    if not names:
        return {}
    k0, k1 = key_of(seed)
    return {names["0"]: k0, names["1"]: k1}
