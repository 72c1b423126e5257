"""The backend registry: every backend VGPU can run a call on, by name.

Each backend is a package under ``backends/`` whose ``backend.py`` defines one
``Backend`` object (``BACKEND``). This module lists them, in ``auto``'s order
(``auto_order``, ``_group``): GPU backends on a real GPU first, then the native
CPU backends (cpu), then GPU backends on a CPU renderer (Mesa llvmpipe for GL,
lavapipe for Vulkan: a backend's ``software()`` says so; on Linux without a GPU
device node the built-in ones are put there without being started), in
``_PACKAGES`` order within each group, the numpy reference last (it is always
available). Adding a backend is adding its package and one line to ``_PACKAGES``.

A backend's ``run(prepared, data, progress) -> Solution`` receives a call that
``call.bind`` has already checked, never an empty ensemble (the API answers
that itself, with ``call.empty.solution``) and never a user mistake. A backend
that cannot run a particular program raises ``BackendError``: ``auto`` then
tries the next backend, with one warning per reason.

A backend that keeps compiled kernels gives its ``Caches`` (memory and disk: those of
runtime/kernel_cache.py's KernelCache, ``kernel_caches``); the API's ``cache_info``,
``clear_cache`` and ``evict`` and ``vgpuc cache`` reach every backend's through
``cached()`` and name none.

Backend packages are imported only when a backend is first wanted, so that
``import vgpu`` does not load OpenGL.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from dataclasses import dataclass, field as _field
from typing import Callable

# The registry line of each built-in backend: name -> (the module holding its BACKEND,
# whether it runs on a GPU). The order is ``auto``'s: GPU backends first, numpy last.
_PACKAGES = {
    "cuda": ("vgpu_compiler.backends.cuda.backend", True),     # NVIDIA: NVRTC + the driver
    "glsl": ("vgpu_compiler.backends.glsl.backend", True),
    "wgpu": ("vgpu_compiler.backends.wgpu.backend", True),     # WGSL: Vulkan, Metal, D3D12
    "cpu": ("vgpu_compiler.backends.cpu.backend", False),
    "numpy": ("vgpu_compiler.backends.numpy.backend", False),
}


# What a backend's ``features`` may hold, each with the words of its row in the table of
# capabilities in docs/guide.md ("What each backend runs"; tests/project/test_docs_truth.py holds
# the table, this registry and the backends' behaviour to one another). ``float64`` and
# ``simulation`` are not listed in ``features``: capabilities() reads them from
# ``dtypes`` and ``open``.
FEATURES = {
    "gpu": "runs on a GPU",
    "adaptive": "adaptive methods (`bs3`, `dopri5`, `tsit5`, `dop853`, `vern7`, `vern9`)",
    "stiff": "the stiff methods `rosenbrock23`, `rodas4`, `rodas5p`",
    "events": "events (`when`, `stop when`)",
    "stiff_events": "a stiff method with events",
    "noise": "noise (`euler`, `milstein`)",
    "history": "`save_every` histories",
    "save_at": "`save_at` (states at chosen times)",
    "reductions": "basins: `coupled`, reductions, `collapse`",
    "flux": "`flux` into outputs",
    "observe_peak": "observers `peak`, `trough` (`integral`, `average`: every backend)",
    "observe_first": "the observer `first`",
    "progress": "`progress=` (called between chunks)",
    "simulation": "`vgpu.Simulation` (explicit methods)",
    "float64": "`dtype=\"float64\"`",
    "float64_functions": "float64 `sin`, `exp`, `log`, `x ^ y`, ...",
}


@dataclass(frozen=True)
class Caches:
    """A backend's kernel caches, as ``vgpu.cache_info`` / ``clear_cache`` / ``evict``
    and ``vgpuc cache info/clear`` manage them (each callable imports no more of the
    backend than its caches need: clearing never starts a driver)."""

    clear: Callable[[bool, bool], dict]     # clear(memory, disk) -> {"memory": n, "disk": n}
    info: Callable[[], dict]                # memory_entries, memory_capacity, [memory_bytes],
                                            # its disk cache's info (disk_cache.JsonCache.info)
    # evict(field, dtype, per_trajectory) -> True if any of the field's kernels went (dtype,
    # per_trajectory: None means any); None: the backend cannot pick one field's kernels
    evict: Callable | None = None
    disk: tuple[str, ...] = ()              # its kinds of disk entries (disk_cache.SUFFIXES)


def kernel_caches(module: str, disk: tuple[str, ...], attr: str = "MEMORY") -> Caches:
    """The Caches of a backend whose kernels are a runtime/kernel_cache.KernelCache:
    ``attr`` of ``module``, imported only when first managed (a module that imports no
    driver); its ``info``, ``clear_caches`` and ``evict_field``."""
    def cache():
        return getattr(importlib.import_module(module), attr)
    return Caches(clear=lambda memory, disk: cache().clear_caches(memory, disk),
                  info=lambda: cache().info(),
                  evict=lambda field, dtype, pt: cache().evict_field(field, dtype, pt),
                  disk=disk)


@dataclass(frozen=True)
class Backend:
    """One backend, as the API, ``vgpuc info`` and ``--backend`` see it."""

    name: str
    description: str                        # one line, for `vgpuc info` and --help
    available: Callable[[], tuple[bool, str]]   # (can run here, why not)
    run: Callable       # run(prepared, data, progress) -> Solution (call/prepare.py)
    dtypes: tuple[str, ...] = ("float32", "float64")
    features: frozenset = _field(default_factory=frozenset)   # e.g. {"gpu", "history"}
    # software() -> True when this (available) GPU backend runs on a CPU renderer here
    # (llvmpipe, lavapipe, SwiftShader, WARP): auto then tries it after real GPUs and
    # after the native CPU backends
    software: Callable[[], bool] | None = None
    # open(prepared, data) -> a Simulation session (call/session.py); None: the backend
    # has none (a Simulation on it is a BackendError, and auto moves on)
    open: Callable | None = None
    caches: Caches | None = None            # its kernel caches; None: it keeps none
    # start_probe() begins what available() finds out in the background and returns at
    # once (available() then waits for it): start_probe below, before a call's front end
    start_probe: Callable[[], None] | None = None
    # a backend for hardware most machines lack (cuda): auto passes it without a warning
    # where it is not available (naming it explicitly still says why)
    absent_quietly: bool = False

    @property
    def gpu(self) -> bool:
        return "gpu" in self.features


def capabilities(backend: Backend) -> frozenset:
    """The FEATURES ``backend`` has: its ``features``, ``float64`` when it takes that
    dtype, ``simulation`` when it opens a Simulation session."""
    extra = {"float64"} if "float64" in backend.dtypes else set()
    if backend.open is not None:
        extra.add("simulation")
    return frozenset(backend.features) | extra


_lock = threading.Lock()
_loaded: dict[str, Backend] = {}            # name -> Backend, once its module is imported
_extra: dict[str, Backend] = {}              # backends registered at run time (register)
_order: dict[str, tuple] = {}               # names(), choices(), auto_order(), until a
                                            # register or unregister
_generation = [0]                            # bumped by register / unregister


def register(backend: Backend) -> None:
    """Add a backend at run time, or stand in for one of the same name: it joins
    ``names()`` and ``auto``'s order (GPU backends before the others)."""
    with _lock:
        _extra[backend.name] = backend
        _order.clear()
        _generation[0] += 1


