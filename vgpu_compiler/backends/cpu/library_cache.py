"""The cpu backend's compiled libraries on disk: ``<name>-<key>-<tag>-<digest>.so`` in
``VGPU_CACHE_DIR``/cpu (or ``platformdirs.user_cache_dir("vgpu")``/cpu); the tag (the
start of the field's id, the dtype, the per-trajectory params: ``tag_of``) lets
``vgpu.evict`` pick a field's libraries (``evict_where``).

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
import re
from pathlib import Path

from ... import disk_cache as dc
from ...runtime.kernel_cache import FIELD_ID_CHARS

log = logging.getLogger("vgpu")

SUFFIX = dc.SUFFIXES["cpu"]
DIGITS = 32
MAX_TAG = 120
_TAG = re.compile(r"[0-9a-f]+\.[a-z0-9]+\.[A-Za-z0-9_+]*")
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


def store(name: str, key: str, data: bytes, tag: str = "") -> Path | None:
    """Put a library's bytes into the disk cache (replacing any other file of ``key``);
    its path there, or None when the cache is off. ``tag`` (``tag_of``) says whose
    kernel it is, between the key and the digest (``evict_where``)."""
    where = folder()
    tag = f"{tag}-" if tag and len(tag) <= MAX_TAG and _TAG.fullmatch(tag) else ""
    path = where / f"{name}-{key}-{tag}{_digest(data)}{SUFFIX}"
    if not dc.put(_trust, path, data, SUFFIX):
        return None
    for old in _candidates(where, name, key):
        if old != path:
            dc.unlink(old)
    return path


def tag_of(field_id: str, dtype: str, pt: tuple) -> str:
    """A library's tag: the start of its field's id, its dtype and per-trajectory
    params (one too long to name is stored without a tag: no evict_where picks it)."""
    return f"{field_id[:FIELD_ID_CHARS]}.{dtype}.{'+'.join(pt)}"


def evict_where(prefix: str, chosen) -> int:
    """Remove the libraries whose tag's field id and ``-`` is ``prefix`` and whose
    ``{"dtype": ..., "pt": (...)}`` is ``chosen`` (runtime/kernel_cache.py's
    evict_field); how many went. An untagged library is never picked."""
    n = 0
    for path, _ in dc.scan(folder(), SUFFIX):
        parts = path.name[:-len(SUFFIX)].rsplit("-", 2)
        fields = parts[1].split(".", 2) if len(parts) == 3 else []
        if len(fields) == 3 and f"{fields[0]}-" == prefix and chosen(
                {"dtype": fields[1], "pt": tuple(fields[2].split("+")) if fields[2] else ()}):
            n += dc.unlink(path)
    return n


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
