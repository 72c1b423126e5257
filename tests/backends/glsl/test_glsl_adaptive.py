"""The adaptive kernels of the compiled backends (GLSL, C) against the numpy reference (the
oracle): accepted-step counts, states, save_at values, statuses, basins, flux, uniforms;
on GLSL also dispatch pacing, chunks and the validator."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import vgpu
from conftest import find_validator
from vgpu_compiler.backends.glsl import emit_glsl
from vgpu_compiler.backends.glsl import adaptive_run
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.runtime import pacing

LORENZ = """
field lorenz {
    param sigma = 10.0
    param rho = 28.0
    param beta = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve METHOD(t1 = 1, rtol = 1e-8, atol = 1e-8)
}
"""

BASIN = """
field pair {
    param k
    input w[N]
    output tot[2]
    grid i < N
    basin b < 4
    state x
    coupled xc = x
    dx/dt = -k * x + 0.01 * mean(xc) + w[i] * t + 0 * dt
    solve bs3(t1 = 1, rtol = 1e-7, atol = 1e-9)
    flux tot[i % 2] += x + float(step) * 0
}
"""


ADAPTIVE_BACKENDS = ("glsl", "cpu")


@pytest.fixture(params=ADAPTIVE_BACKENDS)
def backend(request) -> str:
    """A compiled backend with adaptive kernels (its conftest fixture: skip or fail)."""
    request.getfixturevalue(request.param)
    return request.param


def both(src, *args, backend="glsl", **kwargs):
    a = vgpu.solve(src, *args, backend="numpy", **kwargs)
    b = vgpu.solve(src, *args, backend=backend, **kwargs)
    return a, b


@pytest.mark.parametrize("method", ["bs3", "dopri5", "tsit5"])
def test_float64_lorenz_sweep_matches_the_reference(backend, method):
    n = 256
    rho = np.linspace(0, 21, n)
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    times = np.linspace(0, 1, 9)
    a, b = both(LORENZ.replace("METHOD", method), h0, params={"rho": rho}, dtype="float64",
                save_at=times, backend=backend)
    assert (a.steps_taken == b.steps_taken).mean() >= 0.99
    assert (a.steps_rejected == b.steps_rejected).mean() >= 0.99
    scale = 1e-8 * (1 + np.abs(a.states))
    assert (np.abs(a.states - b.states) / scale).max() < 10
    assert np.abs(a.history - b.history).max() < 1e-6
    np.testing.assert_array_equal(b.status, 0)
    np.testing.assert_array_equal(b.t, 1.0)
    np.testing.assert_array_equal(b.times, times)


def test_float32_at_a_float32_tolerance(backend):
    """float32 meets rtol = atol = 1e-5 (the floor: below ~1e-6 the error estimate is
    rounding noise, steps grow and the status may be 3)."""
    n = 64
    rho = np.linspace(0, 21, n)
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    src = LORENZ.replace("METHOD", "tsit5")
    a64 = vgpu.solve(src, h0, params={"rho": rho}, dtype="float64", backend="numpy",
                     rtol=1e-12, atol=1e-12)
    a, b = both(src, h0, params={"rho": rho}, dtype="float32", rtol=1e-5, atol=1e-5,
                backend=backend)
    assert b.states.dtype == np.float32 and (b.status == 0).all()
    for s in (a, b):
        assert np.abs(s.states - a64.states).max() < 1e-3 * (1 + np.abs(a64.states).max())
    assert (a.steps_taken == b.steps_taken).mean() >= 0.9
    assert np.abs(a.steps_taken - b.steps_taken).max() <= 2


def test_basin_shares_a_step_with_coupling_inputs_flux_t_and_dt(backend):
    n = 10
    k = np.linspace(0.1, 20, n)
    w = np.linspace(-1, 1, n)
    for dtype in ("float64", "float32"):
        a, b = both(BASIN, np.ones(n), params={"k": k}, inputs={"w": w}, dtype=dtype,
                    save_at=[0.0, 0.3, 1.0], backend=backend)
        np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
        assert len(set(b.steps_taken[:4])) == 1 and len(set(b.steps_taken[4:8])) == 1
        tol = 1e-12 if dtype == "float64" else 1e-5
        np.testing.assert_allclose(b.states, a.states, rtol=tol, atol=tol)
        np.testing.assert_allclose(b.history, a.history, rtol=tol, atol=tol)
        np.testing.assert_allclose(b.outputs["tot"], a.outputs["tot"], rtol=10 * tol)


def test_statuses(backend):
    blow = "field blow {\n state x\n dx/dt = x * x\n solve dopri5(t1 = 2)\n}"
    with pytest.warns(vgpu.StatusWarning):
        a, b = both(blow, np.array([1.0, -1.0]), dtype="float64", backend=backend)
    assert b.status.tolist() == a.status.tolist() == [3, 0]
    np.testing.assert_allclose(b.t, a.t, rtol=1e-14)
    src = LORENZ.replace("METHOD", "dopri5")
    h0 = np.tile([1.0, 0.0, 0.0], (3, 1))
    with pytest.warns(vgpu.StatusWarning, match="reached max_steps"):
        a, b = both(src, h0, dtype="float64", max_steps=4, save_at=[0.0, 0.5, 1.0],
                    backend=backend)
    assert b.status.tolist() == [2, 2, 2] and b.steps_taken.tolist() == [4, 4, 4]
    # (not bit for bit: an embedded error estimate cancels ~8 digits, so one ulp in a
    # stage, or in the controller's root, moves the next step by ~1e-11)
    np.testing.assert_allclose(b.t, a.t, rtol=1e-9)
    np.testing.assert_array_equal(b.history[-1], b.states)     # repeats its last state
    b = vgpu.solve(src, h0, backend=backend, dtype="float64", t1=0.0, save_at=[0.0])
    assert b.steps_taken.tolist() == [0, 0, 0] and b.status.tolist() == [0, 0, 0]
    np.testing.assert_array_equal(b.history[0], h0)


@pytest.mark.filterwarnings("ignore::vgpu.StatusWarning")
def test_call_time_values_are_uniforms(backend):
    src = LORENZ.replace("METHOD", "tsit5")
    h0 = np.tile([1.0, 0.0, 0.0], (8, 1))
    vgpu.solve(src, h0, backend=backend, dtype="float64")
    # a call with save_at runs the kernel's variant that writes saved states, compiled
    # once (adaptive_host.kernel_field): other save times do not compile again
    vgpu.solve(src, h0, backend=backend, dtype="float64", save_at=[0.25])
    before = vgpu.cache_stats()["compiles"]
    runs = [dict(rtol=1e-6), dict(atol=1e-4, t1=0.5), dict(dt0=1e-3, dtmax=0.05),
            dict(max_steps=7), dict(t0=0.25, save_at=[0.5, 1.0])]
    for kw in runs:
        a, b = both(src, h0, dtype="float64", backend=backend, **kw)
        np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
        np.testing.assert_allclose(b.states, a.states, rtol=1e-6, atol=1e-6)
        assert b.t.tolist() == a.t.tolist() or kw.get("max_steps")
    assert vgpu.cache_stats()["compiles"] == before


def test_paced_dispatches_and_chunks_change_nothing(glsl, monkeypatch):
    src = LORENZ.replace("METHOD", "dopri5")
    n = 300
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    rho = np.linspace(0, 21, n)
    whole = vgpu.solve(src, h0, params={"rho": rho}, backend="glsl", dtype="float64",
                       save_at=[0.5])
    monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
    monkeypatch.setattr(pacing, "TARGET_SECONDS", 1e-9)  # one attempt each
    before = vgpu.cache_stats()["dispatches"]
    with limits(max_block=4096, work_per_dispatch=1):     # (first dispatch: 1 attempt)
        split = vgpu.solve(src, h0, params={"rho": rho}, backend="glsl", dtype="float64",
                           save_at=[0.5])
    # one attempt per dispatch, two chunks: at least the most attempts of each chunk
    assert (vgpu.cache_stats()["dispatches"] - before
            >= whole.steps_taken.max() + whole.steps_taken.min())
    np.testing.assert_array_equal(split.states, whole.states)
    np.testing.assert_array_equal(split.history, whole.history)
    np.testing.assert_array_equal(split.steps_taken, whole.steps_taken)


def test_a_history_larger_than_a_storage_block_runs_in_chunks(glsl, monkeypatch):
    """The chunks hold as many trajectories as their save_at history lets one block
    hold (here 6 of 300); one trajectory's history past a block is refused, and auto
    runs it on the reference."""
    monkeypatch.setenv("VGPU_NO_CPU", "1")      # (auto would run it on cpu first)
    src = LORENZ.replace("METHOD", "dopri5")
    h0 = np.tile([1.0, 0.0, 0.0], (300, 1))
    times = np.linspace(0, 1, 50)               # 50 x 3 x 8 bytes a trajectory
    whole = vgpu.solve(src, h0, backend="glsl", dtype="float64", save_at=times)
    with limits(max_block=8192):
        split = vgpu.solve(src, h0, backend="glsl", dtype="float64", save_at=times)
    np.testing.assert_array_equal(split.history, whole.history)
    np.testing.assert_array_equal(split.states, whole.states)
    ref = vgpu.solve(src, h0, backend="numpy", dtype="float64", save_at=times)
    np.testing.assert_allclose(split.history, ref.history, rtol=1e-9, atol=1e-12)
    times = np.linspace(0, 1, 400)              # 9600 bytes: one trajectory is too many
    with limits(max_block=8192):
        with pytest.raises(vgpu.BackendError, match="history of one trajectory \\(400 "
                                                    "save_at times x 3 states\\)"):
            vgpu.solve(src, h0, backend="glsl", dtype="float64", save_at=times)
        auto = vgpu.solve(src, h0, dtype="float64", save_at=times)
    ref = vgpu.solve(src, h0, backend="numpy", dtype="float64", save_at=times)
    np.testing.assert_array_equal(auto.history, ref.history)


@pytest.mark.parametrize("src", ["basin", "collapse"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["tree", "serial"])
def test_adaptive_shaders_validate(src, dtype, reduction, tmp_path):
    exe = find_validator()
    text = BASIN if src == "basin" else COLLAPSE.replace("METHOD", "tsit5(t1 = 1)")
    field = vgpu.compile(text).select(None)
    f = tmp_path / "kernel.comp"
    f.write_text(emit_glsl(field, dtype=dtype, reduction=reduction))
    run = subprocess.run([exe, "-S", "comp", str(f)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


COLLAPSE = """
field c {
    param k = 1.0
    basin b < 2
    state x
    dx/dt = -k * x
    collapse when x < 0.5 and t > 0.1 and step > 1
    solve METHOD
}"""


@pytest.mark.parametrize("method, kw", [
    ("dopri5(t1 = 5)", {}),
    ("tsit5(t1 = 5, rtol = 1e-8)", dict(save_at=[0.0, 0.5, 1.0, 4.0])),
    ("rk4(dt = 0.1, steps = 50)", dict(save_at=[0.0, 0.5, 1.0, 4.0]))])
def test_collapse_with_adaptive_methods_and_save_at(backend, method, kw):
    """A basin collapses after the accepted step where all its active lanes hold the
    condition (the last basin has one idle lane); later save_at times repeat the end."""
    k = np.array([1.0, 1.5, 3.0, 0.5, 2.0])
    a, b = both(COLLAPSE.replace("METHOD", method), np.ones(5), params={"k": k},
                dtype="float64", backend=backend, **kw)
    np.testing.assert_array_equal(b.steps_taken, a.steps_taken)
    assert b.steps_taken[0] == b.steps_taken[1] and b.steps_taken[2] == b.steps_taken[3]
    np.testing.assert_allclose(b.t, a.t, rtol=1e-9)     # (see test_statuses_on_glsl)
    np.testing.assert_allclose(b.states, a.states, rtol=1e-9, atol=1e-12)
    assert (b.status == 0).all() and (b.t < 5.0).all()
    if kw:
        np.testing.assert_allclose(b.history, a.history, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(b.history[-1], b.states)



def test_start_expressions_init_and_basin_indices(backend):
    src = """
    field pair {
        param k
        grid i < N
        basin b < 2
        state x, v = x * 0.5
        coupled xc = x
        dx/dt = -k * x + 0.01 * mean(xc) + v
        dv/dt = -v + 0.1 * init(x) + 0.001 * float(b)
        solve tsit5(t1 = 2, rtol = 1e-8, atol = 1e-10)
    }"""
    n = 9
    k = np.logspace(-1, 2, n)
    a, b = both(src, np.ones(n), params={"k": k}, dtype="float64", save_at=[0.0, 1.0, 2.0],
                backend=backend)
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    np.testing.assert_allclose(b.states, a.states, rtol=1e-7, atol=1e-9)    # (tolerance 1e-8)
    np.testing.assert_allclose(b.history, a.history, rtol=1e-7, atol=1e-9)


FIXED = """
field vdp {
    param mu = 1.0
    grid i < N
    basin b < 2
    output tot[1]
    state x, y
    coupled xc = x
    dx/dt = y + 0.001 * mean(xc)
    dy/dt = mu * (1 - x^2) * y - x + 0 * dt + 0.0001 * float(step % 3)
    solve METHOD(dt = 0.01, steps = 300)
    flux tot[0] += x * t
}
"""


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun", "rk4"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fixed_step_save_at(backend, method, dtype):
    """A fixed-step method with save_at runs the same steps (the states bit for bit as the
    fixed-step kernel's and the reference's) and the cubic Hermite values of the reference."""
    src = FIXED.replace("METHOD", method)
    mu, h0 = np.array([0.5, 2.0, 3.0]), np.tile([2.0, 0.0], (3, 1))
    times = np.array([0.0, 0.005, 0.123, 1.0, 2.2222, 2.999, 3.0])
    a, b = both(src, h0, params={"mu": mu}, dtype=dtype, save_at=times, backend=backend)
    plain = vgpu.solve(src, h0, params={"mu": mu}, backend=backend, dtype=dtype)
    np.testing.assert_array_equal(b.states, a.states)
    np.testing.assert_array_equal(b.states, plain.states)
    tol = 1e-13 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(b.history, a.history, rtol=tol, atol=tol)
    np.testing.assert_allclose(b.outputs["tot"], plain.outputs["tot"], rtol=tol)
    assert b.steps_taken.tolist() == [300] * 3 and b.status.tolist() == [0] * 3
    np.testing.assert_array_equal(b.t, a.t)
    zero = vgpu.solve(src, h0, params={"mu": mu}, backend=backend, dtype=dtype, steps=0,
                      save_at=[0.0])
    np.testing.assert_array_equal(zero.history[0], h0.astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fixed_step_save_at_shader_validates(dtype, tmp_path):
    import dataclasses
    exe = find_validator()
    field = vgpu.compile(FIXED.replace("METHOD", "rk4")).select(None)
    field = dataclasses.replace(field, solver=dataclasses.replace(field.solver, dense=True))
    f = tmp_path / "kernel.comp"
    f.write_text(emit_glsl(field, dtype=dtype))
    run = subprocess.run([exe, "-S", "comp", str(f)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
