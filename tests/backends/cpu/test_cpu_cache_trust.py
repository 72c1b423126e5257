"""The cpu backend's library cache: what it trusts and loads, damaged libraries, a
read-only or full folder, folder modes, one bound and one `vgpuc cache` over every
backend's entries, and a compiler past its timeout (issue 27's cache faults, issue 36).

Another user's folders and files are made with os.chown where the tests run as root
(they do on CI); elsewhere the owner checks are told a uid that is not ours. A read-only
or full disk is simulated by failing the calls that would fail (as root, modes do not
bind): mkdir, mkstemp, or the write itself."""
from __future__ import annotations

import errno
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler import disk_cache as dc
from vgpu_compiler.backends.cpu import kernel, library_cache, toolchain
from vgpu_compiler.backends.glsl.disk_cache import DiskCache

from field_examples import LORENZ

pytestmark = pytest.mark.usefixtures("cpu")
ROOT = Path(__file__).resolve().parents[3]
OFF = "library cache is off"
H0 = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float32)
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 54321


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """A fresh VGPU_CACHE_DIR, an empty memory cache, and folders checked afresh."""
    root = tmp_path / "root"
    monkeypatch.setenv("VGPU_CACHE_DIR", str(root))
    kernel.clear_memory()
    library_cache.reset()
    yield root
    kernel.clear_memory()
    library_cache.reset()


def _fresh():
    """As a new process: nothing in memory, the folders checked again."""
    kernel.clear_memory()
    library_cache.reset()


def _check(src=LORENZ, backend="cpu"):
    """Run ``src`` and compare with the reference. A comment makes the text new, so the
    call is prepared afresh and asks for its kernel (the same C: the same library)."""
    _calls.append(1)
    src = f"{src}\n# call {len(_calls)}\n"
    sol = vgpu.solve(src, H0, steps=20, backend=backend)
    ref = vgpu.solve(src, H0, steps=20, backend="numpy")
    np.testing.assert_array_equal(sol.states, ref.states)
    return sol


_calls: list = []


def _libraries(root: Path) -> list[Path]:
    return sorted((root / "cpu").glob("field-*.so"))


def _off_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if OFF in r.getMessage()]


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".tmp-") or p.suffix == ".part"]


# --- item: folders are made private ------------------------------------------------------
def test_cache_folders_are_made_private_under_any_umask(tmp_path, monkeypatch):
    root = tmp_path / "a" / "b"
    monkeypatch.setenv("VGPU_CACHE_DIR", str(root))
    _fresh()
    old = os.umask(0o002)
    try:
        _check()
        from vgpu_compiler.backends.wgpu.disk_cache import DISK as wgsl
        assert wgsl.store("k", "wgsl text", {})
    finally:
        os.umask(old)
        _fresh()
    for folder in (tmp_path / "a", root, root / "cpu", root / "wgsl"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert DiskCache().info()["disk_enabled"] is True      # GLSL trusts what VGPU made


# --- item: a planted library is never loaded ---------------------------------------------
PLANT = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); } }
void vg_kernel(void) {}
void vg_kernel_serial(void) {}
"""


def _plant(root: Path, marker: Path) -> list[Path]:
    """Replace the cached library by one whose constructor writes ``marker``, under every
    name a loader could pick for its key (and the right checksum in the name)."""
    (genuine,) = _libraries(root)
    key = re.match(r"field-([0-9a-f]{32})", genuine.name).group(1)
    with tempfile.TemporaryDirectory() as tmp:
        c, so = Path(tmp) / "p.c", Path(tmp) / "p.so"
        c.write_text(PLANT % marker)
        subprocess.run([toolchain.compiler(), "-shared", "-fPIC", "-o", str(so), str(c)],
                       check=True, timeout=120)
        data = so.read_bytes()
    genuine.unlink()
    names = [f"field-{key}.so", f"field-{key}-{library_cache._digest(data)}.so"]
    for name in names:
        (root / "cpu" / name).write_bytes(data)
    return [root / "cpu" / n for n in names]


def _foreign(path: Path, monkeypatch) -> None:
    """Make ``path`` another user's: os.chown as root, else our uid is said to differ."""
    if AS_ROOT:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        uid = path.stat().st_uid
        monkeypatch.setattr(dc.os, "getuid", lambda: uid + 1)


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
@pytest.mark.parametrize("how", ["cpu folder writable by others", "root writable by others",
                                 "cpu folder of another user", "library of another user"])
