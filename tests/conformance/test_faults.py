"""Faults the runtime must survive: no GL context, a bad cache folder, races.

tests/backends/glsl/test_kernel_cache.py covers single damaged entries, four processes
sharing a folder, an unusable folder set from Python, four threads and the
splitting limits one at a time. This file adds what it does not:

- no GL context in a fresh process, forced by VGPU_NO_GL and by an EGL that
  finds no device: ``backend="auto"`` runs on numpy with ONE warning and
  counts every fallback; ``backend="glsl"`` is a BackendError;
- foreign files and folders in the cache folder, an entry that is a folder,
  a valid-looking entry whose shader does not compile, an entry copied from
  another program: ignored and rebuilt, with correct results;
- VGPU_CACHE_DIR that cannot be created (under a regular file, or a file
  itself): memory only, one warning, correct results;
- six processes started together compiling the same fields into one fresh
  folder; the folder is usable afterwards (a seventh process reads it, with
  the splitting limits lowered through their environment variables);
- 32 calls from 8 threads over several fields, with a roomy and with a
  one-kernel memory cache (kernels evicted while other threads use them);
- every splitting at once: ensembles over many storage blocks and many
  dispatches per integration, with basins, collapse, flux and history.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import disk_cache
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.backends.glsl.plan import limits

from field_examples import COLLAPSE, HEAT, HISTOGRAM, LORENZ, MATMUL

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(2027)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _python(code: str, env: dict, timeout: int = 180) -> tuple[dict, str]:
    """Run ``code`` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


# --- no GL context ---------------------------------------------------------------------------------
NO_GL = """
import json
import numpy as np
import vgpu
from field_examples import HEAT, HISTOGRAM, LORENZ
rng = np.random.default_rng(0)
calls = [(LORENZ, rng.normal(size=(50, 3)), {"steps": 20}),
         (HEAT, rng.uniform(size=100), {}),
         (HISTOGRAM, rng.uniform(-3, 3, 200), {}),
         (LORENZ, rng.normal(size=(7, 3)), {"steps": 5})]
equal = []
for src, h0, kw in calls:
    auto = vgpu.solve(src, h0, **kw)
    ref = vgpu.solve(src, h0, backend="numpy", **kw)
    equal.append(bool(np.array_equal(auto.states, ref.states)) and all(
        np.array_equal(auto.outputs[k], ref.outputs[k]) for k in ref.outputs))
try:
    vgpu.run_field(LORENZ, np.ones((2, 3)), backend="glsl")
    glsl = "ran"
except vgpu.BackendError as e:
    glsl = "BackendError: " + e.message
from vgpu_compiler.backends.glsl import runner as glsl_runner
print(json.dumps({"equal": equal, "stats": vgpu.cache_stats(), "glsl": glsl,
                  "available": glsl_runner.available()}))
"""


@pytest.mark.parametrize("how", ["VGPU_NO_GL", "no EGL device"])
def test_no_gl_context_falls_back_to_numpy_once(how):
    # (the cpu backend, which auto would run before numpy, is switched off: VGPU_NO_CPU)
    if how == "VGPU_NO_GL":
        env = _env(VGPU_NO_GL=1, VGPU_NO_CPU=1)
    else:                   # a real driver failure: EGL finds no vendor library, no X display
        env = _env(__EGL_VENDOR_LIBRARY_FILENAMES="/nonexistent/egl_vendor.json",
                   VGPU_NO_CPU=1)
        env.pop("DISPLAY", None)
    env["VGPU_NO_WGPU"] = "1"       # no GPU backend at all (else auto runs on wgpu)
    out, stderr = _python(NO_GL, env)
    assert out["equal"] == [True] * 4
    assert out["stats"]["cpu_fallbacks"] == 4
    assert out["stats"]["compiles"] == 0 and out["stats"]["dispatches"] == 0
    assert out["available"] is False
    assert out["glsl"].startswith("BackendError") and "numpy" in out["glsl"]
    warnings = [line for line in stderr.splitlines() if "numpy reference backend" in line]
    assert len([w for w in warnings if "GLSL" in w]) == 1, stderr     # one, for four calls
    assert len(warnings) == 3, stderr           # and one each for wgpu and cpu (both off)


# --- a bad cache folder --------------------------------------------------------------------------------
def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*" + disk_cache.SUFFIX) if p.is_file()
                  and not p.name.startswith(".tmp-"))


