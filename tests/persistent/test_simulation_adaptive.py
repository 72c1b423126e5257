"""vgpu.Simulation of an adaptive method (bs3, dopri5, tsit5), on every finished backend.

Its steps are those of one ``solve`` to t1: advancing in pieces to t1 gives bit for bit
what one solve gives (states, t, status, steps taken and rejected); the states at each
``until`` are bit for bit those of ``solve(save_at=...)``; a checkpoint part way resumes
bit for bit; the intermediate states agree with scipy's DOP853; ``steps=``, a time
after t1 or before the current one, and changing a running adaptive simulation are
errors."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import CallError, StatusWarning

scipy_ivp = pytest.importorskip("scipy.integrate")

METHODS = ("bs3", "dopri5", "tsit5")
FINISHED = ("numpy", "glsl", "cpu", "wgpu")

VDP = """
field vdp {
    param mu = 1.0
    state x, y
    dx/dt = y
    dy/dt = mu * (1 - x^2) * y - x
    solve METHOD(t1 = 6)
}
"""

BASIN = """
field pair {
    param k = 1.0
    grid i < N
    basin l < 4
    state x, y
    coupled s = x
    dx/dt = -k * x + 0.2 * mean(s) + y
    dy/dt = -x
    solve METHOD(t1 = 3, rtol = 1e-4)
}
"""


@pytest.fixture(params=FINISHED)
def backend(request):
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def _vdp(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)) * 2, np.linspace(0.3, 4.0, n)


def _same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype,
                                                        b.dtype)
    assert np.array_equal(a, b, equal_nan=True), (what, np.abs(a - b).max())


def _check_end(sim, sol):
    _same(sim.states, sol.states, "states")
    _same(sim.t, sol.t, "t")
    _same(sim.status, sol.status, "status")
    _same(sim.steps_taken, sol.steps_taken, "steps_taken")
    _same(sim.steps_rejected, sol.steps_rejected, "steps_rejected")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pieces", [(6.0,), (1.5, 6.0), (0.7, 2.0, 2.0, 6.0),
                                    (0.25, 0.3, 0.31, 4.4)])
def test_pieces_are_one_solve(backend, method, dtype, pieces):
    src = VDP.replace("METHOD", method)
    h0, mu = _vdp()
    sol = vgpu.solve(src, h0, params={"mu": mu}, backend=backend, dtype=dtype,
                     save_at=list(pieces))
    sim = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend, dtype=dtype)
    assert sim.backend == backend and sim.until == 0.0
    for j, u in enumerate(pieces):
        assert sim.advance(until=u) is sim
        _same(sim.states, sol.history[j], f"states at {u}")
        assert sim.until == float(np.dtype(dtype).type(u))     # (in the working dtype)
        running = sim.status == 0
        if u < 6.0:
            assert running.all()
            np.testing.assert_array_equal(sim.t, np.full(mu.shape, u, dtype))
        assert (sim.steps_taken <= sol.steps_taken).all()
    if pieces[-1] == 6.0:
        _check_end(sim, sol)
        assert sim.steps_taken.min() > 5       # (the steps are the solver's own)
    else:
        sim.advance(until=6.0)
        _check_end(sim, vgpu.solve(src, h0, params={"mu": mu}, backend=backend,
                                   dtype=dtype))


@pytest.mark.parametrize("method", METHODS)
def test_many_times_inside_one_step(backend, method):
    """Times closer together than the steps: each is read from the one step covering it
    (the step is taken again, with the same result, after each)."""
    src = VDP.replace("METHOD", method)
    h0, mu = _vdp(12)
    times = np.linspace(0.0, 6.0, 151)
    sol = vgpu.solve(src, h0, params={"mu": mu}, backend=backend, save_at=times)
    sim = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend)
    assert (sol.steps_taken < 100).all()      # many times share a step
    for j, u in enumerate(times):
        sim.advance(until=u)
        _same(sim.states, sol.history[j], f"states at {u}")
    _check_end(sim, sol)


@pytest.mark.parametrize("method", ["dopri5", "bs3"])
def test_basin_pieces_are_one_solve(backend, method):
    src = BASIN.replace("METHOD", method)
    n = 10                                      # (a basin of 4: the last one half idle)
    h0 = np.random.default_rng(3).normal(size=(n, 2)).astype(np.float32)
    k = np.linspace(0.5, 2.0, n).astype(np.float32)
    times = [0.4, 1.0, 2.5, 3.0]
    sol = vgpu.solve(src, h0, params={"k": k}, dims={"N": n}, backend=backend,
                     save_at=times)
    sim = vgpu.Simulation(src, h0, params={"k": k}, dims={"N": n}, backend=backend)
    for j, u in enumerate(times):
        sim.advance(until=u)
        _same(sim.states, sol.history[j], f"states at {u}")
    _check_end(sim, sol)
    assert len(set(sol.steps_taken[:4])) == 1      # a basin steps as one


def test_max_steps_and_the_time_a_trajectory_ended(backend):
    src = VDP.replace("METHOD", "dopri5")
    h0, mu = _vdp(8)
    mu[:4], mu[4:] = 40.0, 0.5                  # stiff: more steps than max_steps
    kw = dict(params={"mu": mu}, backend=backend, rtol=1e-6, atol=1e-6, max_steps=60)
    with pytest.warns(StatusWarning, match="4 reached max_steps"):
        sol = vgpu.solve(src, h0, save_at=[3.0], **kw)
    assert (sol.status[:4] == 2).all() and (sol.status[4:] == 0).all()
    sim = vgpu.Simulation(src, h0, **kw)
    sim.advance(until=3.0)
    _same(sim.states, sol.history[0], "states")
    stopped = sim.status == 2
    assert stopped.any()
    _same(stopped, (sol.status == 2) & (sol.t < 3.0), "stopped by t = 3")
    _same(sim.t[stopped], sol.t[stopped], "t of the stopped")
    assert (sim.t[stopped] < 3.0).all() and (sim.t[~stopped] == 3.0).all()
    sim.advance(until=6.0)
    _check_end(sim, sol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checkpoint_resumes_bit_for_bit(backend, dtype, tmp_path):
    src = VDP.replace("METHOD", "tsit5")
    h0, mu = _vdp(30)
    kw = dict(params={"mu": mu}, backend=backend, dtype=dtype, rtol=1e-5, t1=5.0)
    times = [1.3, 3.1, 3.2, 5.0]
    sol = vgpu.solve(src, h0, save_at=times, **kw)
    sim = vgpu.Simulation(src, h0, **kw)
    sim.advance(until=1.3)
    path = tmp_path / "run.npz"
    sim.save(path)
    sim.advance(until=3.1)                      # the saved run's future, run here
    back = vgpu.Simulation.load(path)
    assert back.backend == backend and back.until == float(np.dtype(dtype).type(1.3))
    _same(back.states, sol.history[0], "states after load")
    for j, u in list(enumerate(times))[1:]:
        back.advance(until=u)
        _same(back.states, sol.history[j], f"resumed states at {u}")
    _check_end(back, sol)
    with pytest.raises(CallError):
        back.advance(until=5.5)                 # past t1 = 5 (the checkpoint's)


@pytest.mark.parametrize("backend", [b for b in FINISHED if b != "wgpu"])
@pytest.mark.parametrize("method", METHODS)
def test_intermediate_states_match_scipy(backend, method, request):
    if backend != "numpy":
        request.getfixturevalue(backend)
    src = VDP.replace("METHOD", method)
    mu = np.array([0.2, 1.0, 3.0])
    h0 = np.tile([2.0, 0.0], (3, 1))
    tol = 1e-8
    sim = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend, dtype="float64",
                          rtol=tol, atol=tol)
    times = [0.9, 2.2, 2.3, 4.75, 6.0]
    for u in times:
        sim.advance(until=u)
        for i, m in enumerate(mu):
            r = scipy_ivp.solve_ivp(lambda t, y, m=m: [y[1], m * (1 - y[0] ** 2) * y[1] - y[0]],
                                    (0.0, u), h0[i], method="DOP853", rtol=1e-12, atol=1e-12)
            want = r.y[:, -1]
            err = np.abs(sim.states[i] - want) / (tol + tol * np.abs(want))
            assert err.max() < 20, (method, u, m, err)    # (about 5 here)


def test_errors(backend):
    src = VDP.replace("METHOD", "dopri5")
    h0, mu = _vdp(4)
    sim = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend)
    with pytest.raises(CallError, match="until"):
        sim.advance(steps=10)
    with pytest.raises(CallError, match="until"):
        sim.advance()
    with pytest.raises(CallError, match="after t1"):
        sim.advance(until=6.5)
    sim.advance(until=2.0)
    with pytest.raises(CallError, match="before"):
        sim.advance(until=1.0)
    for change in (lambda: sim.set_state(sim.states), lambda: sim.set_params(mu=2.0)):
        with pytest.raises(CallError, match="adaptive"):
            change()
    with pytest.raises(CallError, match="steps_taken"):
        sim.step
    assert sim.until == 2.0 and (sim.t == np.float32(2.0)).all()   # nothing changed
    fixed = VDP.replace("METHOD(t1 = 6)", "rk4(dt = 0.1, steps = 3)")
    with pytest.raises(CallError, match="adaptive"):
        vgpu.Simulation(fixed, h0, params={"mu": mu}, t1=3.0, backend=backend)


def test_start_and_no_steps(backend):
    """until = t0: the start; t1 = t0: every trajectory has ended there."""
    src = VDP.replace("METHOD", "bs3")
    h0, mu = _vdp(5)
    sim = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend)
    sim.advance(until=0.0)
    _same(sim.states, h0.astype(np.float32), "states at t0")
    assert (sim.steps_taken == 0).all() and (sim.status == 0).all()
    flat = vgpu.Simulation(src, h0, params={"mu": mu}, backend=backend, t1=0.0)
    flat.advance(until=0.0)
    _check_end(flat, vgpu.solve(src, h0, params={"mu": mu}, backend=backend, t1=0.0))


FLUX = """
field decayh {
    param k = 1.0
    output H[4]
    state x
    dx/dt = -k * x
    solve dopri5(t1 = 2)
    flux H[clamp(int(x * 4), 0, 3)] += 1 + x
}
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_outputs_once_every_trajectory_has_ended(backend, dtype, tmp_path):
    h0 = np.linspace(0.1, 3.9, 25)
    k = np.linspace(0.2, 1.5, 25)
    sol = vgpu.solve(FLUX, h0, params={"k": k}, backend=backend, dtype=dtype)
    sim = vgpu.Simulation(FLUX, h0, params={"k": k}, backend=backend, dtype=dtype)
    sim.advance(until=1.0)
    with pytest.raises(CallError, match="once every one has"):
        sim.outputs
    sim.save(tmp_path / "half.npz")
    sim.advance(until=2.0)
    _same(sim.outputs["H"], sol.outputs["H"], "outputs")
    assert sim.outputs["H"].sum() > 25            # every trajectory deposited
    _same(sim.solution().outputs["H"], sol.outputs["H"], "solution().outputs")
    back = vgpu.Simulation.load(tmp_path / "half.npz")   # every one was running then
    back.advance(until=2.0)
    _same(back.outputs["H"], sol.outputs["H"], "outputs after a checkpoint")


@pytest.mark.parametrize("backend", [b for b in FINISHED if b not in ("numpy", "wgpu")])
def test_a_checkpoint_is_backend_neutral(backend, request, tmp_path):
    """The reference's checkpoint resumes on a compiled backend (float64: the same
    steps here, the states within rounding)."""
    request.getfixturevalue(backend)
    src = VDP.replace("METHOD", "dopri5")
    h0, mu = _vdp(6)
    kw = dict(params={"mu": mu}, dtype="float64", rtol=1e-7, atol=1e-7)
    ref = vgpu.Simulation(src, h0, backend="numpy", **kw).advance(until=2.0)
    ref.save(tmp_path / "ref.npz")
    there = vgpu.Simulation.load(tmp_path / "ref.npz", backend=backend)
    assert there.backend == backend
    _same(there.states, ref.states, "states after load")
    _same(there.steps_taken, ref.steps_taken, "steps after load")
    there.advance(until=6.0)
    ref.advance(until=6.0)
    np.testing.assert_allclose(there.states, ref.states, rtol=1e-9, atol=1e-12)
    assert (np.abs(there.steps_taken - ref.steps_taken) <= 1).all()
    assert (there.status == 0).all() and (there.t == 6.0).all()
