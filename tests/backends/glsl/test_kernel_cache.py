"""Runtime: the kernel caches (memory LRU, disk), splitting over dispatches, and limits."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.backends.glsl.plan import limits

from field_examples import HEAT, LORENZ, MATMUL

ROOT = Path(__file__).resolve().parents[3]
RNG = np.random.default_rng(7)


def counts(fn):
    before = COUNTERS.snapshot()
    out = fn()
    after = COUNTERS.snapshot()
    return out, {k: after[k] - before[k] for k in after}


def lorenz(n=256, steps=50, **kw):
    h0 = RNG.normal(size=(n, 3)).astype(np.float32)
    return vgpu.run_field(LORENZ, h0, backend="glsl", steps=steps, **kw)


def test_same_shape_new_data_is_a_memory_hit(fresh_cache):
    _, first = counts(lorenz)
    assert first["compiles"] == 1 and first["memory_hits"] == 0
    _, second = counts(lorenz)
    assert second["compiles"] == 0 and second["disk_hits"] == 0
    assert second["memory_hits"] == 1 and second["dispatches"] == 1


def test_a_new_shape_compiles_once(fresh_cache):
    counts(lambda: lorenz(100))
    _, bigger = counts(lambda: lorenz(5000))
    # a kernel per shape (it owns buffers of that size); its GLSL, which does not
    # depend on the shape, comes from the disk cache without lowering again
    assert bigger["compiles"] == 1 and bigger["memory_hits"] == 0
    assert bigger["disk_hits"] == 1
    _, again = counts(lambda: lorenz(5000))
    assert again["compiles"] == 0 and again["memory_hits"] == 1
    _, first_again = counts(lambda: lorenz(100))
    assert first_again["compiles"] == 0 and first_again["memory_hits"] == 1


def test_per_trajectory_params_are_another_kernel(fresh_cache):
    lorenz()
    _, c = counts(lambda: lorenz(params={"rho": np.linspace(0, 30, 256)}))
    assert c["compiles"] == 1


def test_memory_lru_evicts(fresh_cache, glsl):
    glsl.set_memory_capacity(2)
    try:
        lorenz()
        vgpu.run_field(MATMUL, inputs={"A": np.ones((2, 3), np.float32),
                                       "B": np.ones((3, 2), np.float32)}, backend="glsl")
        _, c = counts(lambda: vgpu.run_field(HEAT, np.ones(64, np.float32), backend="glsl"))
        assert c["evictions"] == 1 and len(glsl.MEMORY) == 2
        _, again = counts(lorenz)           # evicted from memory, found on disk
        assert again["disk_hits"] == 1 and again["compiles"] == 1
    finally:
        glsl.set_memory_capacity(32)


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.glsl.json"))


SCRIPT = """
import json, sys
import numpy as np
import vgpu
from vgpu_compiler.call.counters import COUNTERS
from field_examples import LORENZ
h0 = np.random.default_rng(int(sys.argv[1])).normal(size=(64, 3)).astype(np.float32)
ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=20)
out = vgpu.run_field(LORENZ, h0, backend="glsl", steps=20)
assert np.array_equal(out, ref)
print(json.dumps(COUNTERS.snapshot()))
"""


def _subprocess(cache: Path, seed: int = 0) -> subprocess.Popen:
    env = dict(os.environ, VGPU_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(seed)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_second_process_reuses_the_disk_entry(tmp_path, glsl):
    cache = tmp_path / "cache"
    first = _finish(_subprocess(cache))
    assert first["disk_hits"] == 0 and first["compiles"] == 1
    assert len(_entries(cache)) == 1
    second = _finish(_subprocess(cache, 1))
    assert second["disk_hits"] == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "checksum", "foreign", "empty"])
def test_damaged_entry_is_rebuilt(fresh_cache, glsl, damage):
    ref = vgpu.run_field(LORENZ, np.ones((8, 3), np.float32), backend="numpy", steps=10)
    vgpu.run_field(LORENZ, np.ones((8, 3), np.float32), backend="glsl", steps=10)
    (entry,) = _entries(fresh_cache)
    data = entry.read_text()
    if damage == "truncate":
        entry.write_text(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(300))
    elif damage == "empty":
        entry.write_text("")
    else:
        obj = json.loads(data)
        if damage == "checksum":
            obj["payload"]["glsl"] = obj["payload"]["glsl"].replace("u_dt", "u_dx")
        else:
            obj["key"] = "0" * 40
        entry.write_text(json.dumps(obj))
    glsl.clear_cache(memory=True, disk=False)
    out, c = counts(lambda: vgpu.run_field(LORENZ, np.ones((8, 3), np.float32),
                                           backend="glsl", steps=10))
    np.testing.assert_array_equal(out, ref)
    assert c["disk_hits"] == 0 and c["compiles"] == 1
    assert glsl.DISK.load(entry.name.split(".")[0]) is not None     # rewritten


def test_concurrent_processes_share_a_fresh_folder(tmp_path, glsl):
    cache = tmp_path / "shared"
    procs = [_subprocess(cache, seed) for seed in range(4)]
    results = [_finish(p) for p in procs]
    assert all(r["compiles"] == 1 for r in results)
    assert len(_entries(cache)) == 1
    assert not list(cache.glob(".tmp-*"))


def test_unusable_folder_is_memory_only(tmp_path, glsl, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    glsl.set_cache_dir(blocker / "cache")
    glsl.clear_cache(memory=True, disk=False)
    try:
        with caplog.at_level("WARNING", logger="vgpu"):
            lorenz()
            glsl.clear_cache(memory=True, disk=False)
            lorenz(steps=5)
        warnings = [r for r in caplog.records if "disk cache is off" in r.getMessage()]
        assert len(warnings) == 1
        assert glsl.cache_info()["disk_enabled"] is False
    finally:
        glsl.set_cache_dir(None)
        glsl.clear_cache(memory=True, disk=False)


def test_clear_and_info(fresh_cache, glsl):
    lorenz()
    info = glsl.cache_info()
    assert info["memory_entries"] == 1 and info["disk_entries"] == 1
    assert glsl.clear_cache() == {"memory": 1, "disk": 1}
    assert glsl.cache_info()["disk_entries"] == 0


# --- splitting -------------------------------------------------------------------------------
def test_long_integration_over_many_dispatches(glsl):
    h0 = RNG.normal(size=(300, 3)).astype(np.float32)
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=500)
    seen = []
    with limits(max_steps=37):
        sol, c = counts(lambda: vgpu.solve(LORENZ, h0, backend="glsl", steps=500,
                                           progress=lambda d, t: seen.append((d, t))))
    np.testing.assert_array_equal(sol.states, ref)
    assert c["dispatches"] == 14
    assert seen == sorted(seen) and seen[-1] == (500, 500) and len(seen) >= 14


WELLS = """
field wells {
    state x
    basin l < 64
    dx/dt = x - x^3
    collapse when abs(abs(x) - 1) < 1e-3
    solve rk4(dt = 0.01, steps = 3000)
}
"""


@pytest.mark.parametrize("src,shape,block", [
    (LORENZ, (5000, 3), 256 * 3 * 4),        # 256 trajectories of 3 states per block
    (WELLS, (1000,), 64 * 8 * 2),            # 2 basins per block (steps and flags: 8 bytes)
])
def test_ensemble_larger_than_one_storage_block(glsl, src, shape, block):
    h0 = RNG.uniform(-2, 2, size=shape).astype(np.float32)
    kw = {"steps": 30} if src is LORENZ else {}
    ref = vgpu.solve(src, h0, backend="numpy", **kw)
    with limits(max_block=block):
        sol, c = counts(lambda: vgpu.solve(src, h0, backend="glsl", **kw))
    assert c["dispatches"] >= 4
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)


def test_heat_basins_split_by_whole_basins(glsl):
    u0 = RNG.uniform(size=64 * 5 + 17).astype(np.float32)
    ref = vgpu.run_field(HEAT, u0, backend="numpy")
    with limits(max_block=64 * 4 * 2):          # two basins per dispatch
        out, c = counts(lambda: vgpu.run_field(HEAT, u0, backend="glsl"))
    assert c["dispatches"] == 3
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_threads_share_the_gl_context(glsl):
    from concurrent.futures import ThreadPoolExecutor
    h0 = RNG.normal(size=(128, 3)).astype(np.float32)
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=30)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: vgpu.run_field(LORENZ, h0, backend="glsl", steps=30),
                             range(8)))
    for out in outs:
        np.testing.assert_array_equal(out, ref)


def test_no_gl_env_means_unavailable(tmp_path):
    env = dict(os.environ, VGPU_NO_GL="1", PYTHONPATH=str(ROOT))
    code = "from vgpu_compiler.backends.glsl import runner; print(runner.available())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_public_cache_face(fresh_cache):
    """vgpu.cache_info / clear_cache / evict act on the same caches the runtime uses (a
    field of its own: another test may have built LORENZ in float64 on another backend)."""
    own = LORENZ.replace("field lorenz", "field lorenz_face")
    h0 = RNG.normal(size=(256, 3)).astype(np.float32)

    def run():
        return vgpu.run_field(own, h0, backend="glsl", steps=50)
    run()
    info = vgpu.cache_info()
    assert info["memory_entries"] >= 1 and info["compiles"] >= 1
    assert vgpu.evict(own) is True
    _, again = counts(run)
    assert again["compiles"] == 1 and again["disk_hits"] == 0      # gone from memory and disk
    assert vgpu.evict(own, dtype="float64") is False                # never built in float64
    dropped = vgpu.clear_cache()
    assert dropped["memory"] >= 1 and dropped["disk"] >= 1
    assert vgpu.cache_info()["memory_entries"] == 0
    _, after = counts(run)
    assert after["compiles"] == 1 and after["disk_hits"] == 0


# --- evict: every kernel of a field unless narrowed (issue 18) ------------------------------
def _lorenz_variants():
    """LORENZ with scalar and with per-trajectory rho, in float32 and float64: 4 kernels."""
    for dtype in ("float32", "float64"):
        for rho in (28.0, np.linspace(20, 30, 16)):
            h0 = RNG.normal(size=(16, 3))
            vgpu.run_field(LORENZ, h0, params={"rho": rho}, dtype=dtype, backend="glsl",
                           steps=5)


def _variant_compiles() -> dict:
    _, c = counts(_lorenz_variants)
    return c


def test_evict_drops_every_kernel_of_the_field(fresh_cache, glsl):
    _lorenz_variants()
    assert glsl.cache_info()["memory_entries"] == 4 and len(_entries(fresh_cache)) == 4
    assert vgpu.evict(LORENZ) is True
    info = glsl.cache_info()
    assert info["memory_entries"] == 0 and info["disk_entries"] == 0
    c = _variant_compiles()
    assert c["compiles"] == 4 and c["disk_hits"] == 0 and c["memory_hits"] == 0
    assert vgpu.evict(LORENZ) is True and vgpu.evict(LORENZ) is False


def test_evict_narrowed_by_dtype_and_per_trajectory_params(fresh_cache, glsl):
    _lorenz_variants()
    vgpu.run_field(HEAT, np.ones(64, np.float32), backend="glsl")      # another field: kept
    assert vgpu.evict(LORENZ, dtype="float64") is True                  # both float64 kernels
    assert glsl.cache_info()["memory_entries"] == 3 and len(_entries(fresh_cache)) == 3
    assert vgpu.evict(LORENZ, dtype="float32", per_trajectory=["rho"]) is True
    assert vgpu.evict(LORENZ, per_trajectory="rho") is False            # gone already
    assert glsl.cache_info()["memory_entries"] == 2 and len(_entries(fresh_cache)) == 2
    c = _variant_compiles()          # float32 scalar rho was kept; the other three rebuilt
    assert c["compiles"] == 3 and c["memory_hits"] == 1 and c["disk_hits"] == 0
    _, heat = counts(lambda: vgpu.run_field(HEAT, np.ones(64, np.float32), backend="glsl"))
    assert heat["memory_hits"] == 1 and heat["compiles"] == 0


# --- the key leaves source positions out (issue 19, item 15) -------------------------------
INDEXED = """field f {
    input v[N]
    state x = 0
    dx/dt = v[2 - i] + v[i + 2]
    solve euler(dt = 1, steps = 1)
}
"""
# two error sites (the first never fails), positions moved by comments and spacing
RESPACED = "# the same field\n\n" + INDEXED.replace("dx/dt = v[2 - i] + v[i + 2]",
                                                  "dx/dt = v[2-i] + v[i+2]  # !")


def _index_error(src):
    def go():
        with pytest.raises(vgpu.VgpuIndexError) as info:
            vgpu.run_field(src, inputs={"v": np.ones(3, np.float32)}, backend="glsl")
        return info.value
    return counts(go)


def test_comments_and_spacing_share_a_kernel_and_errors_name_the_current_text(fresh_cache,
                                                                               glsl):
    first, c = _index_error(INDEXED)
    assert c["compiles"] == 1 and (first.line, first.column) == (4, 24)
    second, c = _index_error(RESPACED)
    assert c["compiles"] == 0 and c["memory_hits"] == 1
    assert (second.line, second.column) == (6, 22) and "line 6" in str(second)
    assert "v[i+2]" in second.source_line
    with pytest.raises(vgpu.VgpuIndexError) as longer:      # a run on the GL thread
        vgpu.solve(RESPACED, inputs={"v": np.ones(3, np.float32)}, backend="glsl", steps=3,
                   save_every=1)
    assert (longer.value.line, longer.value.column) == (6, 22)
    glsl.clear_cache(memory=True, disk=False)           # a new process: found on disk
    third, c = _index_error(RESPACED)
    assert c["disk_hits"] == 1 and c["compiles"] == 1 and (third.line, third.column) == (6, 22)
    again, _ = _index_error(INDEXED)
    assert (again.line, again.column) == (4, 24)


def test_the_key_differs_when_the_program_does(glsl):
    from vgpu_compiler.backends.glsl.runner import canonical
    one = vgpu.compile(INDEXED).program.fields[0]
    assert canonical(vgpu.compile(RESPACED).program.fields[0])[0] == canonical(one)[0]
    other = vgpu.compile(INDEXED.replace("i + 2", "i + 1")).program.fields[0]
    assert canonical(other)[0] != canonical(one)[0]


# --- the key is iterative and linear in the IR DAG (issue 19, item 6) ----------------------
def test_the_key_of_deep_and_shared_expressions(glsl):
    import dataclasses
    from vgpu_compiler.ir.nodes import Apply
    from vgpu_compiler.ir.ops import Op
    from vgpu_compiler.backends.glsl.runner import canonical
    field = vgpu.compile(LORENZ).program.fields[0]
    deep = field.derivs[0]
    for _ in range(20000):                     # far deeper than Python's recursion limit
        deep = Apply(Op.NEG, (deep,), deep.type)
    shared = field.derivs[0]
    for _ in range(300):                       # 2^300 paths, 300 distinct nodes
        shared = Apply(Op.ADD, (shared, shared), shared.type)
    keys = {canonical(dataclasses.replace(field, derivs=(e,) + field.derivs[1:]))[0]
            for e in (deep, shared, field.derivs[0])}
    assert len(keys) == 3


@pytest.mark.parametrize("expr", ["(" * 160 + "x" + ")" * 160, " + ".join(["x"] * 200)])
def test_deep_and_wide_expressions_run_on_glsl(glsl, expr):
    src = f"field f {{\n state x\n dx/dt = -0.001 * ({expr})\n solve euler(dt=0.1, steps=3)\n}}\n"
    h0 = np.linspace(0, 1, 8).astype(np.float32)
    ref = vgpu.run_field(src, h0, backend="numpy")
    np.testing.assert_allclose(vgpu.run_field(src, h0, backend="glsl"), ref, rtol=1e-5)
