"""Lowered GLSL and its metadata on disk, shared by processes of one user.

One JSON file per key under ``VGPU_CACHE_DIR`` (``~`` expanded) or
``platformdirs.user_cache_dir("vgpu")``/glsl. A file holds a format number, its
key and a SHA-256 of its payload: anything damaged, truncated or foreign is
ignored (and rebuilt by the caller).

Trust: the checksum only catches damage, not forgery, so the folder itself is
the trust boundary. It is made private (mode 0700) when created, and entries
are used only from a folder that this user owns and that no one else can write
(and only files this user owns); otherwise the disk cache is off for the
process, with one warning, and kernels are kept in memory only.

Writes go to a temporary file (``.tmp-*``) in the same folder and are moved
into place with ``os.replace``, so readers in other processes see either the
old entry, the new one, or none. ``clear`` leaves temporary files younger than
an hour alone (they may be another process's write in flight); older ones are
left by killed writers and swept by ``clear`` and after each write. A write
that loses its temporary file or folder (deleted meanwhile) is skipped, not an
error. After each write the folder is kept under ``VGPU_CACHE_MAX_BYTES``
(least recently used entries first: a disk hit sets the file's access time).
Deleting entries is safe with other processes: a reader that opened a file
keeps reading it, one that comes later misses and rebuilds.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import tempfile
import threading
import time
from pathlib import Path

from ...errors import CacheError

log = logging.getLogger("vgpu")

FORMAT = 2
SUFFIX = ".glsl.json"
TMP_PREFIX = ".tmp-"
TMP_MAX_AGE = 3600.0                  # seconds: older temporary files were left by killed writers
MAX_BYTES_ENV = "VGPU_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 << 20
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def default_folder() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu")) / "glsl"


def max_bytes() -> int:
    """The size bound of the disk cache: ``VGPU_CACHE_MAX_BYTES`` (bytes, or with a
    K, M or G suffix), else 256 MiB."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(?:i?B)?", raw, re.IGNORECASE)
    if m is None:
        raise CacheError(f"{MAX_BYTES_ENV}={raw!r} is not a size: give bytes, or a number "
                         f"with K, M or G (e.g. 200M)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


class DiskCache:
    def __init__(self, folder: str | os.PathLike | None = None):
        self._explicit = _expand(folder)
        self._lock = threading.Lock()
        self.disabled: str | None = None      # why the disk cache is off, if it is
        self._warned = False
        self._trusted: set[Path] = set()      # folders checked in this process

    @property
    def folder(self) -> Path:
        return self._explicit if self._explicit is not None else default_folder()

    def set_folder(self, folder: str | os.PathLike | None) -> None:
        with self._lock:
            self._explicit = _expand(folder)
            self.disabled, self._warned = None, False
            self._trusted.clear()

    # --- trust ----------------------------------------------------------------------
    def _ready(self, folder: Path) -> bool:
        """Whether ``folder`` may be used: made (private) if missing, and checked once."""
        if self.disabled:
            return False
        if folder in self._trusted:
            return True
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = folder.stat()
        except OSError as exc:
            self._disable(f"cannot use {folder} ({exc.strerror or exc})")
            return False
        why = distrust(st)
        if why:
            fix = "make it private (chmod 700) or " if "mode" in why else ""
            self._disable(f"{folder} {why}, so its entries could be forged and are not used; "
                          f"{fix}set VGPU_CACHE_DIR to a folder of your own")
            return False
        self._trusted.add(folder)
        return True

    def _disable(self, why: str) -> None:
        with self._lock:
            self.disabled = why
            if not self._warned:
                self._warned = True
                log.warning("vgpu: the kernel disk cache is off, kernels are kept in memory "
                            "only: %s", why)

    # --- entries ------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str) -> tuple[str, dict] | None:
        """(glsl, meta) for ``key``, or None when absent or unusable. A hit marks the
        entry used (its access time), for the size bound."""
        if not self._ready(self.folder):
            return None
        path = self._path(key)
        found = _read(path, key)
        if found is not None:
            _touch(path)
        return found

    def store(self, key: str, glsl: str, meta: dict) -> bool:
        folder = self.folder
        if not self._ready(folder):
            return False
        payload = {"glsl": glsl, "meta": meta}
        entry = {"format": FORMAT, "key": key, "sha256": _digest(payload), "payload": payload}
        data = json.dumps(entry, sort_keys=True).encode("utf-8")
        for attempt in range(2):
            try:
                _write(folder, self._path(key), data)
                break
            except FileNotFoundError:    # the folder or our temporary file was deleted
                self._trusted.discard(folder)
                if attempt or not self._ready(folder):
                    log.debug("vgpu: kernel cache folder %s changed under a write; "
                              "entry %s not stored", folder, key)
                    return False
            except OSError as exc:
                self._disable(f"cannot write to {folder} ({exc.strerror or exc})")
                return False
        self._housekeep(folder)
        return True

    # --- housekeeping ---------------------------------------------------------------
    def entries(self) -> list[Path]:
        try:
            return sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX)
                          and not p.name.startswith(TMP_PREFIX))
        except OSError:
            return []

    def evict(self, key: str) -> bool:
        return _unlink(self._path(key))

    def evict_where(self, prefix: str, chosen) -> int:
        """Delete the entries whose key starts with ``prefix`` and whose meta satisfies
        ``chosen(meta)`` (an unreadable entry is tested with ``{}``); returns how many."""
        count = 0
        for p in self.entries():
            if p.name.startswith(prefix):
                found = _read(p, p.name[: -len(SUFFIX)])
                if chosen(found[1] if found else {}):
                    count += _unlink(p)
        return count

    def clear(self) -> int:
        """Delete every entry, and temporary files old enough to be a killed writer's
        (a younger one may be a write in flight in another process)."""
        count = 0
        for p, st in _scan(self.folder):
            if not p.name.startswith(TMP_PREFIX):
                count += _unlink(p)
            elif _stale(st):
                _unlink(p)
        return count

    def _housekeep(self, folder: Path) -> None:
        """After a write: sweep stale temporary files, and delete the least recently
        used entries while the folder holds more than max_bytes()."""
        live = []
        for p, st in _scan(folder):
            if p.name.startswith(TMP_PREFIX):
                if _stale(st):
                    _unlink(p)
            else:
                live.append((max(st.st_atime, st.st_mtime), st.st_size, p))
        total, bound = sum(size for _, size, _ in live), max_bytes()
        for _, size, p in sorted(live):
            if total <= bound:
                break
            if _unlink(p):
                total -= size

    def info(self) -> dict:
        files = self.entries()
        size = 0
        for p in files:
            try:
                size += p.stat().st_size
            except OSError:
                pass
        why = self.disabled or self._distrusted()
        return {"disk_folder": str(self.folder), "disk_entries": len(files),
                "disk_bytes": size, "disk_max_bytes": max_bytes(),
                "disk_enabled": why is None, "disk_off_reason": why}

    def _distrusted(self) -> str | None:
        """Why the folder would not be trusted (None also when it does not exist yet)."""
        try:
            why = distrust(self.folder.stat())
        except OSError:
            return None
        return f"{self.folder} {why}" if why else None


