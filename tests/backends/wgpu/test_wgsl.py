"""The WGSL backend: golden WGSL of every example (byte for byte, validated by wgpu's
own shader compiler, naga), and what WGSL does differently from GLSL (a select that
evaluates both sides, no float64, a uniform buffer, no float atomics)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.wgpu import emit_wgsl
from vgpu_compiler.errors import BackendError, ProgramIndexError, ZeroDivision
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.field"))
GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def emit(path: Path, reduction: str = "tree") -> str:
    src = path.read_text()
    field = compile_program(src, path.name).select(None)
    return emit_wgsl(field, source=src, reduction=reduction)


EVENTS = {"lif", "bouncing_ball"}        # `when` blocks: codegen/build/events.py
STIFF: set[str] = set()                 # rodas4 examples refused: none now


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden_wgsl(path, update_golden):
    if path.stem in STIFF:
        with pytest.raises(BackendError, match="no rodas4 yet.*backend='numpy'"):
            emit(path)
        return
    text = emit(path)
    if path.stem in EVENTS:
        assert "vg_basin" not in text or "vg_basin_fold" in text
        assert "b_evi" in text and "b_evf" in text and "bisection" in text
    golden = GOLDEN / f"{path.stem}.wgsl"
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {path.name}: run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs: run pytest --update-golden"
    assert emit(path) == text           # byte-stable


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("reduction", ["tree", "serial"])
def test_wgsl_validates_with_naga(path, reduction, wgpu):
    from vgpu_compiler.backends.wgpu import device
    if path.stem in STIFF:
        return test_golden_wgsl(path, False)
    golden = GOLDEN / f"{path.stem}.wgsl"
    text = golden.read_text() if reduction == "tree" and golden.exists() else emit(path, reduction)
    device.get().device.create_shader_module(code=text)     # raises on any WGSL error


def emit_dense(name: str) -> str:
    """The WGSL of an example's fixed-step method run for save_at (its field's
    ``solver.dense`` variant: templates/adaptive.wgsl.j2's cubic Hermite kernel)."""
    import dataclasses
    src = (ROOT / "examples" / f"{name}.field").read_text()
    field = compile_program(src, f"{name}.field").select(None)
    field = dataclasses.replace(field, solver=dataclasses.replace(field.solver, dense=True))
    return emit_wgsl(field, source=src)


def test_golden_dense_wgsl_validates_with_naga(update_golden, wgpu):
    from vgpu_compiler.backends.wgpu import device
    text = emit_dense("vanderpol")
    golden = GOLDEN / "vanderpol.dense.wgsl"
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {golden.name}: run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs: run pytest --update-golden"
    assert emit_dense("vanderpol") == text
    assert "cubic Hermite" in text and "b_hist" in text
    device.get().device.create_shader_module(code=text)     # raises on any WGSL error


def test_naga_rejects_broken_wgsl(wgpu):
    """The validation above can fail: naga raises on a wrong shader."""
    from vgpu_compiler.backends.wgpu import device
    text = emit(ROOT / "examples" / "lorenz.field").replace("let u_dt: f32", "let u_dt: i32")
    with pytest.raises(Exception):
        device.get().device.create_shader_module(code=text)


LAZY = """
field lazy {
    input v[N]
    grid i < N
    state x = 0, y = 0
    dx/dt = where(i > 0, v[i - 1], 0.0) + where(i < N - 1, v[i + 1], -1.0)
    dy/dt = where(i % 2 == 0, float(7 // (i % 2)), 1.0)
    solve euler(dt = 1, steps = 2)
}
"""


def test_where_stays_lazy_though_select_is_not(wgpu):
    """The branch a lane does not take reports no error (WGSL's select evaluates both
    sides: the reads and int divisions inside carry the condition they are used under)."""
    src = LAZY.replace("i % 2 == 0", "i % 2 == 1")     # even lanes would divide by 0
    text = emit_wgsl(compile_program(src, "lazy.field").select(None))
    division = text[text.index("vg_ifloordiv(7, "):].split(";")[0]
    assert "select(" in text and not division.endswith("u, true)))")  # used only when == 1
    assert "u, (g_i > 0))" in text      # a read carries the condition it is used under
    v = np.arange(6, dtype=np.float32)
    ref = vgpu.solve(src, inputs={"v": v}, backend="numpy")
    got = vgpu.solve(src, inputs={"v": v}, backend="wgpu")
    np.testing.assert_allclose(got.states, ref.states)
    with pytest.raises(ZeroDivision):           # the taken branch still raises
        vgpu.solve(LAZY, inputs={"v": v}, backend="wgpu")
    with pytest.raises(ProgramIndexError) as e:
        vgpu.solve(LAZY.replace("where(i > 0, v[i - 1], 0.0)", "v[i - 1]"),
                   inputs={"v": v}, backend="wgpu")
    assert "v[-1]" in str(e.value)


