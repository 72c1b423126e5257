"""The Python API: run_field / solve / load / compile, backends, caching, warnings."""
from __future__ import annotations

import logging
import sys
import types
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler import pipeline
from vgpu_compiler.errors import BackendError
from vgpu_compiler.call.counters import COUNTERS

RUNNER = "vgpu_compiler.backends.glsl.runner"

LORENZ = """
field lorenz {
    param sigma = 10.0
    param rho   = 28.0
    param beta  = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve rk4(dt = 0.01, steps = 100)
}
"""

SCALE = """
field scale {
    param s = 2.0
    state x
    dx/dt = (s - 1) * x
    solve euler(dt = 1, steps = 1)
}
"""

TWO = SCALE + SCALE.replace("field scale", "field triple").replace("2.0", "3.0")


def test_run_field_shapes_and_default_dtype():
    h = vgpu.run_field(LORENZ, np.tile([1.0, 0.0, 0.0], (8, 1)), backend="numpy")
    assert h.shape == (8, 3) and h.dtype == np.float32
    x = vgpu.run_field(SCALE, np.arange(5), backend="numpy")
    assert x.shape == (5,)
    np.testing.assert_array_equal(x, np.arange(5) * 2.0)


def test_run_field_per_trajectory_param_matches_scalar_calls():
    rho = np.array([0.0, 10.0, 28.0], np.float32)
    h0 = np.tile(np.float32([1, 0, 0]), (3, 1))
    swept = vgpu.run_field(LORENZ, h0, params={"rho": rho}, backend="numpy")
    for k, r in enumerate(rho):
        one = vgpu.run_field(LORENZ, h0[k:k + 1], params={"rho": float(r)}, backend="numpy")
        np.testing.assert_array_equal(swept[k], one[0])


def test_solve_returns_a_solution():
    sol = vgpu.solve(SCALE, np.ones(4), backend="numpy", save_every=1)
    assert isinstance(sol, vgpu.Solution)
    assert sol.outputs == {} and sol.steps_taken.shape == (4,)
    assert sol.history.shape == (2, 4) and sol.times.tolist() == [0.0, 1.0]


def test_load_names_the_file_in_errors(tmp_path):
    path = tmp_path / "broken.field"
    path.write_text("field f {\n    state x\n    dx/dt = x +\n    solve euler(dt = 1, steps = 1)\n}\n")
    src = vgpu.load(path)
    assert isinstance(src, str) and src.filename == str(path)
    with pytest.raises(vgpu.VgpuError) as info:
        vgpu.run_field(src, np.ones(2), backend="numpy")
    text = str(info.value)
    assert str(path) in text and "^" in text


def test_load_missing_file_is_a_vgpu_error(tmp_path):
    with pytest.raises(vgpu.VgpuError, match="nope.field"):
        vgpu.load(tmp_path / "nope.field")


def test_path_objects_are_loaded(tmp_path):
    path = tmp_path / "scale.field"
    path.write_text(SCALE)
    np.testing.assert_array_equal(vgpu.run_field(path, np.ones(2), backend="numpy"), 2.0)


def test_runtime_errors_print_the_source_line():
    src = "field f {\n    input v[N]\n    state x = 0\n    dx/dt = v[i + 2]\n" \
          "    solve euler(dt = 1, steps = 1)\n}\n"
    with pytest.raises(vgpu.VgpuIndexError) as info:
        vgpu.run_field(src, inputs={"v": np.ones(3)}, backend="numpy")
    assert "<string>:4:" in str(info.value) and "v[i + 2]" in str(info.value)


def test_compile_returns_every_stage_and_field_selection():
    compiled = vgpu.compile(TWO)
    assert [f.name for f in compiled.program.fields] == ["scale", "triple"]
    vgpu.compile(TWO, field="triple")
    with pytest.raises(vgpu.UnknownNameError, match="scale"):
        vgpu.compile(TWO, field="quadruple")
    with pytest.raises(vgpu.UnknownNameError, match="triple"):
        vgpu.run_field(TWO, np.ones(2), backend="numpy")
    x = vgpu.run_field(TWO, np.ones(2), field="triple", backend="numpy")
    np.testing.assert_array_equal(x, 3.0)


def test_parse_results_are_memoised():
    src = SCALE + "\n# a text no other test uses\n"
    before = COUNTERS.snapshot()
    vgpu.run_field(src, np.ones(2), backend="numpy")
    vgpu.run_field(src, np.ones(3), backend="numpy")
    after = vgpu.cache_stats()
    assert after["parses"] - before["parses"] == 1
    assert after["parse_hits"] - before["parse_hits"] == 1


def test_parse_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(pipeline._parsed, "capacity", 2)
    texts = [SCALE + f"\n# bounded {k}\n" for k in range(3)]
    for t in texts:
        vgpu.compile(t)
    assert len(pipeline._parsed) <= 2
    before = COUNTERS.snapshot()["parses"]
    vgpu.compile(texts[0])                       # evicted: parsed again
    assert COUNTERS.snapshot()["parses"] == before + 1


def _fake_runner(monkeypatch, available=True, run=None):
    module = types.ModuleType(RUNNER)
    module.available = lambda: available
    module.run = run or (lambda prepared, data, progress=None:
                         pipeline._numpy(prepared, data, progress))
    monkeypatch.setitem(sys.modules, RUNNER, module)
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())
    _hide_wgpu(monkeypatch)
    monkeypatch.setenv("VGPU_NO_CPU", "1")      # these tests are about GLSL and numpy
    return module


