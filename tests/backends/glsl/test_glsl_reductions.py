"""Basin reductions under both GLSL strategies, against the numpy reference.

``tree`` (a GPU: one barrier per level) and ``serial`` (a software renderer such
as llvmpipe: lane 0 folds the active lanes, two barriers per exchange) must give
the reference's answer up to the order of float rounding: sum/mean/min/max over
ACTIVE lanes only, min/max propagating NaN. The runtime still builds tree kernels
(the dispatch path passes no strategy yet), so ``strategy`` swaps the builder and
caps the steps of one dispatch the way the runtime has to on llvmpipe (its loop
limiter ends every loop of an invocation after 65535 iterations in all).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from vgpu_compiler.errors import BackendError

import vgpu
from vgpu_compiler.backends import glsl as glsl_backend
from vgpu_compiler.backends.glsl import emit_glsl, lower, reduction_for
from vgpu_compiler.frontend.compile import compile_program

import test_examples
import test_glsl_equivalence as eq
from field_examples import KURAMOTO

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
LOOP_LIMIT = 65535          # llvmpipe's LP_MAX_TGSI_LOOP_ITERATIONS


@pytest.fixture(params=[("glsl", "tree"), ("glsl", "serial"), ("wgpu", "tree"),
                        ("wgpu", "serial")], ids=lambda p: "-".join(p))
def strategy(request, fresh_cache, monkeypatch):
    """Kernels built with one reduction strategy (the runtime's own override), run with
    the runtime's own step cap per dispatch (llvmpipe's loop limiter), on each GPU
    backend (eq.GPU: the backend eq.both compares with numpy)."""
    gpu, name = request.param
    monkeypatch.setenv("VGPU_REDUCTION", name)
    if gpu == "wgpu":
        runner = request.getfixturevalue("wgpu")
        runner.clear_cache(memory=True, disk=False)
    else:
        from vgpu_compiler.backends.glsl import runner
    monkeypatch.setattr(eq, "GPU", gpu)
    yield name
    built = [k.source for k in runner.MEMORY.values()]
    assert built, "no kernel ran"
    mark = {"tree": "tree reduction over", "serial": "serial reduction:"}
    other = mark["serial" if name == "tree" else "tree"]
    assert not any(other in s for s in built), "a kernel of the other strategy ran"


def field(src: str):
    return compile_program(src, "t").select(None)


# --- the equivalence cases with coupled names, under both strategies ---------------------
@pytest.mark.parametrize("n", [300, 256, 44])
def test_kuramoto_partial_basins(strategy, n):
    rng = np.random.default_rng(n)
    omega = rng.normal(size=n).astype(np.float32)
    eq.both(KURAMOTO, rng.uniform(0, 6, n).astype(np.float32), inputs={"omega": omega},
            steps=200, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("edge", ["clamp", "wrap", "zero"])
@pytest.mark.parametrize("n", [64, 100, 7])
def test_heat_edges(strategy, edge, n):
    eq.test_heat_stencil_edges(edge, n)


@pytest.mark.parametrize("shape", [(8, 16), (10, 13), (3, 5)])
def test_basin_2d_partial(strategy, shape):
    eq.test_basin_2d_partial(shape)


def test_collapse(strategy):
    eq.test_collapse_step_counts()


MINMAX = """
field spread {
    state x
    grid i < N
    basin l < 16
    coupled v = x
    dx/dt = 0.01 * (max(v) - min(v)) + 0.001 * sum(v) - 0.1 * x + 0.01 * mean(v)
    solve heun(dt = 0.1, steps = 30)
}
"""


@pytest.mark.parametrize("n", [48, 40, 5])
def test_min_max_sum_mean_with_nan(strategy, n):
    x0 = np.random.default_rng(7).uniform(-3, 3, n).astype(np.float32)
    x0[min(3, n - 1)] = np.nan               # the first basin is all NaN, the others not
    if n > 16:
        x0[16:] = np.abs(x0[16:]) + 1.0      # a basin of positives only: max is active
    ref, gpu = eq.both(MINMAX, x0)
    assert np.isnan(gpu.states[:min(16, n)]).all()
    assert np.isfinite(gpu.states[16:]).all()


COLLAPSE_MEAN = """
field settle {
    param tol = 1e-3
    state x
    basin l < 32
    coupled v = x
    dx/dt = -(x - 0.5 * mean(v))
    collapse when max(v) - min(v) < tol
    solve rk4(dt = 0.05, steps = 400)
}
"""


def test_collapse_on_a_reduction(strategy):
    x0 = np.random.default_rng(3).uniform(-1, 1, 70).astype(np.float32)
    ref, gpu = eq.both(COLLAPSE_MEAN, x0, rtol=1e-4, atol=1e-5)
    assert len(np.unique(gpu.steps_taken)) > 1


@pytest.mark.parametrize("example", ["kuramoto_synchronises", "heat_is_conserved_and_diffuses",
                                     "barrier_basins_stop_together"])
def test_examples_with_basins(strategy, example):
    getattr(test_examples, f"test_{example}")(eq.GPU)


# --- the emitted text --------------------------------------------------------------------
def _kuramoto(reduction):
    src = (ROOT / "examples" / "kuramoto.field").read_text()
    return emit_glsl(compile_program(src, "kuramoto.field").select(None), source=src,
                     reduction=reduction)


def test_golden_cpu_form(update_golden):
    text = _kuramoto("serial")
    golden = GOLDEN / "kuramoto.cpu.glsl"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), "kuramoto.cpu.glsl differs: run pytest --update-golden"


def test_golden_cpu_form_validates(tmp_path, validator):
    exe = validator         # skipped without glslangValidator, a failure on CI
    f = tmp_path / "kernel.comp"
    f.write_text((GOLDEN / "kuramoto.cpu.glsl").read_text())
    run = subprocess.run([exe, "-S", "comp", str(f)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_barriers_per_stage():
    tree, serial = _kuramoto("tree"), _kuramoto("serial")
    # tree: wait for readers, write, 8 levels (one barrier in the loop); serial: write, fold
    assert tree.count("barrier();") == 4 * 3
    assert serial.count("barrier();") == 4 * 2
    # mean(s) and mean(c) are only reduced: no shared copy of s or c (tree), no accessor
    assert "sh_s" not in tree and "ca_s" not in serial and "vg_red" not in serial


def test_read_arrays_keep_the_fence():
    heat = field(eq.HEAT)
    text = emit_glsl(heat, reduction="serial")
    assert "every lane is done reading basin memory" in text     # v[l - 1] reads


def test_default_is_the_tree():
    f = field(KURAMOTO)
    assert emit_glsl(f) == emit_glsl(f, reduction="tree")
    assert glsl_backend.build.__kwdefaults__["reduction"] == "tree"
    with pytest.raises(ValueError):
        lower(f, reduction="warp")


def test_loop_trips_in_meta():
    f = field(KURAMOTO)
    assert lower(f, reduction="serial").meta()["loop_trips_per_step"] == 1 + 4 * 257
    assert lower(f, reduction="tree").meta()["loop_trips_per_step"] == 1 + 4 * 9
    assert field(eq.LORENZ) and lower(field(eq.LORENZ)).meta()["loop_trips_per_step"] == 1


@pytest.mark.parametrize("renderer,want", [
    ("llvmpipe (LLVM 15.0.6, 256 bits)", "serial"), ("softpipe", "serial"),
    ("Google SwiftShader", "serial"), ("NVIDIA H200/PCIe/SSE2", "tree"),
    ("AMD Radeon RX 7900 XTX (radeonsi, navi31, LLVM 15.0.7, DRM 3.54)", "tree"), ("", "tree"),
])
def test_reduction_for_renderer(renderer, want, monkeypatch):
    monkeypatch.delenv("VGPU_REDUCTION", raising=False)
    assert reduction_for(renderer) == want


def test_reduction_env_override(monkeypatch):
    monkeypatch.setenv("VGPU_REDUCTION", "tree")
    assert reduction_for("llvmpipe") == "tree"
    monkeypatch.setenv("VGPU_REDUCTION", "serial")
    assert reduction_for("NVIDIA") == "serial"
    monkeypatch.setenv("VGPU_REDUCTION", "bogus")
    with pytest.raises(BackendError, match="VGPU_REDUCTION"):     # a user's setting: a VgpuError
        reduction_for("llvmpipe")
