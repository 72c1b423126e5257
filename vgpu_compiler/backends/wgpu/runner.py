"""The wgpu backend's ``run(prepared, data, progress) -> Solution``.

Compile once, bind once, dispatch many, as GLSL: a kernel (the WGSL text, its
compute pipeline and the buffers it runs on) is kept in memory per (WGSL key,
shapes); the Prepared call's slot remembers it, so a repeated call writes its
data and the uniform buffer, dispatches and reads back. The WGSL text and its
meta are kept on disk (disk_cache.py) keyed by the field's IR, dtype,
per-trajectory params, reduction strategy, this code and templates, and the
adapter (vendor, device, driver, backend type).

Splitting is GLSL's (backends/shader/plan.py, on this adapter's limits: ``device``):
an ensemble larger than a storage binding or the workgroup count runs in chunks (whole
rows of basins); a long integration runs in dispatches paced by runtime/fixed.py's
driver (on ``Target``, this kernel's side of it, shared with the adaptive driver),
capped on a CPU adapter by the loop limiter of llvmpipe's code generator (lavapipe):
at most 65535 loop iterations per invocation and dispatch (shader/plan.loop_cap).
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from ... import spelling as S
from ...errors import BackendError
from ...call.bound import Bound, Solution
from ...call.counters import COUNTERS  # noqa: F401 (the face: tests)
from . import VERSION, build as _build, check_dtype
from . import device as dev
from ..shader.lower import REDUCTION_ENV, reduction_on
from .disk_cache import DISK, MEMORY  # noqa: F401 (the face: tests)
from .fast import OneDispatch
from ..shader import plan as P
from ..shader.history import fits as history_fits
from ..shader.target import PlanTarget, chunk_writes
from ..shader.template import fingerprint
from ...runtime import fixed, pacing
from ...runtime.device import unavailable
from ...runtime import kernel_cache as kc
from ...runtime.progress import Nesting
from .dispatch import _dispatch, _pack_uniforms, _read

LOOP_LIMIT = P.LOOP_LIMIT
FLOAT_ROLES = {"dt", "t0", "param", "t1", "rtol", "atol", "dt0", "dtmax", "gap", "pause"}
_lock = threading.RLock()
# the splitting limits (shader/plan.Limits: max_block, work_per_dispatch, max_steps);
# tests lower them to split runs (``with limits(max_steps=9): ...``)
LIMITS = P.Limits()
set_limits, limits = LIMITS.set, LIMITS.within


def device() -> dict:
    """The adapter as the plan sees it (shader/plan.py): its largest storage binding, its
    workgroups per dimension, whether it is a CPU adapter (kept per limits dict)."""
    lim = dev.get().limits
    kept = _device[0]
    if kept is None or kept[0] is not lim:
        groups = lim.get("max_compute_workgroups_per_dimension", 65535)
        _device[0] = kept = (lim, {
            "max_block": lim.get("max_storage_buffer_binding_size", 1 << 27),
            "max_groups": (groups, groups, groups), "software": dev.software()})
    return kept[1]


_device: list = [None]


def plan_for(kernel, bound: Bound, history: int = 0) -> P.Plan:
    """The kernel's plan (shader/plan.plan_for) under wgpu's limits on this adapter."""
    return P.plan_for(kernel, bound, LIMITS, device(), history)


def plan_block() -> int:
    """The largest storage buffer in force: the limit's, else the adapter's."""
    return P.block(LIMITS, device())


def available() -> bool:
    return dev.available()


def need(bound: Bound) -> None:
    """A BackendError (``auto`` moves on) when there is no wgpu device here, or the call's
    dtype is one WGSL lacks."""
    if not dev.available():
        raise unavailable("wgpu device", dev.get().error)
    check_dtype(bound.dtype.name, bound.field.span)


# --- kernels ------------------------------------------------------------------------------
class Kernel:
    """A WGSL kernel compiled for the device, with its buffers for one set of shapes."""

    def __init__(self, key: str, source: str, meta: dict):
        self.key, self.source, self.meta = key, source, meta
        d = dev.get()
        device = d.device
        import wgpu
        self.module = device.create_shader_module(code=source)
        entries = []
        for b in meta["buffers"]:
            kind = "read-only-storage" if b["readonly"] else "storage"
            entries.append({"binding": b["binding"], "visibility": wgpu.ShaderStage.COMPUTE,
                            "buffer": {"type": kind}})
        self.ubinding = len(meta["buffers"])
        entries.append({"binding": self.ubinding, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": "uniform"}})
        self.layout = device.create_bind_group_layout(entries=entries)
        self.pipeline = device.create_compute_pipeline(
            layout=device.create_pipeline_layout(bind_group_layouts=[self.layout]),
            compute={"module": self.module, "entry_point": "main"})
        self.buffers: dict = {}
        self.sizes: dict = {}
        self.plans: dict = {}       # limits -> its plan (shader/plan.py; shapes are fixed)
        self.group = None
        self.written: dict = {}     # what dispatch.py last wrote to the uniform buffer, error slot
        names = [u["name"] for u in meta["uniforms"]]
        self.uniform_index = {n: i for i, n in enumerate(names)}
        self.uniform_float = [u["role"] in FLOAT_ROLES for u in meta["uniforms"]]
        n = len(names) + 1                      # + vg_zero
        self.uniform_bytes = max(16, -(-n * 4 // 16) * 16)
        self.ubuf = device.create_buffer(size=self.uniform_bytes,
                                         usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)

    def private(self) -> "Kernel":
        """The same pipeline with buffers of its own: for a call made by a progress
        callback of a run of this kernel (whose buffers hold that run's state)."""
        import wgpu
        k = object.__new__(Kernel)
        k.__dict__.update(self.__dict__)
        k.buffers, k.sizes, k.group, k.written = {}, {}, None, {}
        k.ubuf = dev.get().device.create_buffer(
            size=self.uniform_bytes, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        return k

    def ensure(self, name: str, size: int):
        """The storage buffer ``name`` of at least ``size`` bytes (new bind group if made)."""
        import wgpu
        size = max(16, -(-size // 16) * 16)
        if self.sizes.get(name, 0) < size:
            self.buffers[name] = dev.get().device.create_buffer(
                size=size, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
                | wgpu.BufferUsage.COPY_DST)
            self.sizes[name] = size
            self.group = None
        return self.buffers[name]

    def staging(self, size: int):
        """A MAP_READ buffer of at least ``size`` bytes: every read-back of a dispatch
        (the error slot, and at the end the states, steps and outputs) is copied into it
        in the dispatch's own command buffer, then mapped once: one sync per dispatch."""
        import wgpu
        size = max(16, -(-size // 16) * 16)
        if self.sizes.get("_staging", 0) < size:
            self.buffers["_staging"] = dev.get().device.create_buffer(
                size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            self.sizes["_staging"] = size
        return self.buffers["_staging"]

    def bind_group(self):
        if self.group is None:
            for b in self.meta["buffers"]:
                self.ensure(b["name"], 16)
            entries = [{"binding": b["binding"], "resource": {
                "buffer": self.buffers[b["name"]], "offset": 0,
                "size": self.sizes[b["name"]]}} for b in self.meta["buffers"]]
            entries.append({"binding": self.ubinding, "resource": {
                "buffer": self.ubuf, "offset": 0, "size": self.uniform_bytes}})
            self.group = dev.get().device.create_bind_group(layout=self.layout, entries=entries)
        return self.group


def compiler_fingerprint() -> str:
    """A hash of the WGSL backend's code, the shared stages, codegen and the templates."""
    return fingerprint(VERSION, Path(__file__).parent)


def identity(field, dtype: str, pt: tuple, reduction: str) -> str:
    """The disk key of a field's WGSL (runtime/kernel_cache.identity): its IR with
    positions (the error table names lines), dtype, per-trajectory params, reduction,
    this compiler, the adapter, whether it is the dense variant."""
    return MEMORY.identity(field, (dtype, pt, reduction), lambda: [
        compiler_fingerprint(), dtype, ",".join(pt), reduction, dev.identity(),
        "dense" if field.solver.dense else ""], positions=True)[0]


def reduction() -> str:
    """How basins reduce: serial on a CPU adapter (a barrier switches every lane), else
    tree; VGPU_REDUCTION=tree|serial overrides it, as for GLSL (part of the kernel key)."""
    return reduction_on(dev.software())


def kernel_for(bound: Bound, history: bool = False) -> Kernel:
    """The call's kernel (MEMORY.for_call: its Prepared's slot, memory, then disk, then
    built); ``history``: the field's save_every kernel (run), keyed apart (``-h``)."""
    slots = bound.prepared.slots if bound.prepared is not None else {}
    slot = "wgpu-hist" if history else \
        "wgpu-dense" if bound.field.solver.dense else "wgpu"    # (glsl's kernel_of_call)
    env = _reduction_env()
    hit = MEMORY.remembered(slots, slot, env)
    if hit is not None:
        return hit
    field, dtype = bound.field, bound.dtype.name
    check_dtype(dtype, field.span)
    pt = tuple(sorted(bound.per_trajectory))
    red = reduction()

    def build():
        source, printed = _build(field, dtype=dtype, per_trajectory_params=pt,
                                 reduction=red, history=history)
        k = printed.kernel
        shared = 4 * (k.basin_size * (len(k.coupled_arrays) + len(k.reductions))
                      + k.results + (8 if k.collapse is not None else 0)
                      + (k.basin_size + 8 if k.adaptive is not None else 0)) \
            if k.has_basin else 0
        return source, dict(printed.meta(), dtype=dtype, pt=list(pt), workgroup_bytes=shared)

    def make(mkey, source, meta):
        _check_limits(meta, field)
        with dev.get().lock:
            kernel = Kernel(mkey, source, meta)
        kernel.field_id, kernel.dtype, kernel.pt = kc.canonical(field)[0], dtype, pt
        return kernel

    def rejected(exc):              # naga refused the WGSL: a compiler bug
        what = "the history WGSL" if history else "the WGSL"
        return BackendError(f"wgpu rejected {what} of field `{field.name}`: {exc}")

    def find(key):
        return MEMORY.find_or_build(kc.memory_key(key, kc.shape_signature(bound)), key,
                                    build, make, rejected)
    return MEMORY.for_call(slots, slot, env, lambda: identity(field, dtype, pt, red)
                           + ("-h" if history else ""), find)


def _check_limits(meta: dict, field) -> None:
    """A basin larger than the adapter's workgroups, or whose basin memory exceeds its
    workgroup storage, is a BackendError naming the limit (auto moves on)."""
    limits = dev.get().limits
    lanes = int(np.prod(meta["local_size"]))
    most = limits.get("max_compute_invocations_per_workgroup", 256)
    if lanes > most:
        raise BackendError(f"a basin of {lanes} lanes is larger than this wgpu adapter's "
                           f"workgroups ({most} invocations); use a smaller basin or "
                           f"{S.setting('backend', 'glsl')}", span=field.span)
    need, have = meta.get("workgroup_bytes", 0), limits.get(
        "max_compute_workgroup_storage_size", 16384)
    if need > have:
        raise BackendError(f"the basin memory of field `{field.name}` ({need} bytes) exceeds "
                           f"this wgpu adapter's workgroup storage ({have} bytes); use a "
                           f"smaller basin or fewer coupled values", span=field.span)


# --- running ------------------------------------------------------------------------------
def run(prepared, data, progress=None) -> Solution:
    """A fixed-step call (adaptive_run.run: an adaptive method's, or one with save_at).
    A repeated call of a signature that runs as one dispatch takes the fast path
    (fast.py: ``prepared.slots["wgpu_fast"]``) while it still holds; a ``save_every``
    history the shader writes (shader/history.fits) runs the field's history kernel
    (kernel_for's ``history``), with no fast path."""
    history = history_fits(prepared.template)      # save_every: the shader writes it
    fast = (prepared.slots.get("wgpu_fast") if progress is None and not data.origin
            and not history else None)  # (a window's place is not in its slot)
    if fast is not None and _still(fast, prepared.slots):
        with _lock:
            sol = fast.call(data)
        if sol is not None:
            return sol
    bound = prepared.bound(data)
    need(bound)
    found = kernel_for(bound, history=history)
    kernel = found
    if _here.inside(kernel):                        # inside a progress callback of its run
        kernel = kernel.private()
    with _lock:
        sol = _execute(kernel, bound, progress)     # (a history kernel writes b_hist)
        if not history and kernel is found and bound.prepared is not None:
            _remember(kernel, bound)
    if progress is not None:
        progress(bound.steps, bound.steps)
    return sol


def _remember(kernel: Kernel, bound: Bound) -> None:
    """Keep a OneDispatch in the call's Prepared when its signature runs as one chunk and
    one dispatch (fast.py)."""
    plan = plan_for(kernel, bound)
    if kernel.group is None or not OneDispatch.fits(bound, plan):
        return
    values, put = _uniform_values(kernel, bound, plan)
    for name, value in plan.chunks[0].uniforms.items():
        put(name, value)
    bound.prepared.slots["wgpu_fast"] = OneDispatch(
        kernel, bound, plan, values, (LIMITS.in_force, dev.get().limits))


def _still(fast: OneDispatch, slots: dict) -> bool:
    """True when ``fast`` still runs a call as the full path would (the kernel cache's
    ``still``: the same kernel, still in the memory cache, VGPU_REDUCTION unchanged, no
    progress callback of a run of this thread underway), under the same limits and
    adapter limits."""
    return MEMORY.still(slots, "wgpu", fast, _reduction_env(),
                        (LIMITS.in_force, dev.get().limits), _here)


_reduction_env = kc.environ_reader(REDUCTION_ENV)


_here = Nesting()               # the kernels whose run's progress callback this thread is in


def _setup(kernel: Kernel, bound: Bound, plan: P.Plan):
    """A run's inputs written and its outputs zeroed (once per run), and the uniforms
    every dispatch shares: (values, put(name, value))."""
    queue, meta = dev.get().device.queue, kernel.meta
    dtype = np.dtype(np.float32)
    for b in meta["buffers"]:
        if b["role"] == "input":
            arr = np.ascontiguousarray(bound.inputs[b["array"]], dtype)
            queue.write_buffer(kernel.ensure(b["name"], arr.nbytes), 0, arr.tobytes() or bytes(16))
        elif b["role"] == "output":
            size = 4 * int(np.prod(bound.output_shapes[b["array"]]))
            queue.write_buffer(kernel.ensure(b["name"], size), 0, bytes(max(16, -(-size // 16) * 16)))
    kernel.ensure("b_err", 16)
    return _uniform_values(kernel, bound, plan)


def _uniform_values(kernel: Kernel, bound: Bound, plan: P.Plan):
    """The uniforms every dispatch of a call shares (shader/plan.call_uniforms; a chunk's
    own are put by Target._place): (values, put(name, value)), ``values`` in the
    kernel's uniform order (dispatch._pack_uniforms)."""
    values = [0.0] * (len(kernel.uniform_index) + 1)
    u = kernel.uniform_index

    def put(name, value):
        if name in u:
            values[u[name]] = value

    for name, value in P.call_uniforms(kernel.meta, bound, plan).items():
        put(name, value)
    return values, put


def _execute(kernel: Kernel, bound: Bound, progress) -> Solution:
    """A fixed-step run of ``bound`` on ``kernel``: runtime/fixed.py's driver on a Target."""
    return fixed.solution(bound, fixed.run(fixed_target(kernel, bound), progress))


def fixed_target(kernel: Kernel, bound: Bound, cls=None) -> "Target":
    """The fixed-step driver's Target (``cls``: Target or a session's) of ``bound`` on
    ``kernel``, with its layout."""
    target = (cls or Target)(kernel, bound)
    target.layout = fixed.layout(bound, kernel.meta)
    return target


class Target(PlanTarget):
    """The drivers' Target (runtime/adaptive.py, runtime/fixed.py) on a wgpu kernel
    (shader/target.PlanTarget: what it takes from the plan): a run's inputs written and outputs zeroed once, a chunk's states and params at its
    start, a dispatch and its read-backs one command buffer and one mapping
    (dispatch.py), the uniforms packed into the kernel's uniform buffer; the chunks,
    their workgroups and first sizes and the loop cap are the kernel's plan
    (shader/plan.py; ``history``: a history's bytes per trajectory, adaptive_run._Target).
    The caller sets ``layout`` (fixed_target; adaptive_run._Target)."""

    def __init__(self, kernel: Kernel, bound: Bound, history: int = 0):
        plan = plan_for(kernel, bound, history).at(bound)
        super().__init__(kernel, plan, pacing.target(dev.software()))
        self.bound = bound
        self.state = fixed.start_state(bound)
        self.values, self.put = self._start(kernel, bound, plan)
        self.pt = [p.name for p in bound.field.params if p.name in bound.per_trajectory]
        self.params = fixed.param_rows(bound, self.pt)
        self.groups = None

    _start = staticmethod(_setup)   # (values, put): a run's inputs and outputs written

    def _place(self, ci: int) -> tuple[int, int]:
        """Chunk ``ci``'s uniforms (its count, its place in the whole grid: a window's
        place, call/window.py) and its workgroups."""
        chunk = self.plan.chunks[ci]
        for name, value in chunk.uniforms.items():
            self.put(name, value)
        self.groups = chunk.groups
        return chunk.a, chunk.b

    def _made(self, sizes: dict, writes: list) -> None:
        """Buffers of ``sizes`` made, ``writes`` (name, bytes) written (an empty one:
        its buffer made)."""
        kernel, queue = self.kernel, dev.get().device.queue
        for name, size in sizes.items():
            kernel.ensure(name, size)
        for name, data in writes:
            buf = kernel.ensure(name, len(data))
            if len(data):
                queue.write_buffer(buf, 0, data)

    def begin(self, ci: int, sizes: dict, writes: list) -> None:
        (a, b), kernel, queue = self._place(ci), self.kernel, dev.get().device.queue
        for name, nbytes, data in chunk_writes(kernel.meta, self.bound, self.state,
                                               self.params, a, b):
            buf = kernel.ensure(name, nbytes)
            if data is not None:
                queue.write_buffer(buf, 0, data.tobytes())
        self._made(sizes, writes)

    def trip(self, uniforms: dict, sizes: dict, writes: list, reads: list) -> list:
        kernel, d = self.kernel, dev.get()
        for name, value in uniforms.items():
            self.put(name, value)
        for name, size in sizes.items():
            kernel.ensure(name, size)
        bufs = [(kernel.ensure(name, len(data)), data) for name, data in writes]
        group = kernel.bind_group()     # (the one of begin, unless a buffer grew)
        packed = _pack_uniforms(kernel, self.values)
        with d.lock:
            for buf, data in bufs:
                d.device.queue.write_buffer(buf, 0, data)
            got = _dispatch(kernel, d.device, d.device.queue, packed, group, self.groups,
                            [(kernel.buffers["b_err"], 16)]
                            + [(kernel.buffers[r[0]], r[1]) for r in reads])
        for k, r in enumerate(reads, 1):    # (name, bytes, (array, offset)): copied into it
            if len(r) == 3:
                memoryview(r[2][0]).cast("B")[r[2][1]:r[2][1] + r[1]] = got[k]
                got[k] = b""
        return got

    def read(self, reads: list) -> list:
        d = dev.get()
        with d.lock:
            return _read(self.kernel, d.device.queue, d.device.create_command_encoder(),
                         [(self.kernel.buffers[name], size) for name, size in reads])


Target.nesting = _here


# --- cache management (the registry's Caches: MEMORY's, disk_cache.py) --------------------
def cache_info() -> dict:
    return MEMORY.info()


def evict(field, dtype: str | None = None, per_trajectory_params=None) -> bool:
    return MEMORY.evict_field(field, dtype, per_trajectory_params)


def clear_cache(memory: bool = True, disk: bool = True) -> dict:
    return MEMORY.clear_caches(memory, disk)