def unregister(name: str) -> None:
    with _lock:
        _extra.pop(name, None)
        _order.clear()
        _generation[0] += 1


def _remember(key: str, value, generation: int):
    """Keep a derived listing unless register/unregister changed the registry since it
    was computed (then the next call computes it again)."""
    with _lock:
        if _generation[0] == generation:
            _order.setdefault(key, value)
    return value


def names() -> tuple[str, ...]:
    """Every backend's name, in ``auto``'s order (GPU backends first, numpy last)."""
    hit = _order.get("names")
    if hit is None:
        generation = _generation[0]
        everything = list(_PACKAGES) + [n for n in _extra if n not in _PACKAGES]
        hit = _remember("names", tuple(sorted(
            everything, key=lambda n: (not _is_gpu(n), n == "numpy"))), generation)
    return hit


def choices() -> tuple[str, ...]:
    """What ``backend=`` and ``--backend`` accept: ``auto`` and every backend's name."""
    hit = _order.get("choices")
    if hit is None:
        generation = _generation[0]
        hit = _remember("choices", ("auto",) + names(), generation)
    return hit


def get(name: str) -> Backend:
    """The backend called ``name`` (KeyError if none is)."""
    hit = _extra.get(name) or _loaded.get(name)
    if hit is not None:
        return hit
    module = importlib.import_module(_PACKAGES[name][0])
    with _lock:
        return _loaded.setdefault(name, module.BACKEND)


def cached() -> tuple[tuple[str, Caches], ...]:
    """(name, Caches) of every backend that keeps kernels, in ``names()`` order (a
    backend registered at run time included)."""
    return tuple((n, b.caches) for n in names() for b in (get(n),) if b.caches is not None)


def auto_order() -> tuple[Backend, ...]:
    """Every backend, in the order ``auto`` tries them (loaded once; register and
    unregister start again): GPU backends on a real GPU, then the native CPU backends,
    then GPU backends on a CPU renderer (llvmpipe, lavapipe), then numpy. On Linux
    without a GPU device node the built-in GPU backends are put with the CPU renderers
    without starting them (no_gpu_devices): deciding the order costs no OpenGL context
    and no wgpu device."""
    hit = _order.get("auto")
    if hit is None:
        generation = _generation[0]
        listed = [get(n) for n in names()]
        soft = _builtin_on_software()
        rank = {b.name: (_group(b, soft), i) for i, b in enumerate(listed)}
        hit = _remember("auto", tuple(sorted(listed, key=lambda b: rank[b.name])), generation)
    return hit


_probing: set = set()       # the backend= values start_probe has been given