def _hide_wgpu(monkeypatch):
    """The wgpu backend, unavailable for one test (these tests are about GLSL and numpy):
    a stand-in under its name, and a fresh order cache, both undone afterwards."""
    import dataclasses
    from vgpu_compiler import backends as registry
    standin = dataclasses.replace(registry.get("wgpu"), available=lambda: (False, "hidden"))
    monkeypatch.setitem(registry._extra, "wgpu", standin)
    monkeypatch.setattr(registry, "_order", {})


def test_auto_falls_back_to_numpy_with_one_logged_warning(monkeypatch, caplog):
    _fake_runner(monkeypatch, available=False)
    before = COUNTERS.snapshot()["cpu_fallbacks"]
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        for _ in range(3):
            x = vgpu.run_field(SCALE, np.ones(2))
    np.testing.assert_array_equal(x, 2.0)
    said = [r.getMessage() for r in caplog.records if r.name == "vgpu"]
    assert len([m for m in said if "GLSL" in m]) == 1     # one per backend moved past
    assert "numpy" in said[-1]
    assert COUNTERS.snapshot()["cpu_fallbacks"] == before + 3
    with pytest.raises(vgpu.BackendError, match="numpy"):
        vgpu.run_field(SCALE, np.ones(2), backend="glsl")


def test_auto_uses_glsl_when_available(monkeypatch):
    calls = []

    def run(prepared, data, progress=None):
        calls.append(prepared.field.name)
        return pipeline._numpy(prepared, data, progress)

    _fake_runner(monkeypatch, run=run)
    before = COUNTERS.snapshot()["cpu_fallbacks"]
    vgpu.run_field(SCALE, np.ones(2))
    vgpu.run_field(SCALE, np.ones(2), backend="glsl")
    vgpu.run_field(SCALE, np.ones(2), backend="numpy")
    assert calls == ["scale", "scale"]
    assert COUNTERS.snapshot()["cpu_fallbacks"] == before


def test_auto_falls_back_when_glsl_cannot_run_the_program(monkeypatch, caplog):
    def run(prepared, data, progress=None):
        raise BackendError("float64 sin is not available in GLSL")

    _fake_runner(monkeypatch, run=run)
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        x = vgpu.run_field(SCALE, np.ones(2), dtype="float64")
    assert x.dtype == np.float64
    assert "float64 sin" in caplog.text
    with pytest.raises(vgpu.BackendError, match="float64 sin"):
        vgpu.run_field(SCALE, np.ones(2), backend="glsl")


def test_missing_glsl_module_means_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, RUNNER, None)      # import raises ImportError
    monkeypatch.setenv("VGPU_NO_CPU", "1")
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())
    np.testing.assert_array_equal(vgpu.run_field(SCALE, np.ones(2)), 2.0)
    with pytest.raises(vgpu.BackendError):
        vgpu.run_field(SCALE, np.ones(2), backend="glsl")


def test_one_warning_counts_nonfinite_trajectories():
    h0 = np.ones(10)
    h0[[1, 4, 7]] = np.nan
    h0[9] = np.inf
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vgpu.run_field(SCALE, h0, backend="numpy")
    found = [w for w in caught if issubclass(w.category, vgpu.NonFiniteWarning)]
    assert len(found) == 1 and "4 of 10" in str(found[0].message)
    assert found[0].filename == __file__


def test_nonfinite_counts_trajectories_not_values():
    h0 = np.ones((6, 3))
    h0[2] = np.nan                      # every state of one trajectory
    h0[4, 1] = np.inf
    with pytest.warns(vgpu.NonFiniteWarning, match="2 of 6"):
        vgpu.run_field(LORENZ, h0, backend="numpy", steps=1)


def test_exports():
    for name in ("run_field", "solve", "load", "compile", "cache_stats", "VgpuError",
                 "NonFiniteWarning", "Solution", "ShapeError", "MissingError",
                 "UnknownNameError", "CallError", "BackendError", "VgpuSyntaxError"):
        assert hasattr(vgpu, name), name
    assert set(vgpu.cache_stats()) >= {"parses", "parse_hits", "cpu_fallbacks"}


@pytest.mark.parametrize("progress", [3, "bar", [print]])
def test_progress_must_be_callable(progress):
    with pytest.raises(vgpu.ArgumentTypeError, match=r"^progress must be None, True or a function "
                                                     r"progress\(done, total\), got "):
        vgpu.solve(SCALE, np.ones(2), backend="numpy", progress=progress)


def test_progress_gets_done_and_total():
    seen = []
    vgpu.solve(SCALE, np.ones(2), backend="numpy", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1]


def test_running_out_of_memory_is_a_call_error_naming_the_size(monkeypatch):
    from vgpu_compiler.backends.numpy import runner as numpy_ref

    def run(bound, progress=None):
        raise MemoryError()

    monkeypatch.setattr(numpy_ref, "run", run)
    with pytest.raises(vgpu.CallError, match=r"out of memory running field scale on a grid "
                                             r"of shape \(1000,\) \(1000 trajectories, "
                                             r"0\.00 GiB of states alone\)"):
        vgpu.run_field(SCALE, np.ones(1000), backend="numpy")
