"""Lowered GLSL and its metadata on disk, shared by processes of one user.

One JSON file per key (``*.glsl.json``) directly in ``VGPU_CACHE_DIR`` (``~``
expanded), or in ``platformdirs.user_cache_dir("vgpu")``/glsl. A file holds a format
number, its key and a SHA-256 of its payload: anything damaged, truncated or foreign
is ignored (and rebuilt by the caller). What the folder must be to be trusted, atomic
writes, temporary files and the size bound are every backend's: vgpu_compiler/disk_cache.py
(``JsonCache``); a folder that is not trusted or cannot be written turns the disk cache
off for the process, with one warning, and kernels are kept in memory only.
"""
from __future__ import annotations

import os  # noqa: F401  (tests patch os.getuid and tempfile.mkstemp through this module)
import tempfile  # noqa: F401
from pathlib import Path

from ...disk_cache import (DEFAULT_MAX_BYTES, MAX_BYTES_ENV, TMP_MAX_AGE, TMP_PREFIX,  # noqa: F401
                          JsonCache, digest as _digest, distrust, folder, max_bytes)

FORMAT = 2
SUFFIX = ".glsl.json"


def default_folder() -> Path:
    return folder("glsl")


class DiskCache(JsonCache):
    def __init__(self, folder: str | os.PathLike | None = None):
        super().__init__(folder, kind="glsl", text="glsl", format=FORMAT)
