"""WGSL text and its meta on disk: one JSON file per key (``*.wgsl.json``) in
``VGPU_CACHE_DIR``/wgsl (or ``platformdirs.user_cache_dir("vgpu")``/wgsl), with a
SHA-256 of its payload. Trust (a private folder of this user, files of this user),
atomic writes, temporary files and the size bound are every backend's:
vgpu_compiler/disk_cache.py (``JsonCache``); an untrusted or unwritable folder turns the
disk cache off with one warning, and kernels are kept in memory only.
"""
from __future__ import annotations

from pathlib import Path

from ...disk_cache import JsonCache, digest as _digest, folder as _folder  # noqa: F401

FORMAT = 1
SUFFIX = ".wgsl.json"


def folder() -> Path:
    return _folder("wgsl")


DISK = JsonCache(kind="wgsl", text="wgsl", format=FORMAT)