def start_probe(name: str) -> None:
    """Start, in the background, the probe of the backend a call of ``backend=name``
    will likely run on, so that it overlaps the call's front end (the cpu backend's C
    compiler probe: 0.1 s with an empty cache). Only where knowing that backend costs no
    device: ``auto`` on Linux without a GPU device node (no_gpu_devices: the built-in
    GPU backends rank after cpu without starting) and no GPU backend registered at run
    time; a backend named. Once per name and process; a hint only (available() probes
    itself, and says why not)."""
    if name in _probing:
        return
    _probing.add(name)
    try:
        if name == "auto":
            if any(b.gpu for b in list(_extra.values())) or not no_gpu_devices():
                return
            backend = auto_order()[0]
        elif name in _PACKAGES or name in _extra:
            backend = get(name)
        else:
            return
        if backend.start_probe is not None:
            backend.start_probe()
    except Exception:           # noqa: BLE001 - the call itself meets it, and says so
        return


def _group(backend: Backend, soft: Callable[[Backend], bool] | None = None) -> int:
    """``auto``'s rank of a backend: 0 a GPU backend on a real GPU, 1 a CPU backend, 2 a
    GPU backend on a CPU renderer (or not available), 3 numpy. ``soft`` (from
    _builtin_on_software) tells a built-in GPU backend that can only find a CPU renderer
    here without starting it (a wgpu device takes seconds)."""
    if backend.name == "numpy":
        return 3
    if not backend.gpu:
        return 1
    soft = soft or _builtin_on_software()
    return 2 if soft(backend) or _on_software(backend) or not _usable(backend) else 0


def fastest(dtype: str, exclude: tuple[str, ...] = ()) -> str:
    """The name of the backend ``auto`` would try first for ``dtype`` among those
    available here, leaving out ``exclude``: what a backend that refuses a call
    suggests instead (numpy, always available, last). Only the candidates that have
    ``dtype`` are probed."""
    listed = [get(n) for n in names() if n not in exclude]
    listed = [b for b in listed if dtype in b.dtypes]
    soft = _builtin_on_software()
    ranked = sorted(enumerate(listed), key=lambda ib: (_group(ib[1], soft), ib[0]))
    return next((b.name for _, b in ranked if b.name == "numpy" or _usable(b)), "numpy")


# Device nodes of GPU drivers on Linux: DRM (Intel, AMD, virtio, Nouveau ...), NVIDIA's
# own driver, and WSL's paravirtualised GPU. A GL or Vulkan driver that reaches a GPU
# opens one of them; without any, every one here is a CPU renderer (llvmpipe, lavapipe).
GPU_DEVICE_GLOBS = ("/dev/dri/renderD*", "/dev/dri/card*", "/dev/nvidia[0-9]*", "/dev/dxg")


def no_gpu_devices() -> bool:
    """True on Linux when no GPU device node exists (so no backend can reach a GPU);
    False elsewhere, or when one exists (then auto asks the GPU backends themselves)."""
    if not sys.platform.startswith("linux"):
        return False
    import glob
    return not any(glob.glob(pattern) for pattern in GPU_DEVICE_GLOBS)


def _builtin_on_software() -> Callable[[Backend], bool]:
    """Whether a backend is a built-in GPU backend that can only find a CPU renderer here
    (no_gpu_devices), decided without starting it."""
    cpu_only = no_gpu_devices()
    return lambda b: cpu_only and b.gpu and b.name in _PACKAGES and b.name not in _extra


def _on_software(backend: Backend) -> bool:
    """Does this GPU backend run on a CPU renderer here (False when unknown or absent)?"""
    if not backend.gpu or backend.software is None:
        return False
    try:
        return bool(backend.available()[0] and backend.software())
    except Exception:           # noqa: BLE001 - a probe that fails ranks as a real GPU
        return False


def _usable(backend: Backend) -> bool:
    try:
        return bool(backend.available()[0])
    except Exception:           # noqa: BLE001
        return False


def why_chosen(backend: Backend) -> str:
    """Why ``auto`` runs on ``backend``: what it runs on, and what came before it."""
    order = auto_order()
    before = order[:order.index(backend)] if backend in order else ()
    kind = ("a CPU renderer" if _builtin_on_software()(backend) or _on_software(backend)
            else "a real GPU") if backend.gpu else "the CPU"
    text = f"backend=auto runs on {backend.name} ({kind})"
    if before:
        text += "; before it: " + ", ".join(
            f"{b.name} ({'available' if b.available()[0] else 'not available'})" for b in before)
    if backend.gpu and _on_software(backend):
        text += "; no GPU backend has a real GPU adapter here"
    return text


_forked_from: set = set()      # GPU backends the process this one was forked from had used


def _after_fork_in_child() -> None:
    """Remember which GPU backends were loaded (so, likely started a driver) when this
    process was forked: Mesa's drivers (llvmpipe, lavapipe) and GPU drivers do not
    survive a fork, so a GPU backend must not start in the child (forked_after_gpu)."""
    _forked_from.update(n for n, b in list(_loaded.items()) if b.gpu)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forked_after_gpu() -> tuple[str, ...]:
    """The GPU backends an ancestor of this process had loaded before forking it ()."""
    return tuple(sorted(_forked_from))


def _is_gpu(name: str) -> bool:
    if name in _extra:
        return _extra[name].gpu
    return _PACKAGES[name][1]