def _counts(fn):
    before = COUNTERS.snapshot()
    out = fn()
    after = COUNTERS.snapshot()
    return out, {k: after[k] - before[k] for k in after}


def _lorenz(backend, n=16, steps=12):
    h0 = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
    return vgpu.run_field(LORENZ, h0, backend=backend, steps=steps)


def test_foreign_files_in_the_cache_folder_are_left_alone(fresh_cache, glsl):
    fresh_cache.mkdir(parents=True, exist_ok=True)
    foreign = {
        "README": b"not a cache entry",
        "0123.glsl.json": b"\x00\xff" * 50,                         # junk with the suffix
        ("a" * 40) + ".glsl.json": json.dumps({"format": 99}).encode(),
        ".tmp-dead.glsl.json": b'{"format": 1, "key": "',           # an interrupted write
        "big.glsl.json": os.urandom(1 << 20),
    }
    for name, data in foreign.items():
        (fresh_cache / name).write_bytes(data)
    (fresh_cache / "sub").mkdir()
    (fresh_cache / "sub" / "x.glsl.json").write_text("{}")
    (fresh_cache / "dir.glsl.json").mkdir()                          # a folder with the suffix
    (fresh_cache / "dangling.glsl.json").symlink_to(fresh_cache / "nowhere")
    ref = _lorenz("numpy")
    np.testing.assert_array_equal(_lorenz("glsl"), ref)
    glsl.clear_cache(memory=True, disk=False)
    out, c = _counts(lambda: _lorenz("glsl"))
    np.testing.assert_array_equal(out, ref)
    assert c["disk_hits"] == 1                                       # its own entry was used
    info = glsl.cache_info()
    assert info["disk_enabled"] and info["disk_entries"] >= 1
    glsl.clear_cache()
    assert (fresh_cache / "README").read_bytes() == foreign["README"]
    assert (fresh_cache / "sub" / "x.glsl.json").exists()


def _only_entry(folder: Path) -> Path:
    (entry,) = _entries(folder)
    return entry


def test_an_entry_that_became_a_folder(fresh_cache, glsl, caplog):
    ref = _lorenz("numpy")
    _lorenz("glsl")
    entry = _only_entry(fresh_cache)
    entry.unlink()
    entry.mkdir()
    glsl.clear_cache(memory=True, disk=False)
    with caplog.at_level("WARNING", logger="vgpu"):
        out, c = _counts(lambda: _lorenz("glsl"))
    np.testing.assert_array_equal(out, ref)
    assert c["disk_hits"] == 0 and c["compiles"] == 1
    assert len([r for r in caplog.records if r.name == "vgpu"]) <= 1


def test_a_well_formed_entry_whose_shader_does_not_compile_is_rebuilt(fresh_cache, glsl):
    """A checksum-valid entry with a broken shader (a driver change, a bad write from an
    older version): the driver rejects it, the entry is dropped and rebuilt once."""
    ref = _lorenz("numpy")
    _lorenz("glsl")
    entry = _only_entry(fresh_cache)
    obj = json.loads(entry.read_text())
    obj["payload"]["glsl"] = "#version 430\nthis is not glsl;\n"
    obj["sha256"] = disk_cache._digest(obj["payload"])
    entry.write_text(json.dumps(obj))
    glsl.clear_cache(memory=True, disk=False)
    out, c = _counts(lambda: _lorenz("glsl"))
    np.testing.assert_array_equal(out, ref)
    assert c["disk_hits"] == 1 and c["compiles"] == 1
    assert "this is not glsl" not in entry.read_text()


def test_an_entry_copied_from_another_program_is_ignored(fresh_cache, glsl):
    h0 = RNG.uniform(size=70).astype(np.float32)
    ref = vgpu.run_field(HEAT, h0, backend="numpy")
    vgpu.run_field(HEAT, h0, backend="glsl")
    (heat,) = _entries(fresh_cache)
    _lorenz("glsl")
    (lorenz,) = [p for p in _entries(fresh_cache) if p != heat]
    heat.write_bytes(lorenz.read_bytes())        # a self-consistent entry under the wrong name
    glsl.clear_cache(memory=True, disk=False)
    out, c = _counts(lambda: vgpu.run_field(HEAT, h0, backend="glsl"))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    assert c["disk_hits"] == 0


