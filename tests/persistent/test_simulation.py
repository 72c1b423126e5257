"""vgpu.Simulation: a fixed-step run kept alive between calls, on every backend.

Advancing in pieces gives bit for bit what one run of the total gives (plain, noisy,
and a field with a basin, coupled values, init(x), collapse and flux); a checkpoint
resumes bit for bit; set_params takes effect at the next step; set_state replaces the
state; two threads may share a simulation."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import vgpu

from conftest import COMPILED_BACKENDS

LORENZ = open("examples/lorenz.field").read()
OU = open("examples/ou.field").read()
BASIN = """
field shrink {
    param k = 1.0
    output H[4]
    grid i < N
    basin l < 8
    state x, y = 0
    coupled s = x
    dx/dt = -k * x + 0.1 * mean(s)
    dy/dt = x - init(x) + t
    collapse when x < 0.9
    solve rk4(dt = 0.05, steps = 40)
    flux H[clamp(int(x * 4), 0, 3)] += 1 + step
}
"""


@pytest.fixture(params=("numpy",) + COMPILED_BACKENDS)
def backend(request):
    """Every backend in the registry (a compiled one's own fixture decides skip or fail)."""
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def _h0(n, k=3, seed=0):
    return np.random.default_rng(seed).normal(size=(n, k)).astype(np.float32)


def _pieces(sim, pieces):
    for p in pieces:
        sim.advance(steps=p)
    return sim


@pytest.mark.parametrize("pieces", [(7, 0, 13, 1), (21,)])
def test_advance_in_pieces_is_one_run(backend, pieces):
    h0 = _h0(300)
    whole = vgpu.run_field(LORENZ, h0, backend=backend, steps=sum(pieces))
    sim = _pieces(vgpu.Simulation(LORENZ, h0, backend=backend), pieces)
    assert sim.backend == backend and sim.step == sum(pieces)
    np.testing.assert_array_equal(sim.states, whole)
    np.testing.assert_array_equal(sim.t, np.float32(0.01) * np.float32(sum(pieces)))


def test_noise_in_pieces_is_one_run(backend):
    h0 = np.linspace(-1, 2, 257).astype(np.float32)
    whole = vgpu.run_field(OU, h0, backend=backend, steps=30, seed=7)
    sim = _pieces(vgpu.Simulation(OU, h0, backend=backend, seed=7), (10, 3, 17))
    np.testing.assert_array_equal(sim.states, whole)
    other = _pieces(vgpu.Simulation(OU, h0, backend=backend, seed=8), (30,))
    assert not np.array_equal(other.states, whole)          # the seed is the noise's key


def test_basin_collapse_flux_in_pieces(backend):
    h0 = np.linspace(0.5, 3, 20).astype(np.float32)
    params = {"k": np.linspace(0.2, 2, 20).astype(np.float32)}
    whole = vgpu.solve(BASIN, h0, backend=backend, params=params, dims={"N": 20}, steps=25)
    sim = vgpu.Simulation(BASIN, h0, backend=backend, params=params, dims={"N": 20})
    _pieces(sim, (4, 11, 10))
    np.testing.assert_array_equal(sim.states, whole.states)
    np.testing.assert_array_equal(sim.steps_taken, whole.steps_taken)
    np.testing.assert_array_equal(sim.outputs["H"], whole.outputs["H"])
    np.testing.assert_array_equal(sim.t, whole.t)
    assert len(np.unique(whole.steps_taken)) > 1     # basins collapsed inside a piece


def test_start_values_and_zero_steps(backend):
    h0 = np.linspace(0.5, 3, 20).astype(np.float32)
    sim = vgpu.Simulation(BASIN, h0, backend=backend, dims={"N": 20})
    zero = vgpu.solve(BASIN, h0, backend=backend, dims={"N": 20}, steps=0)
    np.testing.assert_array_equal(sim.states, zero.states)
    np.testing.assert_array_equal(sim.outputs["H"], zero.outputs["H"])
    sim.advance()                                    # the solve statement's steps
    np.testing.assert_array_equal(
        sim.states, vgpu.run_field(BASIN, h0, backend=backend, dims={"N": 20}))


@pytest.mark.parametrize("dtype", ["float64"])     # (deselected on wgpu: no float64)
def test_float64_with_flux(backend, dtype):
    h0 = np.linspace(0.5, 3, 20)
    whole = vgpu.solve(BASIN, h0, backend=backend, dims={"N": 20}, steps=30, dtype=dtype)
    sim = vgpu.Simulation(BASIN, h0, backend=backend, dims={"N": 20}, dtype=dtype)
    _pieces(sim, (12, 18))
    np.testing.assert_array_equal(sim.states, whole.states)
    np.testing.assert_array_equal(sim.outputs["H"], whole.outputs["H"])


def test_until_counts_steps(backend):
    h0 = _h0(50)
    sim = vgpu.Simulation(LORENZ, h0, backend=backend)
    sim.advance(until=0.1)
    assert sim.step == 10
    sim.advance(until=0.105)                        # the first step time at or after it
    assert sim.step == 11
    np.testing.assert_array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend=backend,
                                                             steps=11))
    with pytest.raises(vgpu.CallError, match="before"):
        sim.advance(until=0.05)


