"""WGSL text and its meta on disk: one JSON file per key (``*.wgsl.json``) in
``VGPU_CACHE_DIR``/wgsl (or ``platformdirs.user_cache_dir("vgpu")``/wgsl), with a
SHA-256 of its payload. Trust (a private folder of this user, files of this user),
atomic writes, temporary files and the size bound are every backend's:
vgpu_compiler/disk_cache.py (``JsonCache``); an untrusted or unwritable folder turns the
disk cache off with one warning, and kernels are kept in memory only.

``MEMORY`` is the backend's compiled kernels (runner.Kernel: a pipeline and its buffers)
in the kernel cache every backend shares (runtime/kernel_cache.py), made here so that
``vgpu.cache_info``, ``clear_cache`` and ``evict`` never import wgpu.
"""
from __future__ import annotations

from pathlib import Path

from ...disk_cache import JsonCache, digest as _digest, folder as _folder  # noqa: F401
from ...runtime.kernel_cache import KernelCache
from . import MEMORY_CAPACITY

FORMAT = 1
SUFFIX = ".wgsl.json"


def folder() -> Path:
    return _folder("wgsl")


DISK = JsonCache(kind="wgsl", text="wgsl", format=FORMAT)


def _variants(field) -> tuple:
    from ..shader.adaptive_host import kernel_fields
    return kernel_fields(field)


MEMORY = KernelCache(MEMORY_CAPACITY, disk=DISK, variants=_variants)
