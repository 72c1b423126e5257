"""The cuda backend's kernel cache without a GPU (cuda/cubin_cache.py): NVRTC's cubin of a
field's CUDA text for an architecture, kept in a memory LRU and on disk (VGPU_CACHE_DIR/
cuda) under the disk cache's rules, keyed by the text, the architecture, NVRTC's version
and options; checked before use (a damaged entry is compiled again); managed through the
registry (vgpu.cache_info, clear_cache, `vgpuc cache`). The Device's compile goes through
it with the GPU's compute capability (a stand-in driver: tests/backends/cuda/test_cuda_host.py's way).
NVRTC is real: the calls that reach it are counted."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import vgpu
from vgpu_compiler import disk_cache as dc
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.cli.system import cache_report
from vgpu_compiler.errors import BackendError
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
SRC = "field decay { state x\n param k = 1.5\n dx/dt = -k * x\n solve euler(dt = 0.1, steps = 3) }"


@pytest.fixture
def cc(tmp_path, monkeypatch):
    """cubin_cache over an empty cache folder, with NVRTC's calls counted (``cc.calls``:
    the architectures compiled for)."""
    from vgpu_compiler.backends.cuda import cubin_cache, nvrtc
    ok, why = nvrtc.available()
    if not ok:
        if os.environ.get("CI", "") not in ("", "0", "false"):
            pytest.fail(f"NVRTC is not available: {why}; CI must have it (the test extra)")
        pytest.skip(f"NVRTC is not available: {why}")
    monkeypatch.setenv(dc.CACHE_ENV, str(tmp_path / "cache"))
    calls = []
    real = nvrtc.compile

    def counted(text, arch="sm_90", name="field.cu"):
        calls.append(arch)
        return real(text, arch, name)

    monkeypatch.setattr(nvrtc, "compile", counted)
    cubin_cache.clear_memory()
    cubin_cache.calls = calls
    yield cubin_cache
    cubin_cache.clear_memory()
    del cubin_cache.calls


def text(dtype: str = "float32") -> str:
    from vgpu_compiler.backends.cuda import source
    return source.source(compile_program(SRC, "decay.field").program.fields[0], dtype)[0]


def entries(cc) -> list[Path]:
    return cc.DISK.entries()


def test_a_second_compile_is_a_hit_in_memory_then_on_disk(cc):
    first = cc.binary(text(), "sm_90")
    assert first[:4] == b"\x7fELF" and cc.calls == ["sm_90"]
    assert cc.binary(text(), "sm_90") is first and cc.calls == ["sm_90"]      # memory
    [path] = entries(cc)
    assert path.parent == Path(os.environ[dc.CACHE_ENV]) / "cuda"
    assert path.name.startswith("sm_90-") and path.name.endswith(".cubin.json")
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    cc.clear_memory()                                       # as a new process would be
    before = COUNTERS.snapshot()["disk_hits"]
    assert cc.binary(text(), "sm_90") == first and cc.calls == ["sm_90"]      # disk
    assert COUNTERS.snapshot()["disk_hits"] == before + 1


def test_ptx_for_a_virtual_architecture_is_kept_too(cc):
    ptx = cc.binary(text(), "compute_90")
    cc.clear_memory()
    assert cc.binary(text(), "compute_90") == ptx and b".target sm_90" in ptx
    assert cc.calls == ["compute_90"]


def test_another_text_arch_nvrtc_or_options_is_a_miss(cc, monkeypatch):
    from vgpu_compiler.backends.cuda import nvrtc
    a = cc.binary(text(), "sm_90")
    b = cc.binary(text(), "sm_80")
    cc.binary(text("float64"), "sm_90")
    assert cc.calls == ["sm_90", "sm_80", "sm_90"] and a != b
    assert len(entries(cc)) == 3
    keys = {cc.key(text(), "sm_90"), cc.key(text(), "sm_80"), cc.key(text("float64"), "sm_90")}
    monkeypatch.setattr(nvrtc, "version", lambda: (99, 1))     # a new NVRTC
    keys.add(cc.key(text(), "sm_90"))
    cc.clear_memory()
    cc.binary(text(), "sm_90")
    assert cc.calls[-1] == "sm_90" and len(cc.calls) == 4 and len(entries(cc)) == 4
    monkeypatch.undo()
    monkeypatch.setattr(nvrtc, "OPTIONS", nvrtc.OPTIONS + ("-lineinfo",))
    keys.add(cc.key(text(), "sm_90"))
    assert len(keys) == 5


def _rewrite(path: Path, change) -> None:
    """Change an entry's payload and give it a checksum that matches (not damage: a
    consistent entry that is not what its key says)."""
    entry = json.loads(path.read_text())
    change(entry["payload"])
    entry["sha256"] = dc.digest(entry["payload"])
    path.write_text(json.dumps(entry))


def _not_elf(payload):
    data = b"\0\0\0\0" + base64.b64decode(payload["binary"])[4:]
    payload["binary"] = base64.b64encode(data).decode()


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "a flipped byte": lambda p: p.write_bytes(
        p.read_bytes().replace(b'"binary": "f0VM', b'"binary": "f0VN', 1)),
    "not json": lambda p: p.write_bytes(b"\x7fELF garbage"),
    "another arch's meta": lambda p: _rewrite(p, lambda pl: pl["meta"].update(arch="sm_80")),
    "another nvrtc's meta": lambda p: _rewrite(p, lambda pl: pl["meta"].update(nvrtc="1.0")),
    "a wrong size": lambda p: _rewrite(p, lambda pl: pl["meta"].update(bytes=1)),
    "bad base64": lambda p: _rewrite(p, lambda pl: pl.update(binary="@@" + pl["binary"])),
    "not a cubin": lambda p: _rewrite(p, _not_elf),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_compiled_again_and_replaced(cc, damage):
    good = cc.binary(text(), "sm_90")
    [path] = entries(cc)
    whole = path.read_bytes()
    DAMAGE[damage](path)
    assert path.read_bytes() != whole
    cc.clear_memory()
    assert cc.binary(text(), "sm_90") == good and cc.calls == ["sm_90", "sm_90"]
    assert path.read_bytes() == whole                      # replaced by a good one
    cc.clear_memory()
    assert cc.binary(text(), "sm_90") == good and len(cc.calls) == 2     # and used


def test_an_entry_in_an_untrusted_folder_is_not_used(cc, caplog):
    cc.binary(text(), "sm_90")
    where = cc.DISK.folder
    where.chmod(0o777)
    cc.DISK._trust.reset()                                  # (as a new process)
    cc.clear_memory()
    try:
        with caplog.at_level("WARNING", logger="vgpu"):
            cc.binary(text(), "sm_90")
            cc.clear_memory()
            cc.binary(text(), "sm_90")
    finally:
        where.chmod(0o700)
        cc.DISK._trust.reset()
    assert cc.calls == ["sm_90"] * 3
    warned = [r.getMessage() for r in caplog.records if "can be written by others" in r.getMessage()]
    assert len(warned) == 1 and "kernels are kept in memory" in warned[0]


def test_not_an_architecture_is_a_backend_error(cc):
    with pytest.raises(BackendError, match=r"not a CUDA architecture: '../sm_90'"):
        cc.binary(text(), "../sm_90")
    assert cc.calls == []


def test_the_size_bound_counts_cuda_entries(cc, monkeypatch):
    cc.binary(text(), "sm_80")
    [old] = entries(cc)
    os.utime(old, (1, 1))                                    # long unused
    monkeypatch.setenv(dc.MAX_BYTES_ENV, str(old.stat().st_size * 3 // 2))
    cc.binary(text(), "sm_90")
    assert [p.name[:6] for p in entries(cc)] == ["sm_90-"]


def test_cache_info_and_clear_cache_cover_it(cc):
    cc.binary(text(), "sm_90")
    cc.binary(text(), "sm_80")
    info = vgpu.cache_info()
    mine = info["cuda"]
    assert mine["memory_entries"] == 2 and mine["memory_capacity"] == cc.MEMORY_CAPACITY
    assert mine["disk_entries"] == 2 and mine["disk_bytes"] > 2 * 5000
    assert mine["disk_folder"] == str(cc.DISK.folder) and mine["disk_enabled"] is True
    [row] = [r for r in info["disk"] if r["kind"] == "cuda"]
    assert row["entries"] == 2 and row["off"] is None
    assert info["disk_entries"] >= 2 and info["memory_entries"] >= 2
    report = "\n".join(cache_report(info))
    assert "    cuda:      2, " in report and "(cuda/)" in report and "cuda 64" in report
    assert vgpu.clear_cache(disk=False)["cuda"] == {"memory": 2}
    assert len(entries(cc)) == 2 and vgpu.cache_info()["cuda"]["memory_entries"] == 0
    cc.binary(text(), "sm_90")                              # from disk
    dropped = vgpu.clear_cache()
    assert dropped["cuda"] == {"memory": 1, "disk": 2}
    assert entries(cc) == [] and vgpu.cache_info()["cuda"]["disk_entries"] == 0
    assert len(cc.calls) == 2


def test_vgpuc_cache_info_and_clear_list_and_remove_them(cc):
    cc.binary(text(), "sm_90")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, "-m", "vgpu_compiler.cli", "cache"]
    info = subprocess.run(run + ["info"], env=env, capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    [line] = [ln for ln in info.stdout.splitlines() if ln.strip().startswith("cuda:")]
    assert line.split()[1] == "1," and "(cuda/)" in line
    out = subprocess.run(run + ["clear"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "1 kernel removed" in out.stdout and entries(cc) == []


# --- the Device compiles through the cache, for its GPU's compute capability ----------------
def test_the_device_compiles_through_the_cache_for_its_compute_capability(cc, monkeypatch):
    from vgpu_compiler.backends.cuda import device
    loaded = []
    fake = SimpleNamespace(
        cuModuleLoadData=lambda image: (loaded.append(bytes(image)) or (0, f"module{len(loaded)}")),
        cuModuleGetFunction=lambda module, name: (0, (module, name)))
    monkeypatch.setattr(device, "_driver", lambda: fake)
    monkeypatch.setattr(device, "_current", lambda: "sm_86")     # the GPU's sm_XY
    field = compile_program(SRC, "decay.field").program.fields[0]
    device.forget()
    counts = COUNTERS.snapshot()
    k = device.kernel(field, "float32")
    assert cc.calls == ["sm_86"] and loaded == [cc.binary(text(), "sm_86")]
    assert k.fn == ("module1", b"vg_kernel")
    assert device.kernel(field, "float32") is k and len(loaded) == 1     # a loaded module
    assert vgpu.cache_info()["cuda"]["modules_loaded"] == 1
    vgpu.clear_cache(disk=False)                            # modules and cubins forgotten
    assert device.loaded() == 0
    again = device.kernel(field, "float32")
    assert again is not k and len(loaded) == 2 and loaded[1] == loaded[0]
    assert cc.calls == ["sm_86"]                            # from disk, not NVRTC
    now = COUNTERS.snapshot()
    assert (now["compiles"] - counts["compiles"], now["memory_hits"] - counts["memory_hits"],
            now["disk_hits"] - counts["disk_hits"]) == (2, 1, 1)
    device.forget()