def distrust(st: os.stat_result) -> str | None:
    """Why a folder with this stat is not to be trusted, or None (no check on Windows)."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if not hasattr(os, "getuid"):
        return None
    if st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _expand(folder) -> Path | None:
    return None if folder is None else Path(os.path.expanduser(os.fspath(folder)))


def _read(path: Path, key: str) -> tuple[str, dict] | None:
    try:
        with open(path, "rb") as fh:
            if hasattr(os, "getuid") and os.fstat(fh.fileno()).st_uid != os.getuid():
                log.debug("vgpu: ignoring a kernel cache entry of another user %s", path)
                return None
            raw = fh.read()
    except OSError:
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
        payload = entry["payload"]
        ok = (entry.get("format") == FORMAT and entry.get("key") == key
              and entry.get("sha256") == _digest(payload))
        if ok and isinstance(payload.get("glsl"), str) and isinstance(payload.get("meta"), dict):
            return payload["glsl"], payload["meta"]
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    log.debug("vgpu: ignoring a damaged kernel cache entry %s", path)
    return None


def _write(folder: Path, path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _scan(folder: Path):
    """(path, stat) of the cache's files (entries and temporary files) in ``folder``."""
    try:
        items = list(os.scandir(folder))
    except OSError:
        return
    for item in items:
        if item.name.endswith(SUFFIX):
            try:
                yield Path(item.path), item.stat(follow_symlinks=False)
            except OSError:
                continue


def _stale(st: os.stat_result) -> bool:
    return time.time() - st.st_mtime > TMP_MAX_AGE


def _touch(path: Path) -> None:
    try:
        st = path.stat()
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except OSError:
        pass


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _unlink(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False
