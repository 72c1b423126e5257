"""The kernel disk caches of every backend: where their folders are, what they trust,
atomic writes, temporary files and the size bound (glsl/disk_cache.py, wgpu/disk_cache.py,
cpu/library_cache.py and cuda/cubin_cache.py build on this; ``JsonCache`` is the shader
backends' cache and cuda's).

Layout: ``$VGPU_CACHE_DIR`` (``~`` expanded) holds the GLSL entries (``*.glsl.json``)
and the folders ``wgsl/`` (``*.wgsl.json``), ``cpu/`` (``*.so``, compiled libraries)
and ``cuda/`` (``*.cubin.json``, NVRTC's cubins and PTX); without it, ``glsl/``,
``wgsl/``, ``cpu/`` and ``cuda/`` of ``platformdirs.user_cache_dir("vgpu")`` (the root).

Trust: a checksum catches damage, not forgery, so the folder is the trust boundary.
Every folder VGPU makes is private (mode 0700, any missing folder above it too).
Entries are used only from a folder that this user owns and that no one else can
write (and, for a folder in the root, the same of the root), and only files this user
owns. Otherwise, or when the folder cannot be made or written (a file in the way, a
read-only or full disk), that cache is off for that folder for the process, with one
warning; the caller keeps its kernels in memory (the cpu backend builds in a private
temporary folder).

Writes go to a temporary file (``.tmp-*``) in the same folder and are moved into place
with ``os.replace``, so readers in other processes see the old entry, the new one or
none, and no file is ever rewritten in place (a library another process has loaded
stays whole). A failed write removes its temporary file. ``clear`` leaves temporary
files younger than an hour alone (they may be another process's write in flight); older
ones are left by killed writers and swept by ``clear`` and after each write. A write that
loses its temporary file or folder (deleted meanwhile) is skipped, not an error. After
each write the entries of every backend in the root are kept under
``VGPU_CACHE_MAX_BYTES`` together (a folder given explicitly, ``set_cache_dir``, on its
own), least recently used first (a disk hit sets the file's access time). Deleting
entries is safe with other processes: a reader that opened a file keeps reading it,
one that comes later misses and rebuilds.
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

from .errors import CacheError

log = logging.getLogger("vgpu")

CACHE_ENV = "VGPU_CACHE_DIR"
MAX_BYTES_ENV = "VGPU_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 << 20
TMP_PREFIX = ".tmp-"
TMP_MAX_AGE = 3600.0                  # seconds: older temporary files were left by killed writers
SUFFIXES = {"glsl": ".glsl.json", "wgsl": ".wgsl.json", "cpu": ".so",     # kind -> entries
            "cuda": ".cubin.json"}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


# --- where ------------------------------------------------------------------------------
def root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu"))


def folder(kind: str) -> Path:
    """The folder of one kind of entries (``SUFFIXES``): GLSL's is $VGPU_CACHE_DIR itself."""
    base = root()
    return base if kind == "glsl" and os.environ.get(CACHE_ENV) else base / kind


def above(path: Path) -> tuple[Path, ...]:
    """The folders checked with ``path``: the root, when ``path`` is a folder in it."""
    top = root()
    return (top,) if path != top and path.parent == top else ()