UNUSABLE = """
import json, logging
import numpy as np
import vgpu
from field_examples import HEAT, LORENZ
from vgpu_compiler.backends.glsl import runner as glsl_runner
h0 = np.random.default_rng(1).normal(size=(40, 3))
u0 = np.random.default_rng(2).uniform(size=90)
ok = []
for _ in range(2):
    ok.append(bool(np.array_equal(vgpu.run_field(LORENZ, h0, backend="glsl", steps=30),
                                  vgpu.run_field(LORENZ, h0, backend="numpy", steps=30))))
    ok.append(bool(np.allclose(vgpu.run_field(HEAT, u0, backend="glsl"),
                               vgpu.run_field(HEAT, u0, backend="numpy"), rtol=1e-6, atol=1e-7)))
info = glsl_runner.cache_info()
print(json.dumps({"ok": ok, "disk_enabled": info["disk_enabled"],
                  "memory_hits": info["memory_hits"], "compiles": info["compiles"]}))
"""


@pytest.mark.parametrize("where", ["under a file", "is a file"])
def test_cache_dir_that_cannot_be_created_is_memory_only(tmp_path, glsl, where):
    blocker = tmp_path / "plain-file"
    blocker.write_text("I am a file")
    folder = blocker / "cache" / "glsl" if where == "under a file" else blocker
    out, stderr = _python(UNUSABLE, _env(VGPU_CACHE_DIR=folder))
    assert out["ok"] == [True] * 4
    assert out["disk_enabled"] is False
    assert out["compiles"] == 2 and out["memory_hits"] == 2
    warnings = [line for line in stderr.splitlines() if "disk cache is off" in line]
    assert len(warnings) == 1, stderr
    assert blocker.read_text() == "I am a file"


# --- six processes, one fresh folder -----------------------------------------------------------------
RACER = """
import json, os, sys, time
import numpy as np
import vgpu
from field_examples import COLLAPSE, HISTOGRAM
from vgpu_compiler.backends.glsl import runner as glsl_runner
from vgpu_compiler.call.counters import COUNTERS
glsl_runner.available()                         # make the context before the start signal
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.005)
seed = int(sys.argv[2])
rng = np.random.default_rng(seed)
x0 = rng.uniform(-3, 3, 300 + seed)
s1 = vgpu.solve(HISTOGRAM, x0, backend="glsl")
r1 = vgpu.solve(HISTOGRAM, x0, backend="numpy")
m, p = 9 + seed, 13
s2 = vgpu.solve(COLLAPSE, dims={"M": m, "P": p}, backend="glsl")
r2 = vgpu.solve(COLLAPSE, dims={"M": m, "P": p}, backend="numpy")
ok = [bool(np.allclose(s1.states, r1.states, rtol=1e-6, atol=1e-6)),
      bool(np.array_equal(s1.outputs["counts"], r1.outputs["counts"])),
      bool(np.allclose(s2.states, r2.states, rtol=1e-5, atol=1e-5)),
      bool(np.array_equal(s2.steps_taken, r2.steps_taken))]
print(json.dumps({"ok": ok, "stats": COUNTERS.snapshot()}))
"""