def test_checkpoint_resumes_bit_for_bit(backend, tmp_path):
    h0 = np.linspace(-1, 2, 64).astype(np.float32)
    sim = vgpu.Simulation(OU, h0, backend=backend, seed=3, params={"sigma": 0.7})
    sim.advance(9)
    sim.save(tmp_path / "run.npz")
    sim.advance(11)
    back = vgpu.Simulation.load(tmp_path / "run.npz")
    assert back.step == 9 and back.backend == backend
    back.advance(11)
    np.testing.assert_array_equal(back.states, sim.states)
    np.testing.assert_array_equal(
        back.states, vgpu.run_field(OU, h0, backend=backend, steps=20, seed=3,
                                    params={"sigma": 0.7}))


def test_checkpoint_with_collapse_and_init(backend, tmp_path):
    h0 = np.linspace(0.5, 3, 20).astype(np.float32)
    sim = vgpu.Simulation(BASIN, h0, backend=backend, dims={"N": 20})
    sim.advance(13)
    sim.save(tmp_path / "c.npz")
    back = vgpu.Simulation.load(tmp_path / "c.npz")
    np.testing.assert_array_equal(back.outputs["H"], sim.outputs["H"])
    for s in (sim, back):
        s.advance(17)
    whole = vgpu.solve(BASIN, h0, backend=backend, dims={"N": 20}, steps=30)
    for s in (sim, back):
        np.testing.assert_array_equal(s.states, whole.states)
        np.testing.assert_array_equal(s.steps_taken, whole.steps_taken)


def test_checkpoint_moves_between_backends(compiled_backend, tmp_path):
    h0 = _h0(40)
    sim = vgpu.Simulation(LORENZ, h0, backend=compiled_backend).advance(5)
    sim.save(tmp_path / "x.npz")
    back = vgpu.Simulation.load(tmp_path / "x.npz", backend="numpy").advance(5)
    assert back.backend == "numpy"
    np.testing.assert_allclose(back.states, sim.advance(5).states, rtol=1e-4, atol=1e-4)


def test_set_params_takes_effect_at_the_next_step(backend):
    h0 = _h0(64)
    sim = vgpu.Simulation(LORENZ, h0, backend=backend).advance(10)
    mid = sim.states
    sim.set_params(rho=20.0).advance(15)         # Lorenz is autonomous: a new run from mid
    np.testing.assert_array_equal(
        sim.states, vgpu.run_field(LORENZ, mid, backend=backend, steps=15,
                                   params={"rho": 20.0}))
    rho = np.linspace(10, 30, 64).astype(np.float32)
    mid = sim.states
    sim.set_params({"rho": rho}).advance(5)      # per trajectory: a new signature
    np.testing.assert_array_equal(
        sim.states, vgpu.run_field(LORENZ, mid, backend=backend, steps=5, params={"rho": rho}))
    mid = sim.states
    sim.set_params(rho=rho[::-1].copy()).advance(5)     # the same signature, new values
    np.testing.assert_array_equal(
        sim.states, vgpu.run_field(LORENZ, mid, backend=backend, steps=5,
                                   params={"rho": rho[::-1].copy()}))