def max_bytes() -> int:
    """The size bound of the disk caches: ``VGPU_CACHE_MAX_BYTES`` (bytes, or with a
    K, M or G suffix), else 256 MiB."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(?:i?B)?", raw, re.IGNORECASE)
    if m is None:
        raise CacheError(f"{MAX_BYTES_ENV}={raw!r} is not a size: give bytes, or a number "
                         f"with K, M or G (e.g. 200M)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


# --- trust ------------------------------------------------------------------------------
def make_private(path: Path) -> None:
    """Make ``path`` and every missing folder above it, each private (0700)."""
    missing = []
    p = path
    while not p.exists() and p.parent != p:
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:         # another process made it meanwhile
            pass


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


def owned(st: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def trusted(path: Path) -> bool:
    """Whether files in the folder ``path`` may be used, by the rules above, for a cache
    with no warning of its own (the parser's tables, the compiled templates): made
    private if missing, then a folder of this user that no one else can write, in a
    root of the same."""
    try:
        make_private(path)
        return all(distrust(p.stat()) is None for p in (path,) + above(path))
    except OSError:
        return False


class Trust:
    """Which folders one cache may use in this process: each made private if missing and
    checked once; a folder that fails (or a write to it) turns the cache off for it, with
    one warning (``off``: what that means for the caller)."""

    def __init__(self, off: str):
        self.off = off
        self._lock = threading.Lock()
        self._trusted: set[Path] = set()
        self._refused: dict[Path, str] = {}

    def ready(self, path: Path) -> bool:
        if path in self._refused:
            return False
        if path in self._trusted:
            return True
        try:
            make_private(path)
            stats = [(p, p.stat()) for p in (*above(path), path)]
        except OSError as exc:
            self.refuse(path, f"cannot use {path} ({exc.strerror or exc})")
            return False
        for p, st in stats:
            why = distrust(st)
            if why:
                fix = "make it private (chmod 700) or " if "mode" in why else ""
                self.refuse(path, f"{p} {why}, so its entries could be forged and are not "
                                  f"used; {fix}set VGPU_CACHE_DIR to a folder of your own")
                return False
        self._trusted.add(path)
        return True

    def refuse(self, path: Path, why: str) -> None:
        with self._lock:
            if path in self._refused:
                return
            self._refused[path] = why
            self._trusted.discard(path)
        log.warning("vgpu: %s: %s", self.off, why)

    def forget(self, path: Path) -> None:
        self._trusted.discard(path)

    def reset(self) -> None:
        with self._lock:
            self._trusted.clear()
            self._refused.clear()

    def why_off(self, path: Path) -> str | None:
        """Why the cache is off for ``path`` (or would be: None also when it does not
        exist yet)."""
        if path in self._refused:
            return self._refused[path]
        for p in (*above(path), path):
            try:
                why = distrust(p.stat())
            except OSError:
                continue
            if why:
                return f"{p} {why}"
        return None


# --- files ------------------------------------------------------------------------------
def read_owned(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a file this user owns, else None."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            if not owned(st):
                log.debug("vgpu: ignoring a cache entry of another user %s", path)
                return None
            return fh.read()
    except OSError:
        return None


def write(path: Path, data: bytes, suffix: str) -> None:
    """``data`` into ``path`` through a temporary file beside it, moved into place."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        unlink(Path(tmp))
        raise


def put(trust: Trust, path: Path, data: bytes, suffix: str) -> bool:
    """Write an entry of a trusted folder (``write``): a folder deleted meanwhile is made
    again once; a folder that cannot be written turns the cache off for it. Then the
    folder is swept and the entries kept under the bound (``housekeep``)."""
    where = path.parent
    if not trust.ready(where):
        return False
    for attempt in range(2):
        try:
            write(path, data, suffix)
            break
        except FileNotFoundError:    # the folder or our temporary file was deleted
            trust.forget(where)
            if attempt or not trust.ready(where):
                log.debug("vgpu: kernel cache folder %s changed under a write; entry %s "
                          "not stored", where, path.name)
                return False
        except OSError as exc:
            trust.refuse(where, f"cannot write to {where} ({exc.strerror or exc})")
            return False
    housekeep(where, suffix)
    return True


def scan(where: Path, suffix: str):
    """(path, stat) of the cache's files (entries and temporary files) in ``where``."""
    try:
        items = list(os.scandir(where))
    except OSError:
        return
    for item in items:
        if item.name.endswith(suffix):
            try:
                yield Path(item.path), item.stat(follow_symlinks=False)
            except OSError:
                continue


def entries(where: Path, suffix: str) -> list[Path]:
    return sorted(p for p, _ in scan(where, suffix) if not p.name.startswith(TMP_PREFIX))


def clear(where: Path, suffix: str) -> int:
    """Delete every entry, and temporary files old enough to be a killed writer's
    (a younger one may be a write in flight in another process)."""
    count = 0
    for p, st in scan(where, suffix):
        if not p.name.startswith(TMP_PREFIX):
            count += unlink(p)
        elif _stale(st):
            unlink(p)
    return count


def size(where: Path, suffix: str) -> tuple[int, int]:
    """(entries, bytes) in ``where``."""
    found = [st.st_size for p, st in scan(where, suffix) if not p.name.startswith(TMP_PREFIX)]
    return len(found), sum(found)


def housekeep(where: Path, suffix: str) -> None:
    """After a write: sweep stale temporary files, and delete the least recently used
    entries while there are more than max_bytes() of them: of every kind in the root
    when ``where`` is the layout's folder of its kind, else of ``where`` alone."""
    for p, st in scan(where, suffix):
        if p.name.startswith(TMP_PREFIX) and _stale(st):
            unlink(p)
    bound = max_bytes()
    groups = {(folder(kind), s) for kind, s in SUFFIXES.items()}
    if (where, suffix) not in groups:
        groups = {(where, suffix)}
    live = [(max(st.st_atime, st.st_mtime), st.st_size, p)
            for f, s in groups for p, st in scan(f, s)
            if not p.name.startswith(TMP_PREFIX) and stat.S_ISREG(st.st_mode)]
    total = sum(n for _, n, _ in live)
    for _, n, p in sorted(live):
        if total <= bound:
            break
        if unlink(p):
            total -= n


def touch(path: Path) -> None:
    """Mark an entry used (its access time), for the size bound."""
    try:
        st = path.stat()
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    except OSError:
        pass


def unlink(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False


def _stale(st: os.stat_result) -> bool:
    return time.time() - st.st_mtime > TMP_MAX_AGE


# --- the shader backends' entries ---------------------------------------------------------
def digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


class JsonCache:
    """Kernel text and its meta, one JSON file per key: a format number, the key and a
    SHA-256 of the payload; anything damaged, truncated or foreign is ignored (and
    rebuilt by the caller). ``kind``: the layout's folder (or ``folder``, given);
    ``text``: the payload's name for the kernel text."""

    OFF = "the kernel disk cache is off, kernels are kept in memory only"

    def __init__(self, where: str | os.PathLike | None = None, *, kind: str, text: str,
                 format: int):
        self.kind, self.text, self.format = kind, text, format
        self.suffix = SUFFIXES[kind]
        self._explicit = _expand(where)
        self._trust = Trust(self.OFF)

    @property
    def folder(self) -> Path:
        return self._explicit if self._explicit is not None else folder(self.kind)

    @property
    def disabled(self) -> str | None:
        """Why the disk cache is off for its folder, if it is."""
        return self._trust._refused.get(self.folder)

    def set_folder(self, where: str | os.PathLike | None) -> None:
        self._explicit = _expand(where)
        self._trust.reset()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{self.suffix}"

    def load(self, key: str) -> tuple[str, dict] | None:
        """(text, meta) for ``key``, or None when absent or unusable. A hit marks the
        entry used (its access time), for the size bound."""
        if not self._trust.ready(self.folder):
            return None
        path = self._path(key)
        found = self._read(path, key)
        if found is not None:
            touch(path)
        return found

    def store(self, key: str, text: str, meta: dict) -> bool:
        payload = {self.text: text, "meta": meta}
        entry = {"format": self.format, "key": key, "sha256": digest(payload),
                 "payload": payload}
        data = json.dumps(entry, sort_keys=True).encode("utf-8")
        return put(self._trust, self._path(key), data, self.suffix)

    def entries(self) -> list[Path]:
        return entries(self.folder, self.suffix)

    def evict(self, key: str) -> bool:
        return unlink(self._path(key))

    def evict_where(self, prefix: str, chosen) -> int:
        """Delete the entries whose key starts with ``prefix`` and whose meta satisfies
        ``chosen(meta)`` (an unreadable entry is tested with ``{}``); returns how many."""
        count = 0
        for p in self.entries():
            if p.name.startswith(prefix):
                found = self._read(p, p.name[: -len(self.suffix)])
                if chosen(found[1] if found else {}):
                    count += unlink(p)
        return count

    def clear(self) -> int:
        return clear(self.folder, self.suffix)

    def info(self) -> dict:
        n, nbytes = size(self.folder, self.suffix)
        why = self._trust.why_off(self.folder)
        return {"disk_folder": str(self.folder), "disk_entries": n, "disk_bytes": nbytes,
                "disk_max_bytes": max_bytes(), "disk_enabled": why is None,
                "disk_off_reason": why}

    def _read(self, path: Path, key: str) -> tuple[str, dict] | None:
        raw = read_owned(path)
        if raw is None:
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
            payload = entry["payload"]
            ok = (entry.get("format") == self.format and entry.get("key") == key
                  and entry.get("sha256") == digest(payload))
            if ok and isinstance(payload.get(self.text), str) \
                    and isinstance(payload.get("meta"), dict):
                return payload[self.text], payload["meta"]
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        log.debug("vgpu: ignoring a damaged kernel cache entry %s", path)
        return None


def _expand(where) -> Path | None:
    return None if where is None else Path(os.path.expanduser(os.fspath(where)))