def test_float64_is_refused_naming_the_backend(wgpu):
    with pytest.raises(BackendError) as e:
        vgpu.solve(LAZY, inputs={"v": np.ones(3)}, dtype="float64", backend="wgpu")
    from vgpu_compiler.backends import fastest      # the fastest here with float64
    assert "wgpu" in str(e.value) and "dtype='float32'" in str(e.value)
    assert f"backend='{fastest('float64', exclude=('wgpu',))}' for float64" in str(e.value)
    # auto moves on to a backend that has float64
    sol = vgpu.solve(LAZY.replace("7 // (i % 2)", "7"), inputs={"v": np.ones(3)},
                     dtype="float64")
    assert sol.states.dtype == np.float64


def test_uniforms_live_in_a_uniform_buffer_and_flux_uses_compare_and_swap():
    text = emit(ROOT / "examples" / "histogram.field")
    assert "var<uniform> vg_u: VgUniforms;" in text
    assert "atomicCompareExchangeWeak" in text and "array<atomic<u32>>" in text
    assert "?" not in text.replace("// ", "")  or "?" not in "".join(
        line.split("//")[0] for line in text.splitlines())


def test_cli_compiles_to_wgsl(capsys):
    from vgpu_compiler.cli import main
    assert main(["compile", str(ROOT / "examples" / "lorenz.field"), "--target", "wgsl"]) == 0
    out = capsys.readouterr().out
    assert out == (GOLDEN / "lorenz.wgsl").read_text()


def test_info_lists_the_wgpu_adapter_and_limits(capsys, wgpu):
    from vgpu_compiler.cli import main
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "wgpu" in out and "adapter:" in out and "largest storage binding" in out


def test_kernels_are_cached_in_memory_and_on_disk(wgpu, tmp_path, monkeypatch):
    from vgpu_compiler.backends.wgpu import disk_cache, runner
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    runner.clear_cache()
    h0 = np.ones((4, 3), np.float32)
    src = (ROOT / "examples" / "lorenz.field").read_text()
    vgpu.solve(src, h0, backend="wgpu", steps=3)
    assert len(disk_cache.DISK.entries()) == 1
    assert (tmp_path / "wgsl").is_dir()
    kernel = next(iter(runner.MEMORY.values())) if hasattr(runner.MEMORY, "values") else None
    vgpu.solve(src, h0 * 2, backend="wgpu", steps=3)
    if kernel is not None:
        assert next(iter(runner.MEMORY.values())) is kernel     # one pipeline, reused
    runner.clear_cache(memory=True, disk=False)
    before = dict(runner.COUNTERS.snapshot())
    vgpu.solve(src, h0, backend="wgpu", steps=3)
    assert runner.COUNTERS.snapshot().get("disk_hits", 0) > before.get("disk_hits", 0)


NESTED = """
field nested {
    grid i < N
    state x
    dx/dt = where(not (where(1 != 0, 7 // (1), -1) < where(i != 0, 7 // (i), -1)), 1.0, 2.0)
    solve euler(dt = 0.1, steps = 1)
}
"""


def test_a_where_inside_a_condition_keeps_its_own_condition(wgpu):
    """Found by the reliability run: a condition printed as another read's liveness
    carried no conditions of its own, so 7 // i raised on the lane with i = 0."""
    h0 = np.zeros(5, np.float32)
    ref = vgpu.solve(NESTED, h0, backend="numpy")
    got = vgpu.solve(NESTED, h0, backend="wgpu")
    np.testing.assert_array_equal(got.states, ref.states)


POWERS = ("field p { input a[N], b[N]\n grid i < N\n state x = 0, y = 0, z = 0\n"
          " dx/dt = a[i] ^ b[i]\n dy/dt = a[i] ^ 7 + a[i] ^ (-3)\n"
          " dz/dt = (a[i] * 1e5) % b[i]\n solve euler(dt = 1, steps = 1) }")


