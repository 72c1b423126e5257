"""Every compiled backend's kernels in memory, and the keys they are found by: written
once for glsl, wgpu and cpu (their disk sides: vgpu_compiler/disk_cache.py).

A ``KernelCache`` is one backend's bounded LRU (call/lru.py) of compiled kernels, keyed
by a memory key: the key of the kernel's text on disk (``identity``: the field's IR
without source positions, dtype, per-trajectory params, the compiler, the device) and,
where buffers are part of the kernel, the shapes that size them (``memory_key``). A
kernel that owns driver objects (GL programs and buffers) is handed to the backend's
``release`` hook whenever it leaves (pushed out, evicted, cleared). An entry is any object
with ``key``, and ``field_id``, ``dtype``, ``pt`` (whose kernel it is: ``evict_field``).

The cache also manages its backend's disk cache (``disk``: a disk_cache.JsonCache, or
an object with ``clear()`` and ``info()``), so ``info``, ``clear_caches`` and
``evict_field`` are every backend's: the registry's ``Caches`` (backends/__init__.py,
``kernel_caches``) are these three methods, for ``vgpu.cache_info``, ``clear_cache``,
``evict`` and ``vgpuc cache``.

``for_call`` / ``find_or_build`` are the way to a call's kernel that glsl and wgpu share:
the call's Prepared slot (checked against this cache, so an evicted kernel is not used),
then memory, then the disk, then built; a kernel the driver rejects has its disk entry
dropped, and is built once more if it came from disk.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import weakref
from pathlib import Path
from typing import Callable

from ..call.counters import COUNTERS
from ..call.lru import LRU
from ..errors import BackendError

FIELD_ID_CHARS = 16          # a disk key starts with this much of the field id (evict)


class KernelCache:
    """One backend's compiled kernels, least recently used dropped first (and released).

    ``release(kernel)``: what a dropped kernel owns, freed; ``disk``: the backend's disk
    cache; ``variants(field)``: the fields whose kernels are the field's (save_at's dense
    variant), for ``evict_field``; ``nbytes(kernel)``: the device memory a kernel holds
    (``memory_bytes``); ``forget_after_fork``: a forked child forgets the kernels
    without releasing them (driver objects do not survive a fork)."""

    def __init__(self, capacity: int, *, release: Callable | None = None, disk=None,
                 variants: Callable | None = None, nbytes: Callable | None = None,
                 forget_after_fork: bool = False):
        self._lru: LRU = LRU(capacity, on_evict=self._dropped)
        self.release, self.disk, self.variants, self._nbytes = release, disk, variants, nbytes
        self._identities = LRU(256)  # (id(field), *memo) -> (weakref, identity)
        if forget_after_fork:
            _FORGET.add(self)

    # --- the LRU ---------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._lru.capacity

    def get(self, key):
        return self._lru.get(key)

    def put(self, kernel, key=None):
        """Insert ``kernel`` under ``key`` (its own ``key`` by default), or return the one
        another thread inserted first; beyond capacity the least recently used go."""
        return self._lru.put(kernel.key if key is None else key, kernel)

    def evict(self, key) -> bool:
        """Drop (and release) the kernel of ``key``; True if there was one."""
        k = self._lru.pop(key)
        if k is not None:
            COUNTERS.add("evictions")
        return k is not None

    def clear(self) -> int:
        """Drop (and release) every kernel; how many there were."""
        items = self._lru.clear()
        if self.release is not None:
            for k in items:
                self.release(k)
        return len(items)

    def resize(self, capacity: int) -> None:
        self._lru.resize(capacity)

    def keys(self) -> list:
        return self._lru.keys()

    def values(self) -> list:
        return self._lru.values()

    def __len__(self) -> int:
        return len(self._lru)

    def nbytes(self) -> int:
        return sum(self._nbytes(k) for k in self._lru.values()) if self._nbytes else 0

    def _dropped(self, kernel, pushed_out: bool) -> None:
        if pushed_out:
            COUNTERS.add("evictions")
        if self.release is not None:
            self.release(kernel)

    # --- what the registry's Caches call ----------------------------------------------
    def info(self) -> dict:
        out = {"memory_entries": len(self), "memory_capacity": self.capacity}
        if self._nbytes is not None:
            out["memory_bytes"] = self.nbytes()
        if self.disk is not None:
            out.update(self.disk.info())
        return out

    def clear_caches(self, memory: bool = True, disk: bool = True) -> dict:
        out = {}
        if memory:
            out["memory"] = self.clear()
        if disk:
            out["disk"] = self.disk.clear() if self.disk is not None else 0
        return out

    def evict_field(self, field, dtype: str | None = None, per_trajectory_params=None) -> bool:
        """Drop a field's kernels (every shape, dtype, per-trajectory params, device and
        compiler version) from memory, and their text from disk (a disk cache that can
        pick them: ``evict_where``); ``dtype`` and ``per_trajectory_params`` (None: any)
        narrow it. True if anything was dropped."""
        fields = self.variants(field) if self.variants is not None else (field,)
        fids = {canonical(f)[0] for f in fields}
        pt = None if per_trajectory_params is None else tuple(sorted(per_trajectory_params))

        def chosen(d, p) -> bool:
            return (dtype is None or d == dtype) and (pt is None or tuple(p) == pt)

        # (an entry that says no field_id, a cuda binary, is never picked)
        dropped = [self.evict(k.key) for k in self._lru.values()
                   if getattr(k, "field_id", None) in fids and chosen(k.dtype, k.pt)]
        pick = getattr(self.disk, "evict_where", None)
        on_disk = 0 if pick is None else sum(
            pick(fid[:FIELD_ID_CHARS] + "-",
                 lambda meta: chosen(meta.get("dtype"), meta.get("pt", ()))) for fid in fids)
        return any(dropped) or on_disk > 0

    # --- a call's kernel ----------------------------------------------------------------
    def remembered(self, slots: dict, slot: str, env):
        """The kernel a call's Prepared slot remembers (counted as a memory hit) when this
        cache still holds it (not evicted nor cleared) and ``env`` (what the key reads
        from the environment) is unchanged; else None."""
        hit = slots.get(slot)
        if hit is not None and hit[0] == env and self._lru.get(hit[2].key) is hit[2]:
            COUNTERS.add("memory_hits")
            return hit[1]
        return None

    def still(self, slots: dict, slot: str, fast, env, made: tuple, nesting) -> bool:
        """True when a call's one-dispatch fast path ``fast`` (shader/fast.py:
        a OneDispatch, with its ``kernel`` and ``made``) still runs the call as the full
        path would: its Prepared's ``slot`` still remembers ``fast.kernel``, found under
        this ``env``; this cache still holds it (not evicted nor cleared); ``made`` (what
        else decided it: the limits in force, the device) is what it was made under, the
        same two objects; and no progress callback of a run of this thread is underway
        (``nesting``: runtime/progress.Nesting; such a call gets a private kernel)."""
        hit, was = slots.get(slot), fast.made
        return (hit is not None and hit[1] is fast.kernel and hit[0] == env
                and made[0] is was[0] and made[1] is was[1] and not nesting.kernels
                and self._lru.get(hit[2].key) is hit[2])

    def for_call(self, slots: dict, slot: str, env, identify: Callable, find: Callable):
        """A call's kernel: the one its slot remembers, else ``find(ident)`` (``ident``:
        the slot's identity when ``env`` is unchanged, else ``identify()``), remembered."""
        kernel = self.remembered(slots, slot, env)
        if kernel is not None:
            return kernel
        hit = slots.get(slot)
        ident = hit[3] if hit is not None and hit[0] == env else identify()
        kernel = find(ident)
        slots[slot] = (env, kernel, getattr(kernel, "base", kernel), ident)
        return kernel

    def identity(self, field, memo: tuple, parts: Callable[[], list],
                 positions: bool = False) -> tuple[str, str, str]:
        """``identity(field, *parts(), positions)``, kept per field object and ``memo``
        (what else it depends on): a call that no signature describes (a list, a 0-d
        array) has a Prepared of its own each time, and digesting the field takes about
        0.5 ms for Lorenz."""
        at = (id(field),) + memo
        hit = self._identities.get(at)
        if hit is not None and hit[0]() is field:
            return hit[1]
        ident = identity(field, *parts(), positions=positions)
        self._identities.put(at, (weakref.ref(field), ident))
        return ident

    def find_or_build(self, mkey: str, key: str, build: Callable, make: Callable,
                      rejected: Callable, disk: bool = True):
        """The kernel of memory key ``mkey``: from memory, else its text and meta from the
        disk (``key``), else ``build() -> (text, meta)`` (stored on disk); then
        ``make(mkey, text, meta)`` compiles it. A BackendError from ``make`` is the
        caller's; any other is the driver rejecting the text: its disk entry is dropped,
        and a text from disk is built once more, a built one is ``rejected(exc)`` (the
        BackendError raised)."""
        kernel = self._lru.get(mkey)
        if kernel is not None:
            COUNTERS.add("memory_hits")
            return kernel
        found = self.disk.load(key) if disk else None
        if found is not None:
            COUNTERS.add("disk_hits")
            text, meta = found
        else:
            text, meta = build()
            self.disk.store(key, text, meta)
        try:
            kernel = make(mkey, text, meta)
        except BackendError:
            raise
        except Exception as exc:        # noqa: BLE001 - a stale, foreign or wrong text
            self.disk.evict(key)
            if found is not None:
                return self.find_or_build(mkey, key, build, make, rejected, disk=False)
            raise rejected(exc) from None
        COUNTERS.add("compiles")
        return self.put(kernel)


