"""The disk cache's folder: what it trusts, clearing under a write, temporary files,
``~`` in VGPU_CACHE_DIR, and its size bound (issue 19, items 11, 12 and 17)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import disk_cache
from vgpu_compiler.backends.glsl.disk_cache import DiskCache

from field_examples import LORENZ

ROOT = Path(__file__).resolve().parents[2]
OFF = "disk cache is off"


def _store_n(cache: DiskCache, n: int, size: int = 1000, prefix: str = "k") -> list[str]:
    keys = [f"{prefix}{i}" for i in range(n)]
    for key in keys:
        assert cache.store(key, "x" * size, {"n": 1})
    return keys


def _off_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if OFF in r.getMessage()]


# --- item 11: clearing is safe while another write is in flight --------------------------
@pytest.mark.parametrize("interfere", ["clear", "delete the folder"])
def test_a_write_survives_clear_or_deletion_meanwhile(tmp_path, monkeypatch, caplog, interfere):
    folder = tmp_path / "c"
    cache = DiskCache(folder)
    real = disk_cache.tempfile.mkstemp

    def mkstemp_then_interfere(**kw):
        made = real(**kw)
        monkeypatch.setattr(disk_cache.tempfile, "mkstemp", real)      # once
        if interfere == "clear":
            DiskCache(folder).clear()          # e.g. `vgpuc cache clear` in another process
        else:
            shutil.rmtree(folder)
        return made

    monkeypatch.setattr(disk_cache.tempfile, "mkstemp", mkstemp_then_interfere)
    with caplog.at_level("WARNING", logger="vgpu"):
        stored = cache.store("k", "glsl", {"m": 1})
    assert not _off_warnings(caplog) and cache.disabled is None
    assert stored and cache.load("k") == ("glsl", {"m": 1})     # written again if need be
    assert cache.store("k2", "glsl", {}) and cache.load("k2") is not None


def test_clear_in_another_process_keeps_a_fresh_temporary_file(tmp_path):
    folder = tmp_path / "c"
    cache = DiskCache(folder)
    _store_n(cache, 2)
    in_flight = folder / ".tmp-inflight.glsl.json"
    in_flight.write_text("half a write")
    env = dict(os.environ, VGPU_CACHE_DIR=str(folder), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "cache", "clear"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "2 kernels removed" in out.stdout
    assert in_flight.exists() and cache.entries() == []


# --- item 17: temporary files of killed writers are swept -------------------------------
def test_stale_temporary_files_are_swept_after_a_write_and_by_clear(tmp_path):
    folder = tmp_path / "c"
    cache = DiskCache(folder)
    _store_n(cache, 1)
    old = time.time() - 2 * 3600
    stale = [folder / f".tmp-killed{i}.glsl.json" for i in range(2)]
    fresh = folder / ".tmp-writing.glsl.json"
    for p in stale + [fresh]:
        p.write_text("x")
    os.utime(stale[0], (old, old))
    cache.store("another", "glsl", {})
    assert not stale[0].exists() and stale[1].exists() and fresh.exists()
    os.utime(stale[1], (old, old))
    assert cache.clear() == 2
    assert not stale[1].exists() and fresh.exists()


def test_tilde_in_the_cache_folder_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VGPU_CACHE_DIR", "~/vgpu-cache")
    assert disk_cache.default_folder() == tmp_path / "vgpu-cache"
    cache = DiskCache()
    assert cache.store("k", "glsl", {})
    assert (tmp_path / "vgpu-cache" / "k.glsl.json").exists()
    assert not Path("~").exists() and DiskCache("~/other").folder == tmp_path / "other"


# --- item 17: the size bound ---------------------------------------------------------------
def test_size_bound_drops_the_least_recently_used(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path / "c")
    keys = _store_n(cache, 3)
    size = cache.info()["disk_bytes"] // 3
    past = time.time() - 1000
    for age, key in enumerate(keys):            # k0 oldest ... k2 newest
        os.utime(cache._path(key), (past + age, past + age))
    assert cache.load("k0") is not None          # a hit: k0 is now the most recent
    monkeypatch.setenv(disk_cache.MAX_BYTES_ENV, str(3 * size + size // 2))
    cache.store("k3", "x" * 1000, {"n": 1})
    assert sorted(p.name.split(".")[0] for p in cache.entries()) == ["k0", "k2", "k3"]
    info = cache.info()
    assert info["disk_bytes"] <= info["disk_max_bytes"] == 3 * size + size // 2


@pytest.mark.parametrize("raw,expected", [("1000", 1000), ("64K", 64 << 10), ("2m", 2 << 20),
                                          ("1GiB", 1 << 30), ("", disk_cache.DEFAULT_MAX_BYTES)])
def test_size_bound_from_the_environment(monkeypatch, raw, expected):
    monkeypatch.setenv(disk_cache.MAX_BYTES_ENV, raw)
    assert disk_cache.max_bytes() == expected


def test_a_bad_size_bound_is_a_cache_error(monkeypatch):
    monkeypatch.setenv(disk_cache.MAX_BYTES_ENV, "lots")
    with pytest.raises(vgpu.CacheError, match="VGPU_CACHE_MAX_BYTES='lots'"):
        disk_cache.max_bytes()


def test_cache_info_prints_the_bound(tmp_path):
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH=str(ROOT),
               VGPU_CACHE_MAX_BYTES="3M")
    out = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "cache", "info"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "at most:     3.0 MiB (VGPU_CACHE_MAX_BYTES" in out.stdout


WRITER = """
import logging, sys
from vgpu_compiler.backends.glsl.disk_cache import DiskCache
logging.basicConfig(level=logging.WARNING)
cache = DiskCache(sys.argv[1])
for i in range(40):
    assert cache.store(f"p{sys.argv[2]}-{i}", "x" * 2000, {"i": i})
    got = cache.load(f"p{sys.argv[2]}-{i}")
    assert got is None or got == ("x" * 2000, {"i": i})   # None: another process evicted it
