"""A field as a compiled C kernel: describe (backends/shader), print with the C dialect,
lay out with templates/field.c.j2, compile and load (toolchain.py), cached in memory
and on disk (the disk key: the C text, the compiler, its flags and the CPU).

Lanes per block: a basin's lanes with a basin; without one, ``LANES`` trajectories
(a few of the CPU's widest vectors: the compiler unrolls across them), or
``ADAPTIVE_LANES`` for an adaptive method's kernel (templates/adaptive.c.j2: every
stage's derivatives of every lane in local arrays); a fixed-step method's kernel with
events (and no basin or noise) has ``LANES`` again: its plain steps (fixed_lean) are
loops the compiler vectorises.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
from dataclasses import dataclass

from ...call.counters import COUNTERS
from ...errors import BackendError
from ..shader import adaptive, lower, printing, rosenbrock, template
from ..shader import events as _events
from . import toolchain
from .dialect import DIALECTS

VERSION = "c-1"
LANES = {"float32": 64, "float64": 32}
ADAPTIVE_LANES = 16
MAX_BASIN = 4096            # lanes of a basin held in local arrays (the thread's stack)
# The C compiler's time grows faster than linearly with one function's size: a field past
# these (a few hundred states, or a few hundred KB of C) would take minutes to compile,
# so it is a BackendError (auto moves on). VGPU_CPU_MAX_STATES changes the first.
MAX_STATES = 256
MAX_SOURCE = 500_000         # (a 342 KB kernel, LIF with sensitivities and events, compiles in ~2 s)


@dataclass
class CpuKernel:
    source: str
    meta: dict
    lanes: int
    n_int: int              # int uniforms before the deposit-slot count
    fn: object              # vg_kernel(const double *, const int *, void **, int)
    lib: object
    serial: object = None   # vg_kernel_serial: the same on the calling thread alone


_memory: dict[str, CpuKernel] = {}
_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _environment():
    env = template.environment().overlay()
    env.tests["number_text"] = lambda s: str(s).lstrip("-").isdigit()
    return env


def source(field, dtype: str, per_trajectory=(), dense: bool = False,
           history: bool = False, cuda: dict | None = None) -> tuple[str, dict, int, int]:
    """(C text, meta, lanes per block, int uniforms) of ``field``; an adaptive method's
    kernel, or with ``dense`` a fixed-step method's kernel for save_at (a field with
    events always: templates/events.c.j2 runs in that kernel); ``history``: the
    step loop also stores each saved step of a save_every history (cpu/history.py).
    ``cuda`` (backends/cuda/source.py: its prologue and entry): the same kernel as CUDA
    C++, one lane per block (a basin's lanes with a basin), no OpenMP or libmvec."""
    _events.check(field, "cpu")
    limit = _max_states()
    if len(field.states) > limit:
        raise BackendError(f"field {field.name} has {len(field.states)} states; the cpu "
                           f"backend takes at most {limit} (VGPU_CPU_MAX_STATES): the C "
                           f"compiler's time grows quickly with a kernel's size; use "
                           f"backend='numpy'")
    if (dense or field.events) and field.solver.adaptive is None and not field.solver.dense:
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
    if field.events:        # (a fixed-step method's events: its dense variant)
        desc = _events.extend(desc, field)
    printed = printing.print_kernel(desc, DIALECTS[dtype])
    lanes = desc.basin_size if desc.has_basin else (ADAPTIVE_LANES if stepped else LANES[dtype])
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
        if field.events:
            printed.ev = _events.print_parts(printed, DIALECTS[dtype], adaptive.RUNNING)
            lean = bool(printed.ev.lean) and not noise
            if lean:                                # its lane loops are vectorised
                lanes = LANES[dtype]
        k0 = desc.stage_k[0]
        extra = dict(   # the stage values of the first step's trial point, and of the new state
            trial=[{"target": y, "expr": f"{s} + u_dt * {k0[i]}"}
                   for i, (s, y, _) in enumerate(desc.states)],
            at_new=[{"target": y, "expr": f"vg_new{i}[l]"}
                    for i, (_, y, _) in enumerate(desc.states)])
    if cuda is not None and not desc.has_basin:     # a CUDA thread integrates one lane
        lanes = 1
    if field.events:        # derivatives that read `step`: F at a step's end, twice
        extra["reads_step"] = _reads_step(field)
    name = printed.dialect.adaptive_template if stepped else "field.c.j2"
    text = _environment().get_template(name).render(
        k=printed, d=printed.dialect, W=lanes, split=split, coupled_names=coupled,
        noise_terms=noise, noise_vars=noise_vars, lean=lean,
        int_slot={n: i for i, n in enumerate(ints)},
        float_slot={n: i for i, n in enumerate(floats)}, n_int=len(ints),
        n_flux=len(field.flux), cuda=cuda, **extra)
    text = text.replace(f"({desc.version},", f"({VERSION},")
    if len(text) > MAX_SOURCE:     # (NVRTC's time grows with it too)
        raise BackendError(f"the C kernel of field {field.name} is {len(text) // 1000} KB, "
                           f"more than the cpu backend compiles ({MAX_SOURCE // 1000} KB: the C "
                           f"compiler's time grows quickly with it); use backend='numpy'")
    meta = printed.meta()
    meta["version"] = VERSION
    return text, meta, lanes, len(ints)


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
           history: bool = False) -> CpuKernel:
    text, meta, lanes, n_int = source(field, dtype, per_trajectory, dense, history)
    key = toolchain.key(text)
    hit = _memory.get(key)
    if hit is not None:
        COUNTERS.add("memory_hits")
        return hit
    try:
        # as on GLSL: every kernel made ready counts a compile, one from disk a disk hit too
        lib = toolchain.build(text, "field", on_disk=lambda: COUNTERS.add("disk_hits"))
        COUNTERS.add("compiles")
    except RuntimeError as e:
        raise BackendError(f"the C compiler refused the kernel of `{field.name}`: "
                           f"{str(e).strip()[:2000]}") from None
    fn, serial = lib.vg_kernel, lib.vg_kernel_serial
    for f in (fn, serial):
        f.restype = None
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    out = CpuKernel(text, meta, lanes, n_int, fn, lib, serial)
    with _lock:
        if len(_memory) >= 256:
            _memory.pop(next(iter(_memory)))
        return _memory.setdefault(key, out)


def clear_memory() -> int:
    with _lock:
        n = len(_memory)
        _memory.clear()
        return n


def clear_disk() -> int:
    """Remove the compiled libraries of the disk cache (a loaded one stays loaded)."""
    from . import library_cache
    return library_cache.clear()