# --- keys -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def environ_reader(name: str) -> Callable[[], str | None]:
    """A function reading ``os.environ.get(name)`` (a kernel key's environment variable,
    read on every call). On POSIX, os.environ keeps the environment as bytes (``_data``)
    and encodes the name at each look-up: reading its dict with the name encoded once is
    the same look-up, in a fraction of the time."""
    environ = os.environ
    data, encode, decode = (getattr(environ, a, None)
                            for a in ("_data", "encodekey", "decodevalue"))
    if type(data) is not dict or encode is None or decode is None:
        return lambda: environ.get(name)
    key = encode(name)

    def read():
        if os.environ is not environ:       # replaced wholesale: read the new one
            return os.environ.get(name)
        raw = data.get(key)
        return None if raw is None else decode(raw)
    return read


def fingerprint(version: str, *folders: Path) -> str:
    """A hash of a backend's code: ``version``, the templates and Python of ``folders``
    (their own files) and all of codegen's Python: a change to any is a new kernel."""
    from .. import codegen
    h = hashlib.sha256(version.encode())
    for folder in folders:
        hash_files(h, [p for p in sorted(Path(folder).iterdir()) if p.suffix in (".j2", ".py")])
    root = Path(codegen.__file__).parent        # the targets' words and the builders
    return hash_files(h, sorted(root.rglob("*.py")), root).hexdigest()