assert cache.disabled is None, cache.disabled
"""


def test_processes_writing_under_a_small_bound(tmp_path):
    folder = tmp_path / "shared"
    env = dict(os.environ, PYTHONPATH=str(ROOT), VGPU_CACHE_MAX_BYTES="20K")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(n)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0 and OFF not in err, err
    cache = DiskCache(folder)
    # each process's last write may land after another's sweep: one entry each of slack
    assert 0 < cache.info()["disk_bytes"] <= 20 * 1024 + 4 * 2200
    assert not list(folder.glob(".tmp-*"))


# --- item 12: what the cache trusts --------------------------------------------------------
def test_a_new_folder_is_private(tmp_path):
    folder = tmp_path / "a" / "b"
    assert DiskCache(folder).store("k", "glsl", {})
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
@pytest.mark.parametrize("how", ["writable by others", "another owner"])
def test_an_untrusted_folder_is_not_used(tmp_path, monkeypatch, caplog, how):
    folder = tmp_path / "c"
    _store_n(DiskCache(folder), 1)
    if how == "writable by others":
        folder.chmod(0o777)
        expected = "can be written by others (mode 777)"
    else:
        uid = folder.stat().st_uid
        monkeypatch.setattr(disk_cache.os, "getuid", lambda: uid + 1)
        expected = f"is owned by another user (uid {uid})"
    cache = DiskCache(folder)
    assert expected in cache.info()["disk_off_reason"]
    with caplog.at_level("WARNING", logger="vgpu"):
        assert cache.load("k0") is None
        assert cache.store("k1", "glsl", {}) is False
    (msg,) = _off_warnings(caplog)
    assert expected in msg and "VGPU_CACHE_DIR" in msg
    assert ("chmod 700" in msg) == (how == "writable by others")
    assert cache.info()["disk_enabled"] is False and not (folder / "k1.glsl.json").exists()


def _forge(entry: Path) -> None:
    """What anyone who can write the folder can do: change the GLSL, fix the checksum."""
    obj = json.loads(entry.read_text())
    glsl = obj["payload"]["glsl"]
    forged = re.sub(r"\bu_dt\b(?!;)", "(2.0 * u_dt)", glsl)    # every use, not the declaration
    assert forged != glsl
    obj["payload"]["glsl"] = forged
    obj["sha256"] = hashlib.sha256(json.dumps(obj["payload"], sort_keys=True)
                                   .encode("utf-8")).hexdigest()
    entry.write_text(json.dumps(obj))


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
def test_a_forged_entry_in_a_shared_folder_never_changes_results(fresh_cache, glsl, caplog):
    h0 = np.ones((8, 3), np.float32)
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=10)
    vgpu.run_field(LORENZ, h0, backend="glsl", steps=10)
    (entry,) = fresh_cache.glob("*.glsl.json")
    _forge(entry)
    glsl.clear_cache(memory=True, disk=False)
    forged = vgpu.run_field(LORENZ, h0, backend="glsl", steps=10)      # the folder is ours:
    assert not np.allclose(forged, ref, rtol=1e-3)                    # the forgery runs
    fresh_cache.chmod(0o777)                         # a folder others can write
    glsl.set_cache_dir(fresh_cache)                  # a new process: trust is checked again
    glsl.clear_cache(memory=True, disk=False)
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        out = vgpu.run_field(LORENZ, h0, backend="glsl", steps=10)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert len(_off_warnings(caplog)) == 1 and glsl.cache_info()["disk_enabled"] is False