def test_six_processes_compile_into_one_fresh_folder(tmp_path, glsl):
    folder, go = tmp_path / "fresh" / "cache", tmp_path / "go"
    env = _env(VGPU_CACHE_DIR=folder)
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(go), str(k)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(6)]
    time.sleep(1.0)
    go.write_text("go")                             # all six start compiling together
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] == [True] * 4 for r in results), results
    assert len(_entries(folder)) == 2
    assert not list(folder.glob(".tmp-*"))
    for entry in _entries(folder):
        obj = json.loads(entry.read_text())
        assert obj["sha256"] == disk_cache._digest(obj["payload"])

    # The folder is usable afterwards, here with every splitting limit lowered.
    env = _env(VGPU_CACHE_DIR=folder, VGPU_MAX_BLOCK_BYTES=2048,
               VGPU_MAX_STEPS_PER_DISPATCH=7)
    proc = subprocess.run([sys.executable, "-c", RACER, str(go), "3"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["ok"] == [True] * 4
    assert last["stats"]["disk_hits"] == 2
    assert last["stats"]["dispatches"] > 10


# --- threads ---------------------------------------------------------------------------------------------
def _jobs(n: int):
    """n different calls over five fields (each with its own data)."""
    rng = np.random.default_rng(n)
    jobs = []
    for k in range(n):
        kind = k % 5
        if kind == 0:
            jobs.append((LORENZ, rng.normal(size=(20 + k, 3)),
                         {"steps": 15, "params": {"rho": rng.uniform(0, 30, 20 + k)}}))
        elif kind == 1:
            jobs.append((HEAT, rng.uniform(size=64 + 3 * k), {"steps": 8, "save_every": 3}))
        elif kind == 2:
            jobs.append((HISTOGRAM, rng.uniform(-3, 3, 100 + k), {}))
        elif kind == 3:
            jobs.append((COLLAPSE, None, {"dims": {"M": 5 + k % 7, "P": 9}}))
        else:
            jobs.append((MATMUL, None, {"inputs": {"A": rng.normal(size=(3 + k % 4, 5)),
                                                   "B": rng.normal(size=(5, 4))}}))
    return jobs


def _check(got, ref):
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    for name in ref.outputs:
        np.testing.assert_allclose(got.outputs[name], ref.outputs[name], rtol=1e-5, atol=1e-5)
    if ref.history is not None:
        np.testing.assert_allclose(got.history, ref.history, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("capacity", [32, 1])
def test_32_calls_from_8_threads(fresh_cache, glsl, capacity):
    """All kernels are compiled by racing threads; with capacity 1 the memory cache
    evicts (releases) kernels while other threads are about to run them."""
    jobs = _jobs(32)
    refs = [vgpu.solve(src, h0, backend="numpy", **kw) for src, h0, kw in jobs]
    glsl.set_memory_capacity(capacity)
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(vgpu.solve, src, h0, backend="glsl", **kw)
                       for src, h0, kw in jobs]
            results = [f.result(timeout=300) for f in futures]
    finally:
        glsl.set_memory_capacity(32)
    for got, ref in zip(results, refs):
        _check(got, ref)


# --- every splitting at once ---------------------------------------------------------------------------
PLATE = """
field plate {
    param g = 0.5
    input A[P]
    grid i < M, j < P
    basin a < 4, b < 4
    state u, v = 0
    coupled s = u edge wrap, c = v edge zero
    du/dt = -g * u + A[j] + 0.1 * s[a + 1, b - 1] - 0.01 * mean(c)
    dv/dt = u - v + 0.05 * c[a, b + 1]
    collapse when abs(u - v) < 0.05 or step >= 40 + (i % 5)
    output H[M], T[3]
    flux H[i] += u
    flux T[(i + j) % 3] += 1
    solve rk4(dt = 0.05, steps = 60)
}
"""


# A row of basins (3 basins of 16 lanes across P = 11) holds 3 * 16 * 2 * 4 = 384 bytes of
# state; inputs and outputs are never split, so the limit stays above their 148 bytes.
@pytest.mark.parametrize("max_block, max_steps", [(3 * 384, 3), (384, 1), (None, 4),
                                                  (2 * 384, None)])
def test_blocks_and_chunks_together(glsl, max_block, max_steps):
    m, p = 37, 11
    A = RNG.uniform(-1, 1, p)
    u0 = RNG.uniform(-1, 1, (m, p))
    g = RNG.uniform(0.2, 1, (m, p))
    kw = dict(inputs={"A": A}, params={"g": g}, save_every=7)
    ref = vgpu.solve(PLATE, u0, backend="numpy", **kw)
    with limits(max_block=max_block, max_steps=max_steps):
        got, c = _counts(lambda: vgpu.solve(PLATE, u0, backend="glsl", **kw))
    _check(got, ref)
    assert ref.steps_taken.min() < 60                  # some basins collapsed early
    assert c["dispatches"] >= (4 if max_block else 15)


FIRST_USE_FROM_THREADS = """
import json, threading
import numpy as np
import vgpu
from field_examples import LORENZ
h0 = np.random.default_rng(3).normal(size=(50, 3)).astype(np.float32)
ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=20)
barrier, results = threading.Barrier(8), []
def first_call():
    barrier.wait()               # all eight reach the not-yet-started GL runtime together
    try:
        results.append(bool(np.array_equal(
            vgpu.run_field(LORENZ, h0, backend="glsl", steps=20), ref)))
    except Exception as e:
        results.append(repr(e))
threads = [threading.Thread(target=first_call) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps(results))
"""


def test_first_use_of_the_gl_runtime_from_eight_threads_at_once(tmp_path, glsl):
    """Every caller waits for the context, not only the one that started the GL thread."""
    out, _ = _python(FIRST_USE_FROM_THREADS, _env(VGPU_CACHE_DIR=tmp_path / "c"))
    assert out == [True] * 8
