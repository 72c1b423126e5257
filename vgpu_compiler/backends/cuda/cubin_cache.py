"""NVRTC's output, kept: the cubin (``sm_XY``) or PTX (``compute_XY``) of a CUDA text, in a
memory LRU and in the disk cache (``VGPU_CACHE_DIR``/cuda, ``*.cubin.json``), so that a
later call or process loads the module without running NVRTC. Needs no GPU: the caller
gives the architecture (device.py: the GPU's compute capability).

The key is a SHA-256 of the text (the dialect's version is in its header), the
architecture, NVRTC's version and its options: another GPU, a new NVRTC or other flags
never reuse an entry. On disk an entry is disk_cache.JsonCache's (the binary in base64
with its meta; a format number, the key and a SHA-256 of the payload; atomic writes,
the folder's trust rules, the size bound shared with every backend). It is used only
after every check passes (the checksum, the key, the meta naming the same architecture,
NVRTC and options, the size, a cubin's ELF magic); anything else is compiled again and
replaced. Clearing never imports cuda-bindings.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import sys

from ... import disk_cache as dc
from ...call.counters import COUNTERS
from ...errors import BackendError
from ...runtime.kernel_cache import KernelCache
from . import nvrtc

log = logging.getLogger("vgpu")

FORMAT = 1
KIND = "cuda"
MEMORY_CAPACITY = 64            # binaries kept in memory (least recently used go first)
DISK = dc.JsonCache(kind=KIND, text="binary", format=FORMAT)
# the binaries in memory (every backend's kernel cache, runtime/kernel_cache.py: its info
# and clear; no evict: a binary is keyed by its text, whose field it does not know)
MEMORY = KernelCache(MEMORY_CAPACITY, disk=DISK, nbytes=len)
_ARCH = re.compile(r"(sm|compute)_\d{2,3}[af]?")


def _check_arch(arch: str) -> None:
    if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
        raise BackendError(f"not a CUDA architecture: {arch!r} (give sm_XY for a cubin, "
                           f"compute_XY for PTX, e.g. sm_90)")


def meta(text: str, arch: str) -> dict:
    """What an entry is for: the text's digest, the architecture, NVRTC's version and
    options (a disk entry must carry the same)."""
    major, minor = nvrtc.version()
    return {"text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "arch": arch,
            "nvrtc": f"{major}.{minor}", "options": list(nvrtc.OPTIONS)}


def key(text: str, arch: str, want: dict | None = None) -> str:
    """The cache key of ``text`` compiled for ``arch`` by this NVRTC with its options
    (``want``: its meta, when the caller has it)."""
    _check_arch(arch)
    return f"{arch}-{dc.digest({'format': FORMAT, **(want or meta(text, arch))})}"


def binary(text: str, arch: str, name: str = "field.cu") -> bytes:
    """The cubin (``sm_XY``) or PTX (``compute_XY``) of ``text``: from memory, from disk
    (checked; ``disk_hits``), or compiled by NVRTC and stored in both."""
    want = meta(text, arch)
    k = key(text, arch, want)
    hit = MEMORY.get(k)
    if hit is not None:
        return hit
    data = _load(k, want)
    if data is not None:
        COUNTERS.add("disk_hits")
    else:
        data = nvrtc.compile(text, arch, name)
        DISK.store(k, base64.b64encode(data).decode("ascii"), {**want, "bytes": len(data)})
    return MEMORY.put(data, k)


def _load(k: str, want: dict) -> bytes | None:
    """The checked binary of ``k`` on disk, or None (absent, damaged, not this one)."""
    found = DISK.load(k)
    if found is None:
        return None
    encoded, got = found
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        data = None
    ok = (data is not None and all(got.get(f) == v for f, v in want.items())
          and got.get("bytes") == len(data)
          and (data[:4] == b"\x7fELF" if want["arch"].startswith("sm_") else b".target" in data))
    if not ok:
        log.debug("vgpu: ignoring a cuda kernel cache entry that does not match its key %s", k)
        return None
    return data


def clear_memory() -> int:
    """Forget the binaries in memory, and device.py's loaded modules if it was loaded
    (a module in use stays loaded: only the reference goes)."""
    n = MEMORY.clear()
    device = sys.modules.get(f"{__package__}.device")
    if device is not None:
        device.forget()
    return n


def clear(memory: bool = True, disk: bool = True) -> dict:
    out = {"memory": clear_memory()} if memory else {}
    if disk:
        out["disk"] = DISK.clear()
    return out


def info() -> dict:
    device = sys.modules.get(f"{__package__}.device")
    return {**MEMORY.info(), "modules_loaded": device.loaded() if device is not None else 0}
