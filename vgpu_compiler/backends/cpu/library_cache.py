"""The cpu backend's compiled libraries on disk: ``<name>-<key>-<digest>.so`` in
``VGPU_CACHE_DIR``/cpu (or ``platformdirs.user_cache_dir("vgpu")``/cpu).

A library is code that loading it runs (its constructors), so it is loaded only from
a folder the cache trusts (vgpu_compiler/disk_cache.py: a private folder of this user, in a
root that is private too), only from files of this user, and only after the SHA-256
of its bytes matches the digest in its name (the first 32 hex digits). A damaged,
truncated or empty file fails that check before anything maps it (``dlopen`` of a
truncated library kills the process with SIGBUS when it touches the missing pages):
it is ignored, rebuilt and replaced. A file is never rewritten in place: a new one is
written beside it and moved over it (``os.replace``), so a library that a process has
loaded stays whole. A folder that cannot be trusted, made or written (read-only,
full) turns the cache off for the process with one warning: libraries are then
compiled and loaded from a private temporary folder. The size bound, ``vgpuc cache
info`` and ``clear`` count these files with every other backend's entries.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
from pathlib import Path

from ... import disk_cache as dc

log = logging.getLogger("vgpu")

SUFFIX = dc.SUFFIXES["cpu"]
DIGITS = 32
OFF = ("the cpu backend's library cache is off, libraries are compiled for this "
       "process only")
_trust = dc.Trust(OFF)


def folder() -> Path:
    return dc.folder("cpu")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:DIGITS]


def _candidates(where: Path, name: str, key: str) -> list[Path]:
    head = f"{name}-{key}-"
    return [p for p, _ in dc.scan(where, SUFFIX) if p.name.startswith(head)]


def load(name: str, key: str) -> ctypes.CDLL | None:
    """The library ``name`` of ``key`` from the disk cache, or None (absent, damaged,
    another user's, or the cache is off)."""
    where = folder()
    if not _trust.ready(where):
        return None
    for path in _candidates(where, name, key):
        data = dc.read_owned(path)
        if data is None or _digest(data) != path.name[-len(SUFFIX) - DIGITS:-len(SUFFIX)]:
            log.debug("vgpu: ignoring a damaged or foreign cached library %s", path)
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:          # (verified: e.g. a folder mounted noexec)
            log.debug("vgpu: cannot load the cached library %s: %s", path, exc)
            continue
        dc.touch(path)
        return lib
    return None


def store(name: str, key: str, data: bytes) -> Path | None:
    """Put a library's bytes into the disk cache (replacing any other file of ``key``);
    its path there, or None when the cache is off."""
    where = folder()
    path = where / f"{name}-{key}-{_digest(data)}{SUFFIX}"
    if not dc.put(_trust, path, data, SUFFIX):
        return None
    for old in _candidates(where, name, key):
        if old != path:
            dc.unlink(old)
    return path


def clear() -> int:
    return dc.clear(folder(), SUFFIX)


def info() -> dict:
    where = folder()
    n, nbytes = dc.size(where, SUFFIX)
    why = _trust.why_off(where)
    return {"disk_folder": str(where), "disk_entries": n, "disk_bytes": nbytes,
            "disk_enabled": why is None, "disk_off_reason": why}


def reset() -> None:
    """Check the folders again (as a new process would)."""
    _trust.reset()
