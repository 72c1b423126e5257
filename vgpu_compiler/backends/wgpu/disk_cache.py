"""WGSL text and its meta on disk: one JSON file per key under ``VGPU_CACHE_DIR``/wgsl
(or ``platformdirs.user_cache_dir("vgpu")``/wgsl), with a SHA-256 of its payload.

The folder is made private (0700); entries are used only from a folder this user
owns that no one else can write, else the disk cache is off (kernels are kept in
memory only). Writes go to a temporary file moved into place (``os.replace``).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

FORMAT = 1
SUFFIX = ".wgsl.json"


def folder() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    if env:
        return Path(os.path.expanduser(env)) / "wgsl"
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu")) / "wgsl"


class DiskCache:
    def _ready(self) -> Path | None:
        f = folder()
        try:
            f.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = f.stat()
        except OSError:
            return None
        if hasattr(os, "getuid") and (st.st_uid != os.getuid()
                                      or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return None
        return f

    def load(self, key: str) -> tuple[str, dict] | None:
        f = self._ready()
        if f is None:
            return None
        try:
            data = json.loads((f / (key + SUFFIX)).read_text(encoding="utf-8"))
            payload = data["payload"]
            if data.get("format") != FORMAT or data.get("key") != key or \
                    data.get("sha256") != _digest(payload):
                return None
            return payload["wgsl"], payload["meta"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, key: str, wgsl: str, meta: dict) -> bool:
        f = self._ready()
        if f is None:
            return False
        payload = {"wgsl": wgsl, "meta": meta}
        text = json.dumps({"format": FORMAT, "key": key, "sha256": _digest(payload),
                           "payload": payload})
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=f)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, f / (key + SUFFIX))
            return True
        except OSError:
            return False

    def evict(self, key: str) -> bool:
        try:
            (folder() / (key + SUFFIX)).unlink()
            return True
        except OSError:
            return False

    def evict_where(self, prefix: str, chosen) -> int:
        """Drop the entries whose key starts with ``prefix`` and whose meta ``chosen``
        accepts; how many went."""
        n = 0
        for p in self.entries():
            if not p.name.startswith(prefix):
                continue
            found = self.load(p.name[:-len(SUFFIX)])
            if found is None or chosen(found[1]):
                n += _unlink(p)
        return n

    def entries(self) -> list[Path]:
        f = folder()
        return sorted(f.glob("*" + SUFFIX)) if f.is_dir() else []

    def clear(self) -> int:
        return sum(1 for p in self.entries() if _unlink(p))

    def info(self) -> dict:
        files = self.entries()
        return {"disk_folder": str(folder()), "disk_entries": len(files),
                "disk_bytes": sum(p.stat().st_size for p in files)}


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _unlink(p: Path) -> bool:
    try:
        p.unlink()
        return True
    except OSError:
        return False


DISK = DiskCache()
