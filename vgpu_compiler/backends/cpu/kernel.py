"""A field as a compiled C kernel: describe (backends/shader), print with the C dialect,
lay out with templates/field.c.j2, compile and load (toolchain.py), cached in memory
and on disk. The disk key is computed before the text (``Plan.key``, source_key.py: what
the templates are given, the C templates and their renderers' bytes, the compiler, its
flags and the CPU), so a kernel on disk is loaded without rendering it (nor importing
Jinja); only a miss renders and compiles.

Lanes per block: a basin's lanes with a basin; without one, ``LANES`` trajectories
(a few of the CPU's widest vectors: the compiler unrolls across them), or
``ADAPTIVE_LANES`` for an adaptive method's kernel (templates/adaptive.c.j2: every
stage's derivatives of every lane in local arrays); a fixed-step method's kernel with
events (and no basin or noise) has ``LEAN_LANES`` (``LANES`` with a flux or large local
arrays: _lean_lanes): its plain steps (fixed_lean) are loops the compiler vectorises. A stepped kernel without events or a Jacobian whose local
arrays stay under ``WIDE_STACK`` has ``STEPPED_LANES`` (_stepped_lanes): every loop of its attempt,
the controller's too, is vectorised, and one vector per block is one chain of dependent
operations from stage to stage; a few vectors per block give the core independent work
to overlap (tsit5 Lorenz, float32, one core: 16 lanes 0.030 s, 64 lanes 0.018 s for
65,536 trajectories; a block runs until its slowest lane ends, yet with its parameters
shuffled 64 lanes still ran in 0.026 s; at 262,144, 64 -> 128 lanes: 62 -> 56 ms).
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
from dataclasses import dataclass

from ...call.counters import COUNTERS
from ...errors import BackendError
from ..shader import adaptive, lower, printing, rosenbrock, template
from ...ir import observers as _observers
from ..shader import events as _events
from ..shader import fixed as _fixed
from ..shader import noise as _noise
from ...runtime.kernel_cache import KernelCache, canonical
from . import library_cache, source_key, toolchain
from .dialect import DIALECTS

VERSION = "c-1"
LANES = {"float32": 64, "float64": 32}
# a stepped kernel's lanes per block without events or a Jacobian (_stepped_lanes): eight
# of the widest vectors, the more independent chains the core overlaps in each of the
# attempt's lane loops (tsit5 Lorenz 262,144, one core, kernel: float32 64 -> 128 lanes
# 62 -> 56 ms, 97 -> 88 ms with rho shuffled; float64 32 -> 64 lanes 173 -> 162 ms)
STEPPED_LANES = {"float32": 128, "float64": 64}
# a fixed-step kernel's lanes per block with events and plain steps (_lean_lanes): the
# event code's block-wide loops and passes are shared by more lanes (100,000 LIF neurons,
# one thread, 64 -> 256 lanes, alternating: 10,000 steps 0.39-0.42 s -> 0.36-0.38 s, the
# high-rate population 0.080-0.088 s -> 0.074-0.079 s; 16 or 32 lanes 1.5-2.5x slower;
# float64 not measured: LANES)
LEAN_LANES = {"float32": 256, "float64": 32}
ADAPTIVE_LANES = 16
WIDE_STACK = 256 * 1024     # bytes of a block's per-lane local arrays for LANES lanes, at most
MAX_BASIN = 4096            # lanes of a basin held in local arrays (the thread's stack)
# The C compiler's time grows faster than linearly with one function's size: a field past
# these (a few hundred states, or a few hundred KB of C) would take minutes to compile,
# so it is a BackendError (auto moves on). VGPU_CPU_MAX_STATES changes the first.
MAX_STATES = 256
# fixed_lean's plain steps at most before the event code (templates/adaptive.c.j2; GLSL
# and wgpu: shader/events.LEAN_STEPS): the lanes whose step has an event wait there, in
# lane loops of a few instructions a step, for the event code, which takes them
# together; it costs about as much as 64 plain steps of the block with no event at all
# (100,000 LIF neurons x 2,000 Euler steps, one core: 64 -> 0.154 s, 256 -> 0.122 s,
# 512 -> 0.126 s; ending the plain steps when a quarter or half of the lanes wait for
# it was slower)
LEAN_STEPS = 256
MAX_SOURCE = 500_000         # (a 342 KB kernel, LIF with sensitivities and events, compiles in ~2 s)


@dataclass
class CpuKernel:
    source: str | None      # its C text; None when its library came from disk unrendered
    meta: dict
    lanes: int
    n_int: int              # int uniforms before the deposit-slot count
    fn: object              # vg_kernel(const double *, const int *, void **, int)
    lib: object
    serial: object = None   # vg_kernel_serial: the same on the calling thread alone
    raw: tuple | None = None    # (fn, serial) without argtypes: ctypes pointers only
    key: str = ""           # its key in MEMORY (the library's on disk)
    field: object = None    # whose kernel it is, with dtype and pt (MEMORY.evict_field)
    dtype: str = ""
    pt: tuple = ()

    @functools.cached_property
    def field_id(self) -> str:
        """The field's id (runtime/kernel_cache.canonical), digested only when a field's
        kernels are evicted."""
        return canonical(self.field)[0] if self.field is not None else ""


MEMORY_CAPACITY = 256       # kernels kept in MEMORY (least recently used go first)
# the loaded kernels (a library cannot be unloaded while a kernel of it may run: no
# release hook), over the libraries on disk (library_cache.py: clear, info)
MEMORY = KernelCache(MEMORY_CAPACITY, disk=library_cache)


@functools.lru_cache(maxsize=1)
def _environment():
    env = template.environment().overlay()
    env.tests["number_text"] = lambda s: str(s).lstrip("-").isdigit()
    return env


@dataclass
class Plan:
    """A kernel before its text: the template and everything it is given (what the disk
    key is computed from without rendering: source_key.py)."""
    field_name: str
    template: str
    arguments: dict
    version: str            # the description's version, replaced by VERSION in the text
    meta: dict
    lanes: int
    n_int: int

    def render(self) -> str:
        text = _environment().get_template(self.template).render(**self.arguments)
        text = text.replace(f"({self.version},", f"({VERSION},")
        if len(text) > MAX_SOURCE:
            raise BackendError(f"the C kernel of field {self.field_name} is "
                               f"{len(text) // 1000} KB, more than the cpu backend compiles "
                               f"({MAX_SOURCE // 1000} KB: the C compiler's time grows "
                               f"quickly with it); use backend='numpy'")
        return text

    def key(self) -> str | None:
        """The disk key (toolchain.key of the template's arguments, the templates and
        their renderers), or None where an argument has no canonical text."""
        from ...resources import templates_dir
        try:
            text = source_key.fingerprint(template=self.template, version=self.version,
                                          c_version=VERSION, **self.arguments)
        except source_key.Unkeyable:
            return None
        return toolchain.key(source_key.FORMAT + "\0" + source_key.renderer_digest(
            templates_dir()) + "\0" + text)


def source(field, dtype: str, per_trajectory=(), dense: bool = False,
           history: bool = False, cuda: dict | None = None) -> tuple[str, dict, int, int]:
    """(C text, meta, lanes per block, int uniforms) of ``field``; an adaptive method's
    kernel, or with ``dense`` a fixed-step method's kernel for save_at (a field with
    events always: templates/events.c.j2 runs in that kernel); ``history``: the
    step loop also stores each saved step of a save_every history (runtime/fixed.py's hist mode reads it).
    ``cuda`` (backends/cuda/source.py: its prologue and entry): the same kernel as CUDA
    C++, one lane per block (a basin's lanes with a basin), no OpenMP or libmvec."""
    p = plan(field, dtype, per_trajectory, dense, history, cuda)
    return p.render(), p.meta, p.lanes, p.n_int


def plan(field, dtype: str, per_trajectory=(), dense: bool = False,
         history: bool = False, cuda: dict | None = None, fresh: bool = False) -> Plan:
    """The kernel of ``field`` (as ``source``) up to its text. ``fresh`` (a fixed-step
    method's events kernel): every step computes its stage 0 at its start, as when the
    derivatives read `step`, instead of carrying F at the last step's end (a Simulation
    whose state or params may change between calls: session.LocatedSession)."""
    _events.check(field, "cpu")
    limit = _max_states()
    if len(field.states) > limit:
        raise BackendError(f"field {field.name} has {len(field.states)} states; the cpu "
                           f"backend takes at most {limit} (VGPU_CPU_MAX_STATES): the C "
                           f"compiler's time grows quickly with a kernel's size; use "
                           f"backend='numpy'")
    located = _observers.located(field)     # events, or an observer `first` to locate
    if (dense or located) and field.solver.adaptive is None and not field.solver.dense:
        field = dataclasses.replace(field, solver=dataclasses.replace(field.solver, dense=True))
    stepped = field.solver.adaptive is not None or field.solver.dense
    desc = lower.describe(field, dtype=dtype, per_trajectory_params=per_trajectory,
                          reduction="serial", history=history)
    if desc.has_basin and desc.basin_size > MAX_BASIN:
        raise BackendError(f"a basin of {desc.basin_size} trajectories is more than the cpu "
                           f"backend holds per block ({MAX_BASIN})")
    if stepped:
        desc = adaptive.extend(desc, field)
    if field.jacobian is not None:   # rodas4: the Jacobian, W's LU, the stage solves
        desc = rosenbrock.extend(desc, field)
    if located:             # (a fixed-step method's events: its dense variant)
        desc = _events.extend(desc, field)
    printed = printing.print_kernel(desc, DIALECTS[dtype])
    lanes = (desc.basin_size if desc.has_basin else
             (_stepped_lanes(desc, field, dtype) if stepped else LANES[dtype]))
    ints = [u.name for u in desc.uniforms if u.type in ("int", "uint")]
    floats = [u.name for u in desc.uniforms if u.type not in ("int", "uint")]
    noise = tuple(getattr(desc, "noise", ()))         # a stochastic field (main's noise)
    noise_vars = tuple(getattr(printed, "noise_vars", ()))
    coupled = sorted({v.target for b in _blocks(desc) if b and b.coupled for v in b.coupled.values})
    split = any(st.block.coupled is not None for st in desc.stages)
    extra = {}
    lean = False        # fixed_lean's plain steps (adaptive.c.j2): no basin, no noise
    if stepped:
        printed.ad = adaptive.print_parts(printed, DIALECTS[dtype])
        if located:
            printed.ev = _events.print_parts(printed, DIALECTS[dtype], adaptive.RUNNING)
            lean = bool(printed.ev.lean) and not noise
            if lean:                                # its lane loops are vectorised
                lanes = _lean_lanes(desc, field, dtype)
        k0 = desc.stage_k[0]
        extra = dict(   # the stage values of the first step's trial point, and of the new state
            trial=[{"target": y, "expr": f"{s} + u_dt * {k0[i]}"}
                   for i, (s, y, _) in enumerate(desc.states)],
            at_new=[{"target": y, "expr": f"vg_new{i}[l]"}
                    for i, (_, y, _) in enumerate(desc.states)])
    if cuda is not None and not desc.has_basin:     # a CUDA thread integrates one lane
        lanes = 1
    if located:             # derivatives that read `step`: F at a step's end, twice
        extra["reads_step"] = fresh or _reads_step(field)
    if noise and not stepped:       # field.c.j2: a step's normals, every lane's, before its lanes
        extra.update(_normals_first(printed, desc, dtype))
    # field.c.j2: the body's pieces (codegen/build/fixed.py); adaptive.c.j2 its noise step
    extra["fx"] = _fixed.LaneParts(printed)
    name = printed.dialect.adaptive_template if stepped else "field.c.j2"
    arguments = dict(
        k=printed, d=printed.dialect, W=lanes, split=split, coupled_names=coupled,
        noise_terms=noise, noise_vars=noise_vars, lean=lean, lean_steps=LEAN_STEPS,
        int_slot={n: i for i, n in enumerate(ints)},
        float_slot={n: i for i, n in enumerate(floats)}, n_int=len(ints),
        n_flux=len(field.flux), cuda=cuda, **{"noise_ks": (), **extra})
    meta = printed.meta()
    meta["version"] = VERSION
    return Plan(field.name, name, arguments, desc.version, meta, lanes, len(ints))


def _normals_first(printed, desc, dtype: str) -> dict:
    """A fixed-step kernel with noise draws a step's normals of all its lanes before the
    lane loop (vg_normals, templates/helpers.c.j2: the Philox words of every lane, then
    their Box-Muller), into vg_zk[k][l]: the draws read them there. ``noise_ks``: the
    noises used."""
    lane = dataclasses.replace(DIALECTS[dtype], normal="vg_zk[{k}][l]")
    printed.noise_draws = _noise.printed(desc, lane)[0]
    return {"noise_ks": sorted({t.k for t in desc.noise})}


def _stepped_lanes(desc, field, dtype: str) -> int:
    """Lanes per block of a stepped kernel without a basin: STEPPED_LANES[dtype] (else
    LANES[dtype]) where it has no events and no Jacobian and its local arrays (about
    states x (stages + 4) of them, one value per lane) fit WIDE_STACK; else ADAPTIVE_LANES."""
    if _observers.located(field) or field.jacobian is not None:
        return ADAPTIVE_LANES
    arrays = len(desc.states) * (len(desc.stages) + 4)
    size = 4 if dtype == "float32" else 8
    for lanes in (STEPPED_LANES[dtype], LANES[dtype]):
        if arrays * lanes * size <= WIDE_STACK:
            return lanes
    return ADAPTIVE_LANES


def _lean_lanes(desc, field, dtype: str) -> int:
    """Lanes per block of a fixed-step kernel with events and plain steps (fixed_lean):
    LEAN_LANES[dtype] where the field deposits no flux (the event log's deposits are summed in
    the order of each block's attempts, which the lanes per block may change) and its local arrays (about
    64 of the event code's, and twice states x (stages + 4) of the steps' and the
    location's copies, one value per lane) fit WIDE_STACK; else LANES[dtype]."""
    if field.flux or any(ev.flux for ev in field.events):
        return LANES[dtype]
    arrays = 64 + 2 * len(desc.states) * (len(desc.stages) + 4) + len(desc.pt_params)
    size = 4 if dtype == "float32" else 8
    lanes = LEAN_LANES[dtype]
    return lanes if arrays * lanes * size <= WIDE_STACK else LANES[dtype]


def _reads_step(field) -> bool:
    """Whether the derivatives (or the coupled values they read) read `step`."""
    from ...ir.nodes import Sym
    from ...ir.ops import SymKind
    from ...ir.walk import walk
    roots = [c.expr for c in field.coupled] + list(field.derivs)
    return any(isinstance(x, Sym) and x.kind is SymKind.STEP for x in walk(*roots))


def _max_states() -> int:
    import os
    text = os.environ.get("VGPU_CPU_MAX_STATES", "")
    try:
        value = int(text) if text else MAX_STATES
    except ValueError:
        value = 0
    if value < 1:
        raise BackendError(f"VGPU_CPU_MAX_STATES must be a positive int, got {text!r}")
    return value


def _blocks(desc):
    return [st.block for st in desc.stages] + [desc.collapse, desc.flux]


def kernel(field, dtype: str, per_trajectory=(), dense: bool = False,
           history: bool = False, fresh: bool = False) -> CpuKernel:
    """The loaded kernel of ``field``: from memory, from the disk cache (keyed by its
    plan, Plan.key: nothing rendered), or rendered, compiled and stored."""
    p = plan(field, dtype, per_trajectory, dense, history, fresh=fresh)
    key = p.key()
    text = None
    if key is None:             # (an argument without a canonical text: keyed by the text)
        text = p.render()
        key = toolchain.key(text)
    hit = MEMORY.get(key)
    if hit is not None:
        COUNTERS.add("memory_hits")
        return hit
    rendered, pt = [text], tuple(sorted(per_trajectory))

    def render() -> str:            # (called by build only when the library is not on disk)
        rendered[0] = p.render()
        return rendered[0]
    try:
        # as on GLSL: every kernel made ready counts a compile, one from disk a disk hit too
        lib = toolchain.build(text if text is not None else render, "field", disk_key=key,
                              on_disk=lambda: COUNTERS.add("disk_hits"), tag=lambda: (
                                  library_cache.tag_of(canonical(field)[0], dtype, pt)))
        COUNTERS.add("compiles")
    except RuntimeError as e:
        raise BackendError(f"the C compiler refused the kernel of `{field.name}`: "
                           f"{str(e).strip()[:2000]}") from None
    fn, serial = lib.vg_kernel, lib.vg_kernel_serial
    for f in (fn, serial):
        f.restype = None
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    # the same two entry points without argtypes, for runner._launcher, which passes
    # ctypes pointers and an int (ctypes converts no argument list: 0.3 us less a call)
    raw = (lib["vg_kernel"], lib["vg_kernel_serial"])
    for f in raw:
        f.restype = None
    return MEMORY.put(CpuKernel(rendered[0], p.meta, p.lanes, p.n_int, fn, lib, serial, raw,
                                key, field, dtype, pt))


def clear_memory() -> int:
    return MEMORY.clear()