def test_wgpu_powers_and_remainders_meet_the_stated_accuracy(wgpu):
    """docs/language.md (wgpu accuracy): x ^ y within 4e-6 relative for |y log x| < 40,
    integer powers within 1e-6, float % exact (WGSL has no f64 for GLSL's once-rounded
    helpers)."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0.01, 10, 20000).astype(np.float32)
    b = rng.uniform(-8, 8, 20000).astype(np.float32)
    ref = vgpu.solve(POWERS, inputs={"a": a, "b": b}, backend="numpy").states.astype(float)
    got = vgpu.solve(POWERS, inputs={"a": a, "b": b}, backend="wgpu").states.astype(float)
    rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)
    assert rel[:, 0].max() < 4e-6 and rel[:, 1].max() < 1e-6
    np.testing.assert_array_equal(got[:, 2], ref[:, 2])


def test_evict_drops_a_fields_wgpu_kernels(wgpu, tmp_path, monkeypatch):
    from vgpu_compiler.backends.wgpu import disk_cache, runner
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    runner.clear_cache()
    src = (ROOT / "examples" / "lorenz.field").read_text()
    other = (ROOT / "examples" / "vanderpol.field").read_text()
    vgpu.solve(src, np.ones((4, 3), np.float32), backend="wgpu", steps=2)
    vgpu.solve(other, np.ones((4, 2), np.float32), backend="wgpu", steps=2)
    assert len(runner.MEMORY) == 2 and len(disk_cache.DISK.entries()) == 2
    vgpu.evict(src, dtype="float64")            # never built in float64: nothing goes
    assert len(runner.MEMORY) == 2 and len(disk_cache.DISK.entries()) == 2
    assert vgpu.evict(src) is True
    assert len(runner.MEMORY) == 1 and len(disk_cache.DISK.entries()) == 1   # vanderpol stays
    before = runner.COUNTERS.snapshot().get("compiles", 0)
    vgpu.solve(src, np.ones((4, 3), np.float32), backend="wgpu", steps=2)
    assert runner.COUNTERS.snapshot()["compiles"] == before + 1


def test_a_progress_callback_may_call_run_field_on_wgpu(wgpu):
    """A call made from a progress callback, of the same kernel, runs on buffers of its
    own: neither run disturbs the other."""
    from vgpu_compiler.backends.wgpu.runner import limits
    src = (ROOT / "examples" / "lorenz.field").read_text()
    h0 = np.random.default_rng(1).normal(size=(40, 3)).astype(np.float32)
    nested = []

    def progress(done, total):
        if done < total and len(nested) < 2:
            got = vgpu.run_field(src, h0 * 2, backend="wgpu", steps=12)
            nested.append(np.allclose(got, vgpu.run_field(src, h0 * 2, backend="numpy",
                                                          steps=12), rtol=2e-5, atol=2e-6))

    with limits(max_steps=7):
        sol = vgpu.solve(src, h0, backend="wgpu", steps=30, progress=progress)
    ref = vgpu.solve(src, h0, backend="numpy", steps=30)
    np.testing.assert_allclose(sol.states, ref.states, rtol=2e-5, atol=2e-6)
    assert nested == [True, True]


def test_a_basin_past_the_adapters_limits_is_a_backend_error(wgpu, monkeypatch):
    """Workgroup size and memory come from the adapter's limits: past them the call is a
    BackendError naming the limit, and auto runs the field elsewhere."""
    from vgpu_compiler.backends.wgpu import device, runner
    runner.clear_cache(memory=True, disk=False)
    src = (ROOT / "examples" / "kuramoto.field").read_text()
    theta = np.zeros(512, np.float32)
    omega = np.zeros(512, np.float32)
    limits = dict(device.get().limits)
    monkeypatch.setitem(device.get().limits, "max_compute_invocations_per_workgroup", 128)
    with pytest.raises(BackendError, match="invocations"):
        vgpu.run_field(src, theta, inputs={"omega": omega}, backend="wgpu", steps=1)
    monkeypatch.setitem(device.get().limits, "max_compute_invocations_per_workgroup",
                        limits["max_compute_invocations_per_workgroup"])
    monkeypatch.setitem(device.get().limits, "max_compute_workgroup_storage_size", 1024)
    runner.clear_cache(memory=True, disk=False)
    with pytest.raises(BackendError, match="workgroup storage"):
        vgpu.run_field(src, theta, inputs={"omega": omega}, backend="wgpu", steps=1)


OU = """field ou {
  param theta = 1.0
  param sigma = 0.3
  noise xi
  state x
  dx/dt = -theta * x + sigma * xi
  solve euler(dt = 0.01, steps = 50)
}"""


def test_wgsl_philox_words_bit_for_bit(wgpu):
    """The WGSL generator (the kernel's rounds with their 16-bit mulhi, codegen/build/noise.py,
    as vg_philox_word) against vgpu.philox, word for word, Random123's first known answer
    included."""
    import wgpu as wgpu_api
    from vgpu_compiler.backends.wgpu import device
    from vgpu_compiler.codegen.build import noise
    text = emit_wgsl(compile_program(OU, "ou.field").select(None))
    assert noise.printed("wgsl") in text            # the kernel's generator, the same text
    helpers = noise.printed("wgsl", tests=True)
    shader = ("@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;\n"
              "@group(0) @binding(1) var<storage, read> key: array<vec2<u32>>;\n"
              "@group(0) @binding(2) var<storage, read_write> dst: array<vec4<u32>>;\n"
              + helpers + "@compute @workgroup_size(64)\n"
              "fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
              "    let c = src[g.x];\n    let k = key[g.x];\n"
              "    dst[g.x] = vec4<u32>(" + ", ".join(
                  f"vg_philox_word(c.x, c.y, c.z, c.w, k.x, k.y, {j})" for j in range(4))
              + ");\n}\n")
    rng = np.random.default_rng(1)
    n = 256
    ctr = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    ctr[0], keys[0] = 0, 0
    ctr[1], keys[1] = 0xFFFFFFFF, 0xFFFFFFFF
    dev = device.get().device
    pipe = dev.create_compute_pipeline(layout="auto", compute={
        "module": dev.create_shader_module(code=shader), "entry_point": "main"})
    usage = wgpu_api.BufferUsage.STORAGE | wgpu_api.BufferUsage.COPY_SRC
    bufs = [dev.create_buffer_with_data(data=ctr.tobytes(), usage=usage),
            dev.create_buffer_with_data(data=keys.tobytes(), usage=usage),
            dev.create_buffer(size=n * 16, usage=usage)]
    group = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
        for i, b in enumerate(bufs)])
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, group)
    cp.dispatch_workgroups(n // 64)
    cp.end()
    dev.queue.submit([enc.finish()])
    got = np.frombuffer(dev.queue.read_buffer(bufs[2]), np.uint32).reshape(n, 4)
    want = np.stack([vgpu.philox(ctr[i], keys[i]) for i in range(n)])
    np.testing.assert_array_equal(got, want)
    assert tuple(got[0]) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def test_a_new_seed_is_not_a_recompile_on_wgpu(wgpu):
    h0 = np.zeros(64, np.float32)
    a = vgpu.run_field(OU, h0, backend="wgpu", seed=1)
    before = vgpu.cache_stats()["compiles"]
    b = vgpu.run_field(OU, h0, backend="wgpu", seed=2)
    c = vgpu.run_field(OU, h0, backend="wgpu", seed=1)
    assert vgpu.cache_stats()["compiles"] == before
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    ref = vgpu.run_field(OU, h0, backend="numpy", seed=1)
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5)


DECAY_ADAPTIVE = """field decay {
  param rate = 1.0
  state x
  dx/dt = -rate * x
  solve tsit5(t1 = 1)
}"""


def test_adaptive_methods_and_save_at_run_on_wgpu_but_not_in_float64(wgpu):
    """An adaptive method and a fixed-step method's save_at run on wgpu (the kernel of
    templates/adaptive.wgsl.j2; tests/backends/wgpu/test_wgpu_adaptive.py tests them against the
    reference); float64 is refused as for every wgpu call, naming the backend."""
    h0 = np.linspace(0.5, 2, 16).astype(np.float32)
    sol = vgpu.solve(DECAY_ADAPTIVE, h0, backend="wgpu")
    np.testing.assert_allclose(sol.states, h0 * np.exp(-1.0), rtol=1e-4)
    assert (sol.status == 0).all() and (sol.t == 1).all() and (sol.steps_taken > 1).all()
    src = (ROOT / "examples" / "lorenz.field").read_text()
    saved = vgpu.solve(src, np.ones((4, 3), np.float32), backend="wgpu",
                       save_at=np.linspace(0, 0.01, 3))
    assert saved.history.shape == (3, 4, 3)
    with pytest.raises(BackendError, match="wgpu.*float64"):
        vgpu.solve(DECAY_ADAPTIVE, h0, backend="wgpu", dtype="float64")


def test_every_input_read_counts_against_lavapipes_loop_limit(wgpu):
    """Found porting a dosing model: each call of an input's loader reaches vg_fail's
    compare-exchange loop, which llvmpipe's limiter (65,535 trips per invocation and
    dispatch) counts though no lane fails, so a field reading its input 10 times per
    step stopped silently after 5,957 of 8,000 steps. The loads count in the kernel's
    loop trips (Dialect.guarded_trips), and the run splits its dispatches."""
    from vgpu_compiler.backends.wgpu import lower as lower_wgsl
    src = ("field f {\n    input A[M]\n    state x = 0\n    dx/dt = "
           + " + ".join(f"A[{i}]" for i in range(10))
           + "\n    solve euler(dt = 0.001, steps = 8000)\n}\n")
    field = compile_program(src, "f.field").select(None)
    assert lower_wgsl(field).meta()["loop_trips_per_step"] == 1 + 10
    A = np.full(10, 0.1)
    ref = vgpu.solve(src, inputs={"A": A}, dims={"N": 2}, backend="numpy", dtype="float32")
    got = vgpu.solve(src, inputs={"A": A}, dims={"N": 2}, backend="wgpu")
    np.testing.assert_array_equal(got.states, ref.states)
    assert abs(float(got.states[0]) - 8.0) < 1e-3
