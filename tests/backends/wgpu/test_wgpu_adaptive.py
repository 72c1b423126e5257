"""The WGSL adaptive kernel (templates/adaptive.wgsl.j2) on wgpu against the numpy
reference (the oracle), in float32 (WGSL has no float64): accepted and rejected step
counts, states, save_at values, statuses, t, basins sharing one step size, collapse,
flux, paced dispatches that resume, chunks, uniforms that never recompile, and
fixed-step methods with save_at. The programs are test_glsl_adaptive.py's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vgpu
from test_glsl_adaptive import BASIN, COLLAPSE, FIXED, LORENZ
from vgpu_compiler.backends.wgpu import adaptive_run, emit_wgsl
from vgpu_compiler.backends.wgpu import runner as wgpu_runner

TOL = dict(rtol=1e-5, atol=1e-5)    # float32's floor (test_glsl_adaptive: float32)


def both(src, *args, **kwargs):
    a = vgpu.solve(src, *args, backend="numpy", dtype="float32", **kwargs)
    b = vgpu.solve(src, *args, backend="wgpu", dtype="float32", **kwargs)
    return a, b


def lorenz_sweep(n):
    return np.tile([1.0, 0.0, 0.0], (n, 1)), np.linspace(0, 21, n)


@pytest.mark.parametrize("method", ["bs3", "dopri5", "tsit5"])
def test_lorenz_sweep_matches_the_reference_and_scipy(wgpu, method):
    solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp
    h0, rho = lorenz_sweep(64)
    times = np.linspace(0, 1, 9)
    a, b = both(LORENZ.replace("METHOD", method), h0, params={"rho": rho}, save_at=times,
                **TOL)
    assert b.states.dtype == np.float32
    assert (a.steps_taken == b.steps_taken).mean() >= 0.9
    assert np.abs(a.steps_taken - b.steps_taken).max() <= 2
    assert (a.steps_rejected == b.steps_rejected).mean() >= 0.9
    np.testing.assert_array_equal(b.status, 0)
    np.testing.assert_array_equal(b.t, np.float32(1.0))
    np.testing.assert_array_equal(b.times, times.astype(np.float32))
    for i in (0, 20, 63):
        r = solve_ivp(lambda t, y, r=rho[i]: [10 * (y[1] - y[0]), y[0] * (r - y[2]) - y[1],
                                              y[0] * y[1] - 8 / 3 * y[2]],
                      (0, 1), h0[i], method="DOP853", rtol=1e-12, atol=1e-12, t_eval=times)
        scale = 1 + np.abs(r.y).max()
        assert np.abs(b.history[:, i] - r.y.T).max() < 1e-3 * scale
        assert np.abs(b.states[i] - r.y[:, -1]).max() < 1e-3 * scale
    assert np.abs(a.history - b.history).max() < 1e-3 * (1 + np.abs(a.history).max())


def test_basin_shares_a_step_with_coupling_inputs_flux_t_and_dt(wgpu):
    n = 10
    k = np.linspace(0.1, 20, n)
    w = np.linspace(-1, 1, n)
    a, b = both(BASIN, np.ones(n), params={"k": k}, inputs={"w": w}, save_at=[0.0, 0.3, 1.0])
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    assert len(set(b.steps_taken[:4])) == 1 and len(set(b.steps_taken[4:8])) == 1
    assert len(set(b.steps_taken[:8])) > 1          # the basins chose their own steps
    np.testing.assert_allclose(b.states, a.states, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.history, a.history, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.outputs["tot"], a.outputs["tot"], rtol=1e-4)


@pytest.mark.parametrize("reduction", ["tree", "serial"])
def test_a_basin_under_either_reduction(wgpu, reduction, monkeypatch):
    monkeypatch.setenv("VGPU_REDUCTION", reduction)
    n = 10
    k = np.linspace(0.1, 20, n)
    w = np.linspace(-1, 1, n)
    a, b = both(BASIN, np.ones(n), params={"k": k}, inputs={"w": w})
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    np.testing.assert_allclose(b.states, a.states, rtol=1e-5, atol=1e-5)


def test_statuses_t_and_a_stopped_trajectorys_history(wgpu):
    blow = "field blow {\n state x\n dx/dt = x * x\n solve dopri5(t1 = 2)\n}"
    with pytest.warns(vgpu.StatusWarning):
        a, b = both(blow, np.array([1.0, -1.0]))
    assert b.status.tolist() == a.status.tolist() == [3, 0]
    np.testing.assert_allclose(b.t, a.t, rtol=1e-5)
    src = LORENZ.replace("METHOD", "dopri5")
    h0 = np.tile([1.0, 0.0, 0.0], (3, 1))
    with pytest.warns(vgpu.StatusWarning, match="reached max_steps"):
        a, b = both(src, h0, max_steps=4, save_at=[0.0, 0.5, 1.0], **TOL)
    assert b.status.tolist() == [2, 2, 2] and b.steps_taken.tolist() == [4, 4, 4]
    np.testing.assert_allclose(b.t, a.t, rtol=1e-5)
    np.testing.assert_array_equal(b.history[-1], b.states)     # repeats its last state
    b = vgpu.solve(src, h0, backend="wgpu", t1=0.0, save_at=[0.0])
    assert b.steps_taken.tolist() == [0, 0, 0] and b.status.tolist() == [0, 0, 0]
    np.testing.assert_array_equal(b.history[0], h0.astype(np.float32))


@pytest.mark.filterwarnings("ignore::vgpu.StatusWarning")
def test_call_time_values_are_uniforms(wgpu):
    src = LORENZ.replace("METHOD", "tsit5")
    h0 = np.tile([1.0, 0.0, 0.0], (8, 1))
    vgpu.solve(src, h0, backend="wgpu")
    # save_at runs the kernel's variant that writes saved states, compiled once
    vgpu.solve(src, h0, backend="wgpu", save_at=[0.25], **TOL)
    before = vgpu.cache_stats()["compiles"]
    runs = [dict(rtol=1e-4, atol=1e-5), dict(atol=1e-4, rtol=1e-5, t1=0.5),
            dict(dt0=1e-3, dtmax=0.05, **TOL), dict(max_steps=7, **TOL),
            dict(t0=0.25, save_at=[0.5, 1.0], **TOL)]
    for kw in runs:
        a, b = both(src, h0, **kw)
        assert np.abs(a.steps_taken - b.steps_taken).max() <= 1, kw
        np.testing.assert_allclose(b.states, a.states, rtol=1e-3, atol=1e-3)
        # (stopped by max_steps, t is the sum of 7 steps, each from a float32 error
        # estimate that cancels most digits: a step moves by ~1e-4)
        np.testing.assert_allclose(b.t, a.t, rtol=1e-3 if "max_steps" in kw else 1e-6)
    assert vgpu.cache_stats()["compiles"] == before


def test_paced_dispatches_and_chunks_change_nothing(wgpu, monkeypatch):
    src = LORENZ.replace("METHOD", "dopri5")
    h0, rho = lorenz_sweep(300)
    kw = dict(params={"rho": rho}, backend="wgpu", save_at=[0.5], **TOL)
    whole = vgpu.solve(src, h0, **kw)
    limits = dict(wgpu_runner.dev.get().limits)
    monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
    monkeypatch.setattr(wgpu_runner.dev.get(), "limits",
                        dict(limits, max_storage_buffer_binding_size=4096))
    before = vgpu.cache_stats()["dispatches"]
    # one attempt per dispatch (the first: work_per_dispatch=0)
    with wgpu_runner.limits(max_steps=1, work_per_dispatch=0):
        split = vgpu.solve(src, h0, **kw)
    # one attempt per dispatch, several chunks: at least the most attempts of each chunk
    assert (vgpu.cache_stats()["dispatches"] - before
            >= whole.steps_taken.max() + whole.steps_taken.min())
    np.testing.assert_array_equal(split.states, whole.states)
    np.testing.assert_array_equal(split.history, whole.history)
    np.testing.assert_array_equal(split.steps_taken, whole.steps_taken)
    np.testing.assert_array_equal(split.t, whole.t)


def test_progress_reports_finished_trajectories(wgpu):
    src = LORENZ.replace("METHOD", "tsit5")
    h0, rho = lorenz_sweep(16)
    seen = []
    with wgpu_runner.limits(max_steps=2):
        vgpu.solve(src, h0, params={"rho": rho}, backend="wgpu", **TOL,
                   progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (16, 16) and len(seen) >= 2
    assert all(d1 >= d0 for (d0, _), (d1, _) in zip(seen, seen[1:]))


@pytest.mark.parametrize("method, kw", [
    ("dopri5(t1 = 5)", {}),
    ("tsit5(t1 = 5, rtol = 1e-5, atol = 1e-6)", dict(save_at=[0.0, 0.5, 1.0, 4.0])),
    ("rk4(dt = 0.1, steps = 50)", dict(save_at=[0.0, 0.5, 1.0, 4.0]))])
def test_collapse_with_adaptive_methods_and_save_at(wgpu, method, kw):
    """A basin collapses after the accepted step where all its active lanes hold the
    condition (the last basin has one idle lane); later save_at times repeat the end."""
    k = np.array([1.0, 1.5, 3.0, 0.5, 2.0])
    a, b = both(COLLAPSE.replace("METHOD", method), np.ones(5), params={"k": k}, **kw)
    np.testing.assert_array_equal(b.steps_taken, a.steps_taken)
    assert b.steps_taken[0] == b.steps_taken[1] and b.steps_taken[2] == b.steps_taken[3]
    # (float32: the error estimate cancels most digits, so the steps chosen differ from
    # the reference's float32 ones by up to ~1e-3; GLSL's float32 kernel gives the same
    # t as this one)
    np.testing.assert_allclose(b.t, a.t, rtol=1e-2)
    np.testing.assert_allclose(b.states, a.states, rtol=1e-2, atol=1e-4)
    assert (b.status == 0).all() and (b.t < 5.0).all()
    if kw:
        np.testing.assert_allclose(b.history, a.history, rtol=1e-2, atol=1e-4)
        np.testing.assert_array_equal(b.history[-1], b.states)


def test_start_expressions_init_and_basin_indices(wgpu):
    src = """
    field pair {
        param k
        grid i < N
        basin b < 2
        state x, v = x * 0.5
        coupled xc = x
        dx/dt = -k * x + 0.01 * mean(xc) + v
        dv/dt = -v + 0.1 * init(x) + 0.001 * float(b)
        solve tsit5(t1 = 2, rtol = 1e-5, atol = 1e-6)
    }"""
    n = 9
    k = np.logspace(-1, 2, n)
    a, b = both(src, np.ones(n), params={"k": k}, save_at=[0.0, 1.0, 2.0])
    assert np.abs(a.steps_taken - b.steps_taken).max() <= 1         # (float32 steps)
    assert b.steps_taken[0] == b.steps_taken[1] and b.steps_taken[6] == b.steps_taken[7]
    np.testing.assert_allclose(b.states, a.states, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.history, a.history, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["euler", "midpoint", "heun", "rk4"])
def test_fixed_step_save_at(wgpu, method):
    """A fixed-step method with save_at runs the same steps (the states as the fixed-step
    kernel's and the reference's) and the cubic Hermite values of the reference."""
    src = FIXED.replace("METHOD", method)
    mu, h0 = np.array([0.5, 2.0, 3.0]), np.tile([2.0, 0.0], (3, 1))
    times = np.array([0.0, 0.005, 0.123, 1.0, 2.2222, 2.999, 3.0])
    a, b = both(src, h0, params={"mu": mu}, save_at=times)
    plain = vgpu.solve(src, h0, params={"mu": mu}, backend="wgpu")
    np.testing.assert_allclose(b.states, a.states, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(b.states, plain.states)
    np.testing.assert_allclose(b.history, a.history, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.outputs["tot"], plain.outputs["tot"], rtol=1e-6)
    assert b.steps_taken.tolist() == [300] * 3 and b.status.tolist() == [0] * 3
    np.testing.assert_array_equal(b.t, a.t)
    zero = vgpu.solve(src, h0, params={"mu": mu}, backend="wgpu", steps=0, save_at=[0.0])
    np.testing.assert_array_equal(zero.history[0], h0.astype(np.float32))


@pytest.mark.parametrize("src", ["basin", "collapse", "fixed"])
@pytest.mark.parametrize("reduction", ["tree", "serial"])
def test_adaptive_shaders_validate_with_naga(wgpu, src, reduction):
    from vgpu_compiler.backends.wgpu import device
    text = {"basin": BASIN, "collapse": COLLAPSE.replace("METHOD", "tsit5(t1 = 1)"),
            "fixed": FIXED.replace("METHOD", "rk4")}[src]
    field = vgpu.compile(text).select(None)
    if src == "fixed":
        field = dataclasses.replace(field, solver=dataclasses.replace(field.solver, dense=True))
    wgsl = emit_wgsl(field, reduction=reduction)
    assert "workgroupUniformLoad" in wgsl or src == "fixed"
    device.get().device.create_shader_module(code=wgsl)     # raises on any WGSL error


def test_a_save_at_kernel_is_keyed_apart_from_the_plain_one(wgpu):
    src = FIXED.replace("METHOD", "rk4")
    mu, h0 = np.array([0.5, 2.0]), np.tile([2.0, 0.0], (2, 1))
    plain = vgpu.solve(src, h0, params={"mu": mu}, backend="wgpu")
    saved = vgpu.solve(src, h0, params={"mu": mu}, backend="wgpu", save_at=[1.0])
    again = vgpu.solve(src, h0, params={"mu": mu}, backend="wgpu")
    assert saved.history.shape == (1, 2, 2)
    np.testing.assert_array_equal(again.states, plain.states)
    np.testing.assert_array_equal(saved.states, plain.states)