def hash_files(h, paths, root: Path | None = None):
    """``h`` (a hashlib hash) updated with each file of ``paths``: its name (its path
    under ``root``, when given) and its bytes; returns ``h``. A backend's code digest
    (``fingerprint``; the cpu's disk key: backends/cpu/source_key.py)."""
    for p in paths:
        name = p.name if root is None else p.relative_to(root).as_posix()
        h.update(name.encode() + b"\0" + p.read_bytes())
    return h


def identity(field, fingerprint: str, *parts: str, positions: bool = False) -> tuple[str, str, str]:
    """(key, field id, positions digest) of a field's kernel text: the key digests the
    compiler's ``fingerprint``, the field's IR without source positions and ``parts``
    (dtype, per-trajectory params, device, ...), and the positions too with
    ``positions`` (a text whose error table names lines); it starts with the field id
    (``evict_field``). Linear in the IR: KernelCache.identity keeps it."""
    fid, spans = canonical(field)
    words = [fingerprint, fid, *parts] + ([spans] if positions else [])
    key = hashlib.sha256("\x00".join(words).encode("utf-8")).hexdigest()[:40]
    return f"{fid[:FIELD_ID_CHARS]}-{key}", fid, spans


@functools.lru_cache(maxsize=1024)
def memory_key(key: str, shapes: tuple) -> str:
    """A kernel's key in memory: its text's key and the shapes that size its buffers."""
    return hashlib.sha256(f"{key}\x00{shapes!r}".encode()).hexdigest()[:40]


def shape_signature(bound) -> tuple:
    """The shapes that size a kernel's buffers: part of its memory key. (bind fills
    inputs and outputs in declaration order; dims are sorted: the order they are bound
    in depends on the call.)"""
    return (bound.grid_shape, tuple(sorted(bound.dims.items())),
            tuple((k, v.shape) for k, v in bound.inputs.items()),
            tuple(bound.output_shapes.items()))


def canonical(field) -> tuple[str, str]:
    """(a digest of the field's IR without source positions, a digest of the positions).
    Iterative over the IR DAG (deep expressions do not recurse), each shared node
    digested once: linear in the DAG. Fields that take no part in equality (spans)
    go to the second digest."""
    memo: dict[int, str] = {}
    spans = hashlib.sha256()
    stack = [field]
    while stack:
        obj = stack[-1]
        if id(obj) in memo:
            stack.pop()
            continue
        kids = _kids(obj)
        todo = [k for k in kids if id(k) not in memo]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[id(obj)] = _digest(obj, kids, memo, spans)
    return memo[id(field)], spans.hexdigest()[:32]


def _kids(obj) -> list:
    if isinstance(obj, (tuple, list)):
        return list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare]
    return []


def _digest(obj, kids: list, memo: dict, spans) -> str:
    if isinstance(obj, (tuple, list)):
        return "(" + ",".join(memo[id(k)] for k in kids) + ")"
    if not (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        return repr(obj)
    names = [f.name for f in dataclasses.fields(obj) if f.compare]
    inner = ",".join(f"{n}={memo[id(k)]}" for n, k in zip(names, kids))
    others = [repr(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.compare]
    if others:
        spans.update("\x00".join(others).encode("utf-8") + b"\x01")
    return hashlib.sha256(f"{type(obj).__name__}({inner})".encode()).hexdigest()[:32]


# --- fork ----------------------------------------------------------------------------------
_FORGET: "weakref.WeakSet[KernelCache]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child cannot use its parent's driver objects: the caches made with
    ``forget_after_fork`` forget their kernels without releasing them (call/lru.py gives
    each LRU a fresh lock)."""
    for cache in list(_FORGET):
        cache._lru._items.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