def test_a_planted_library_is_never_loaded(cache_root, tmp_path, monkeypatch, caplog, how):
    _check()
    marker = tmp_path / "planted-ran"
    planted = _plant(cache_root, marker)
    if how == "cpu folder writable by others":
        (cache_root / "cpu").chmod(0o777)
        expected = "cpu can be written by others (mode 777)"
    elif how == "root writable by others":
        cache_root.chmod(0o777)
        expected = f"{cache_root} can be written by others (mode 777)"
    elif how == "cpu folder of another user":
        _foreign(cache_root / "cpu", monkeypatch)
        expected = "is owned by another user"
    else:
        if not AS_ROOT:     # only the planted files are another user's
            foreign = {p.stat().st_ino for p in planted}
            monkeypatch.setattr(dc, "owned", lambda st: st.st_ino not in foreign)
        else:
            for p in planted:
                os.chown(p, OTHER_UID, OTHER_UID)
        expected = None
    _fresh()
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        _check()
        _check(backend="auto")
        _check(LORENZ.replace("rk4", "midpoint"))       # another new kernel: no second warning
    assert not marker.exists(), "the planted library's constructor ran"
    warnings = _off_warnings(caplog)
    if expected is None:        # a trusted folder: the foreign file is ignored and replaced
        assert warnings == []
        assert all(p.stat().st_uid == os.getuid() for p in _libraries(cache_root)
                   if p.exists() and p not in planted)
    else:
        assert len(warnings) == 1 and expected in warnings[0], warnings
        assert library_cache.info()["disk_enabled"] is False
        assert expected in library_cache.info()["disk_off_reason"]


# --- item: a damaged library is ignored and rebuilt (never mapped: SIGBUS) --------------------
CHILD = """
import json, sys
import numpy as np
import vgpu
from vgpu_compiler.call.counters import COUNTERS
from field_examples import LORENZ
h0 = np.random.default_rng(3).normal(size=(40, 3)).astype(np.float32)
sol = vgpu.solve(LORENZ, h0, steps=20, backend=sys.argv[1])
ref = vgpu.solve(LORENZ, h0, steps=20, backend="numpy")
print(json.dumps({"backend": sol.backend, "equal": bool(np.array_equal(sol.states, ref.states)),
                  "stats": COUNTERS.snapshot()}))
"""


