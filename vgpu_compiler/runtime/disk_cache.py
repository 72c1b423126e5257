"""Lowered GLSL and its metadata on disk, shared by processes.

One JSON file per key under ``VGPU_CACHE_DIR`` or ``platformdirs.user_cache_dir
("vgpu")``/glsl. A file holds a format number, its key and a SHA-256 of its
payload: anything damaged, truncated or foreign is ignored (and rebuilt by
the caller). Writes go to a temporary file in the same folder and are moved
into place with ``os.replace``, so readers in other processes see either the
old entry, the new one, or none. A folder that cannot be used turns the disk
cache off for the process with one warning: kernels are then kept in memory only.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("vgpu")

FORMAT = 1
SUFFIX = ".glsl.json"


def default_folder() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu")) / "glsl"


class DiskCache:
    def __init__(self, folder: str | os.PathLike | None = None):
        self._explicit = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self.disabled: str | None = None      # why the disk cache is off, if it is
        self._warned = False

    @property
    def folder(self) -> Path:
        return self._explicit if self._explicit is not None else default_folder()

    def set_folder(self, folder: str | os.PathLike | None) -> None:
        with self._lock:
            self._explicit = Path(folder) if folder is not None else None
            self.disabled, self._warned = None, False

    # --- entries ------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str) -> tuple[str, dict] | None:
        """(glsl, meta) for ``key``, or None when absent or unusable."""
        if self.disabled:
            return None
        try:
            raw = self._path(key).read_bytes()
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
        log.debug("vgpu: ignoring a damaged kernel cache entry %s", self._path(key))
        return None

    def store(self, key: str, glsl: str, meta: dict) -> bool:
        if self.disabled:
            return False
        payload = {"glsl": glsl, "meta": meta}
        entry = {"format": FORMAT, "key": key, "sha256": _digest(payload), "payload": payload}
        data = json.dumps(entry, sort_keys=True).encode("utf-8")
        folder = self.folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, self._path(key))
            except BaseException:
                _unlink(Path(tmp))
                raise
        except OSError as exc:
            self._disable(f"cannot write to {folder} ({exc.strerror or exc})")
            return False
        return True

    def _disable(self, why: str) -> None:
        with self._lock:
            self.disabled = why
            if not self._warned:
                self._warned = True
                log.warning("vgpu: the kernel disk cache is off, kernels are kept in memory "
                            "only: %s", why)

    # --- housekeeping ---------------------------------------------------------------
    def entries(self) -> list[Path]:
        try:
            return sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX)
                          and not p.name.startswith(".tmp-"))
        except OSError:
            return []

    def evict(self, key: str) -> bool:
        return _unlink(self._path(key))

    def clear(self) -> int:
        count = 0
        try:
            items = list(self.folder.iterdir())
        except OSError:
            return 0
        for p in items:
            if p.name.endswith(SUFFIX):
                count += _unlink(p) and not p.name.startswith(".tmp-")
        return count

    def info(self) -> dict:
        files = self.entries()
        size = 0
        for p in files:
            try:
                size += p.stat().st_size
            except OSError:
                pass
        return {"disk_folder": str(self.folder), "disk_entries": len(files),
                "disk_bytes": size, "disk_enabled": self.disabled is None}


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _unlink(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False