def test_set_state(backend):
    h0 = _h0(32)
    sim = vgpu.Simulation(LORENZ, h0, backend=backend).advance(4)
    new = _h0(32, seed=5)
    sim.set_state(new).advance(6)
    np.testing.assert_array_equal(sim.states, vgpu.run_field(LORENZ, new, backend=backend,
                                                             steps=6))
    with pytest.raises(vgpu.CallError, match="shape"):
        sim.set_state(new[:3])
    fresh = vgpu.Simulation(BASIN, np.ones(20, np.float32), backend=backend, dims={"N": 20})
    with pytest.raises(vgpu.CallError, match="start expression"):
        fresh.set_state(np.ones((20, 2)))


def test_two_threads_are_serialised(backend):
    h0 = _h0(128)
    sim = vgpu.Simulation(LORENZ, h0, backend=backend)
    errors = []

    def work():
        try:
            for _ in range(20):
                sim.advance(1)
                sim.states
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and sim.step == 40
    np.testing.assert_array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend=backend,
                                                             steps=40))


def test_refusals():
    adaptive = vgpu.Simulation(open("examples/lorenz_tsit5.field").read(), _h0(4),
                               backend="numpy")     # (tests/persistent/test_simulation_adaptive.py)
    with pytest.raises(vgpu.CallError, match="until"):
        adaptive.advance(5)
    sim = vgpu.Simulation(LORENZ, _h0(4), backend="numpy")
    with pytest.raises(vgpu.ArgumentTypeError):
        sim.advance(-1)
    with pytest.raises(vgpu.ArgumentTypeError):
        sim.advance(1, until=2.0)
    with pytest.raises(vgpu.UnknownNameError):
        sim.set_params(nope=1.0)
    stiff = open("examples/robertson.field").read()      # rodas4: not in a Simulation yet
    with pytest.raises(vgpu.CallError, match="rodas4"):
        vgpu.Simulation(stiff, dims={"N": 4}, backend="numpy", dtype="float64")


def test_reads_are_lazy_and_kept(glsl):
    from vgpu_compiler.call.counters import COUNTERS
    sim = vgpu.Simulation(LORENZ, _h0(1000), backend="glsl")
    before = COUNTERS.snapshot()["dispatches"]
    for _ in range(5):
        sim.advance(1)
    assert COUNTERS.snapshot()["dispatches"] - before == 5      # one dispatch a step
    a = sim.states
    assert sim._cache["states"] is not None and np.array_equal(a, sim.states)


def test_glsl_chunks_and_paced_dispatches(glsl):
    """An ensemble of several chunks keeps each chunk's arrays on the host between
    dispatches; an advance longer than a dispatch's step limit is several dispatches."""
    from vgpu_compiler.backends.glsl import plan as glsl_plan
    h0 = np.linspace(0.5, 3, 40).astype(np.float32)
    with glsl_plan.limits(max_steps=3, max_block=2 * 4 * 16):     # chunks of 16 (2 basins)
        whole = vgpu.solve(BASIN, h0, backend="numpy", dims={"N": 40}, steps=25)
        sim = vgpu.Simulation(BASIN, h0, backend="glsl", dims={"N": 40})
        assert len(sim._session.plan.chunks) > 1 and not sim._session.resident
        _pieces(sim, (4, 11, 10))
        np.testing.assert_array_equal(sim.steps_taken, whole.steps_taken)
        np.testing.assert_allclose(sim.states, whole.states, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(sim.outputs["H"], whole.outputs["H"])
        glsl_whole = vgpu.run_field(BASIN, h0, backend="glsl", dims={"N": 40}, steps=25)
        np.testing.assert_array_equal(sim.states, glsl_whole)


def test_wgpu_paced_dispatches(wgpu):
    from vgpu_compiler.backends.wgpu import runner
    h0 = np.linspace(0.5, 3, 40).astype(np.float32)
    with runner.limits(max_steps=3):
        sim = _pieces(vgpu.Simulation(BASIN, h0, backend="wgpu", dims={"N": 40}), (4, 11, 10))
        whole = vgpu.solve(BASIN, h0, backend="wgpu", dims={"N": 40}, steps=25)
    np.testing.assert_array_equal(sim.states, whole.states)
    np.testing.assert_array_equal(sim.outputs["H"], whole.outputs["H"])