def _child(root: Path, backend: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    env = dict(os.environ, VGPU_CACHE_DIR=str(root),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run([sys.executable, "-c", CHILD, backend], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    return proc, out


@pytest.mark.parametrize("damage,backend", [("truncated", "cpu"), ("truncated", "auto"),
                                            ("empty", "cpu"), ("empty", "auto"),
                                            ("garbage", "cpu")])
def test_a_damaged_library_is_rebuilt(tmp_path, damage, backend):
    root = tmp_path / "root"
    proc, first = _child(root, "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (lib,) = _libraries(root)
    size = lib.stat().st_size
    if damage == "truncated":
        os.truncate(lib, 4000)                  # mapped, its missing pages are SIGBUS
    elif damage == "empty":
        os.truncate(lib, 0)
    else:
        lib.write_bytes(os.urandom(size))
    proc, out = _child(root, backend)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])   # -7: SIGBUS
    assert out["equal"] and out["backend"] == "cpu"
    assert out["stats"]["disk_hits"] == 0 and out["stats"]["compiles"] == 1
    (lib,) = _libraries(root)                  # rebuilt, whole, and used by the next process
    assert lib.stat().st_size == size
    proc, out = _child(root, "cpu")
    assert proc.returncode == 0 and out["stats"]["disk_hits"] == 1


# --- item: a read-only or full folder turns the cache off --------------------------------------
def _under(root: Path, path) -> bool:
    try:
        return Path(os.path.abspath(path)).is_relative_to(root)
    except (TypeError, ValueError):
        return False


def _break(root: Path, monkeypatch, how: str) -> None:
    """What a read-only or full disk under ``root`` does to the calls that write there."""
    if how == "read-only, empty":           # the cpu folder cannot even be made
        real_mkdir = pathlib.Path.mkdir

        def mkdir(self, *a, **kw):
            if _under(root, self):
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real_mkdir(self, *a, **kw)
        monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    elif how == "read-only":
        real_mkstemp = tempfile.mkstemp

        def mkstemp(*a, dir=None, **kw):
            if dir is not None and _under(root, dir):
                raise OSError(errno.EROFS, "Read-only file system", str(dir))
            return real_mkstemp(*a, dir=dir, **kw)
        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    else:                                   # full: the temporary file is made, its write fails
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, fh):
                self.fh = fh

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

            def write(self, data):
                self.fh.write(data[:100])
                self.fh.flush()
                raise OSError(errno.ENOSPC, "No space left on device")

        def fdopen(fd, *a, **kw):
            fh = real_fdopen(fd, *a, **kw)
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return fh
            return Full(fh) if _under(root, target) else fh
        monkeypatch.setattr(os, "fdopen", fdopen)


@pytest.mark.parametrize("how", ["read-only, empty", "read-only", "full"])
def test_a_read_only_or_full_folder_turns_the_cache_off(cache_root, monkeypatch, caplog, how):
    cache_root.mkdir(mode=0o700)
    if how == "read-only":
        (cache_root / "cpu").mkdir(mode=0o700)
    if how == "full" and not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to tell the cache's writes from others")
    _break(cache_root, monkeypatch, how)
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        assert toolchain._probe() == (True, "")          # cpu stays available
        _check()
        _check(LORENZ.replace("rk4", "midpoint"), backend="auto")
        assert _check(LORENZ.replace("rk4", "heun"), backend="auto").backend == "cpu"
    warnings = _off_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert ("Read-only" if how.startswith("read-only") else "No space") in warnings[0]
    assert not _leftovers(cache_root) and not _libraries(cache_root)
    assert library_cache.info()["disk_enabled"] is False


# --- item: one bound, `vgpuc cache info` and `clear` over every backend's entries -----------------
def test_the_size_bound_counts_every_backends_entries(cache_root, monkeypatch):
    glsl = DiskCache()                          # its folder: the root itself
    for i in range(4):
        assert glsl.store(f"old{i}", "x" * 20000, {})
    past = time.time() - 1000
    for p in glsl.entries():
        os.utime(p, (past, past))
    monkeypatch.setenv(dc.MAX_BYTES_ENV, "60K")
    _check()                                     # a cpu library (~16 KB) is written
    assert _libraries(cache_root)
    kinds = [(dc.folder(k), s) for k, s in dc.SUFFIXES.items()]
    total = sum(dc.size(f, s)[1] for f, s in kinds)
    assert total <= 60 << 10 and len(glsl.entries()) < 4      # the oldest GLSL went
    for p in _libraries(cache_root):
        os.utime(p, (past - 10, past - 10))
    for i in range(3):
        assert glsl.store(f"new{i}", "y" * 20000, {})
    assert not _libraries(cache_root)            # and now the cpu library, oldest of all


INFO_THEN_CLEAR = """
import vgpu
print(vgpu.clear_cache(memory=False))
"""


def test_cache_info_and_clear_cover_every_backend(cache_root):
    _check()
    from vgpu_compiler.backends.wgpu.disk_cache import DISK as wgsl
    assert wgsl.store("w1", "wgsl text", {}) and wgsl.store("w2", "wgsl text", {})
    assert DiskCache().store("g1", "glsl text", {})
    n_cpu = len(list((cache_root / "cpu").glob("*.so")))    # the field's and the probe's
    env = dict(os.environ, VGPU_CACHE_DIR=str(cache_root), PYTHONPATH=str(ROOT))

    def vgpuc(*args):
        proc = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    info = vgpuc("cache", "info")
    assert f"kernels:     {n_cpu + 3}," in info
    assert re.search(r"glsl: +1,", info) and re.search(r"wgsl: +2,", info)
    assert re.search(rf"cpu: +{n_cpu},", info)
    assert f"{n_cpu + 3} kernels removed from {cache_root}" in vgpuc("cache", "clear")
    assert not [p for p in cache_root.rglob("*") if p.is_file()]
    # vgpu.clear_cache() too, in a process that never loaded the wgpu runner
    assert wgsl.store("w3", "wgsl text", {})
    _check()
    proc = subprocess.run([sys.executable, "-c", INFO_THEN_CLEAR], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in cache_root.rglob("*") if p.is_file()]


# --- issue 36: a compiler past its timeout -------------------------------------------------------
SLOW_CC = """#!/bin/sh
case "$1" in --version) exec {cc} --version;; esac
sleep 60 &
echo $! > {pid}
wait
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir() or os.name != "posix", reason="a POSIX shell")
def test_a_compiler_past_its_timeout_is_a_backend_error(cache_root, tmp_path, monkeypatch):
    pid = tmp_path / "pid"
    cc = tmp_path / "slow-cc"
    cc.write_text(SLOW_CC.format(cc=toolchain.compiler(), pid=pid))
    cc.chmod(0o755)
    monkeypatch.setenv("VGPU_CC", str(cc))
    monkeypatch.setattr(toolchain, "COMPILE_TIMEOUT", 1.0)
    start = time.monotonic()
    with pytest.raises(vgpu.BackendError, match=r"took more than 1 s .* was stopped"):
        vgpu.solve(LORENZ, H0, steps=20, backend="cpu")
    assert time.monotonic() - start < 30
    assert not _running(int(pid.read_text()))           # what the compiler started went too
    sol = vgpu.solve(LORENZ, H0, steps=20, backend="auto")         # auto moves on
    ref = vgpu.solve(LORENZ, H0, steps=20, backend="numpy")
    assert sol.backend != "cpu"
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-4, atol=1e-4)
