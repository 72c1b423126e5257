"""What a scientist porting real models met first in the Python API, each now mended:
a sweep over a meshgrid (a batch of any shape for a field without a ``grid``
statement), states by name (``sol.state_names``, ``sol["x"]``), a tolerance the dtype
cannot meet (a ToleranceWarning before the run), float64 refusals that name the
fastest backend that can run the call, and a name given in the wrong mapping.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends as registry
from vgpu_compiler.backends import Backend
from vgpu_compiler.backends.shader.dialect import float64_error
from vgpu_compiler.backends.wgpu import check_dtype
from vgpu_compiler.call.tolerance import rtol_floor

BACKENDS = ("numpy", "cpu", "glsl", "wgpu")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Every backend (a compiled one's own fixture decides skip or fail)."""
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


# An SIR model: three free states, two params (the sweep), an adaptive method.
SIR = """
field sir {
    param beta
    param gamma = 0.1
    state S, I, R
    dS/dt = -beta * S * I
    dI/dt = beta * S * I - gamma * I
    dR/dt = gamma * I
    solve dopri5(t1 = 20, rtol = 1e-4, atol = 1e-6)
}
"""
# A fixed-step field with an event (event_counts) and one free state besides a started one.
KICKED = """
field kicked {
    param k = 1
    state x, n = 0
    dx/dt = k
    dn/dt = 0
    when x > 1 { x = x - 1; n = n + 1 }
    solve rk4(dt = 0.05, steps = 40)
}
"""
ONE = """
field decay {
    param k
    state x
    dx/dt = -k * x
    solve rk4(dt = 0.1, steps = 10)
}
"""
GRID = """
field gridded {
    param k
    grid i < N
    state x
    dx/dt = -k * x
    solve rk4(dt = 0.1, steps = 10)
}
"""

PER_TRAJECTORY = ("states", "steps_taken", "status", "t", "steps_rejected", "event_counts")


def _same_as_flat(nd: vgpu.Solution, flat: vgpu.Solution, batch: tuple) -> None:
    """Every per-trajectory array of the N-D call has the batch's shape and equals the
    flattened call's, bit for bit (the same backend)."""
    rank = flat.steps_taken.ndim            # the other call's batch rank
    for name in PER_TRAJECTORY:
        a, b = getattr(nd, name), getattr(flat, name)
        if b is None:
            assert a is None, name
            continue
        assert a.shape == batch + b.shape[rank:], (name, a.shape)
        np.testing.assert_array_equal(a.reshape(b.shape), b, err_msg=name)
    if flat.history is not None:
        h = flat.history
        assert nd.history.shape == h.shape[:1] + batch + h.shape[1 + rank:]
        np.testing.assert_array_equal(nd.history.reshape(h.shape), h)
        np.testing.assert_array_equal(nd.times, flat.times)
    for k, v in flat.outputs.items():
        np.testing.assert_array_equal(nd.outputs[k], v)


# --- 1. a batch of any shape -----------------------------------------------------------
def test_a_meshgrid_sweep_runs_as_its_flattened_call(backend):
    beta, gamma = np.meshgrid(np.linspace(0.2, 0.6, 4), np.linspace(0.05, 0.2, 3))
    h0 = np.array([0.99, 0.01, 0.0])            # (n_states,): every trajectory's start
    save_at = np.linspace(0, 20, 5)
    nd = vgpu.solve(SIR, h0, params={"beta": beta, "gamma": gamma}, backend=backend,
                    save_at=save_at)
    flat = vgpu.solve(SIR, np.tile(h0, (12, 1)),
                      params={"beta": beta.ravel(), "gamma": gamma.ravel()},
                      backend=backend, save_at=save_at)
    assert nd.states.shape == (3, 4, 3)
    _same_as_flat(nd, flat, (3, 4))
    assert nd.backend == flat.backend == backend


def test_an_nd_h0_with_an_event_runs_as_its_flattened_call(backend):
    rng = np.random.default_rng(1)
    h0 = rng.uniform(0, 1, (2, 3, 4))           # one free state: h0 has the batch's shape
    k = rng.uniform(0.5, 2, (2, 3, 4))
    nd = vgpu.solve(KICKED, h0, params={"k": k}, backend=backend)
    flat = vgpu.solve(KICKED, h0.ravel(), params={"k": k.ravel()}, backend=backend)
    assert nd.event_counts.shape == (2, 3, 4, 1)
    assert nd.states.shape == (2, 3, 4, 2)
    _same_as_flat(nd, flat, (2, 3, 4))
    # the same batch with the state's axis written out
    again = vgpu.solve(KICKED, h0[..., None], params={"k": k}, backend=backend)
    _same_as_flat(again, flat, (2, 3, 4))


def test_run_field_returns_the_batch_shape(backend):
    k = np.linspace(0.1, 1, 6).reshape(2, 3)
    got = vgpu.run_field(ONE, np.ones((2, 3)), params={"k": k}, backend=backend)
    want = vgpu.run_field(ONE, np.ones(6), params={"k": k.ravel()}, backend=backend)
    assert got.shape == (2, 3)
    np.testing.assert_array_equal(got.ravel(), want)


def test_a_scalar_param_or_one_start_is_the_same_for_every_trajectory():
    h0 = np.array([0.99, 0.01, 0.0])
    beta = np.linspace(0.2, 0.6, 10).reshape(2, 5)
    h0s = np.broadcast_to(h0, (2, 5, 3))
    one_start = vgpu.solve(SIR, h0, params={"beta": beta}, backend="numpy")
    starts = vgpu.solve(SIR, h0s, params={"beta": beta}, backend="numpy")
    _same_as_flat(one_start, starts, (2, 5))
    # a scalar param beside a batch of starts: the batch is h0's
    sol = vgpu.solve(SIR, h0s, params={"beta": 0.3}, backend="numpy")
    assert sol.states.shape == (2, 5, 3) and sol.status.shape == (2, 5)
    # one free state: h0 of shape (1,) is one start beside a batch of params
    k = np.linspace(0.1, 1, 6).reshape(3, 2)
    got = vgpu.run_field(ONE, [2.0], params={"k": k}, backend="numpy")
    np.testing.assert_array_equal(got, vgpu.run_field(ONE, np.full((3, 2), 2.0),
                                                      params={"k": k}, backend="numpy"))


READS_I = """
field drift {
    input w[N]
    state x
    dx/dt = w[i] + float(i) / float(N)
    solve rk4(dt = 0.1, steps = 5)
}
"""


def test_the_program_sees_the_flat_batch(backend):
    """``i`` is a trajectory's row-major index in the batch, ``N`` their number."""
    w = np.linspace(-1, 1, 6)
    got = vgpu.run_field(READS_I, np.zeros((2, 3)), inputs={"w": w}, backend=backend)
    want = vgpu.run_field(READS_I, np.zeros(6), inputs={"w": w}, backend=backend)
    np.testing.assert_array_equal(got.ravel(), want)
    np.testing.assert_allclose(want, 0.5 * (w + np.arange(6) / 6), rtol=1e-5, atol=1e-6)


def test_batches_of_different_shapes_are_not_broadcast():
    """A column beside a row is a ShapeError (numpy would make 3 x 4 trajectories of it:
    np.meshgrid says so explicitly)."""
    b, g = np.linspace(0.2, 0.6, 4), np.linspace(0.05, 0.2, 3)
    with pytest.raises(vgpu.ShapeError, match=r"param beta: batch \(1, 4\), param gamma: batch \(3, 1\)"):
        vgpu.solve(SIR, [0.99, 0.01, 0], params={"beta": b[None, :], "gamma": g[:, None]})
    with pytest.raises(vgpu.ShapeError, match=r"h0 \(4, 3\): batch \(4,\), param beta: batch \(4, 1\)"):
        vgpu.solve(SIR, np.ones((4, 3)), params={"beta": b[:, None]})


def test_one_trajectory_without_a_batch_axis():
    """h0 of shape (n_free,) and scalar params: one trajectory, results without a batch
    axis (as numpy reduces a 0-d batch)."""
    h0 = np.array([0.99, 0.01, 0.0])
    one = vgpu.solve(SIR, h0, params={"beta": 0.3}, backend="numpy")
    row = vgpu.solve(SIR, h0[None], params={"beta": 0.3}, backend="numpy")
    assert one.states.shape == (3,) and one.steps_taken.shape == ()
    _same_as_flat(one, row, ())


def test_shapes_that_differ_are_a_shape_error_naming_them():
    with pytest.raises(vgpu.ShapeError, match=r"different batch shapes: param beta: batch \(3, 4\), "
                       r"param gamma: batch \(2, 4\); h0 has shape batch \+ \(3,\)"):
        vgpu.solve(SIR, [0.99, 0.01, 0], params={"beta": np.ones((3, 4)),
                                                 "gamma": np.ones((2, 4))})
    with pytest.raises(vgpu.ShapeError, match=r"h0 must have shape \(N, 3\).*batch \+ \(3,\)"):
        vgpu.solve(SIR, np.ones((3, 4, 2)), params={"beta": 0.3})


def test_a_field_with_a_grid_statement_keeps_its_grid():
    with pytest.raises(vgpu.ShapeError, match=r"array of the grid's shape \(N,\)"):
        vgpu.run_field(GRID, np.ones(12), params={"k": np.ones((3, 4))})
    with pytest.raises(vgpu.ShapeError, match=r"h0 must have shape \(N,\) \(grid \(N,\) x "
                       r"states x\), got \(3, 4\)$"):
        vgpu.run_field(GRID, np.ones((3, 4)), params={"k": 1.0})


def test_a_call_on_a_dask_cluster_takes_a_one_axis_batch():
    dask = pytest.importorskip("dask")
    beta = np.linspace(0.2, 0.6, 8)
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(vgpu.ShapeError, match=r"a call on a Dask cluster.*runs a batch "
                           r"of one axis: reshape h0 to \(-1, 3\)"):
            vgpu.solve(SIR, np.ones((2, 4, 3)), params={"beta": beta.reshape(2, 4)}, chunks=2)
        sol = vgpu.solve(SIR, np.tile([0.99, 0.01, 0], (8, 1)), params={"beta": beta},
                         chunks=4, backend="numpy")
        assert sol.state_names == ("S", "I", "R")
        np.testing.assert_array_equal(sol["I"].compute(), sol.states[:, 1].compute())
        with pytest.warns(vgpu.ToleranceWarning, match="float32") as caught:
            vgpu.solve(SIR, np.tile([0.99, 0.01, 0], (8, 1)), params={"beta": beta},
                       chunks=4, backend="numpy", rtol=1e-9).states.compute()
        assert len([w for w in caught if w.category is vgpu.ToleranceWarning]) == 1
        assert caught[0].filename == __file__       # said at the call, on the client


# --- 2. states by name -----------------------------------------------------------------
def test_state_names_and_a_state_by_name(backend):
    beta = np.linspace(0.2, 0.6, 6).reshape(2, 3)
    times = np.linspace(0, 20, 4)
    sol = vgpu.solve(SIR, [0.99, 0.01, 0], params={"beta": beta}, backend=backend,
                     save_at=times)
    assert sol.state_names == ("S", "I", "R")
    for k, name in enumerate(sol.state_names):
        np.testing.assert_array_equal(sol[name], sol.states[..., k])
        np.testing.assert_array_equal(sol.history_of(name), sol.history[..., k])
    assert sol["I"].shape == (2, 3) and sol.history_of("I").shape == (4, 2, 3)


def test_a_state_by_name_of_a_one_state_field():
    sol = vgpu.solve(ONE, np.ones(4), params={"k": 0.5}, backend="numpy")
    assert sol.state_names == ("x",)
    np.testing.assert_array_equal(sol["x"], sol.states)      # no state axis


def test_an_unknown_state_name_lists_the_states():
    sol = vgpu.solve(KICKED, np.zeros(2), backend="numpy")
    with pytest.raises(vgpu.UnknownNameError, match=r"'v'.*the states are: x, n"):
        sol["v"]
    with pytest.raises(vgpu.ArgumentTypeError, match=r"index sol.states for positions"):
        sol[0]
    with pytest.raises(vgpu.CallError, match=r"no history: pass save_every or save_at"):
        sol.history_of("x")


def test_a_simulation_solution_has_state_names():
    src = KICKED.replace("    when x > 1 { x = x - 1; n = n + 1 }\n", "")
    sim = vgpu.Simulation(src, np.zeros(2), backend="numpy")
    sim.advance(3)
    sol = sim.solution()
    assert sol.state_names == ("x", "n")
    np.testing.assert_array_equal(sol["x"], sol.states[..., 0])
    with pytest.raises(vgpu.ShapeError, match=r"a Simulation runs a batch of one axis"):
        vgpu.Simulation(src, np.zeros((2, 3)), backend="numpy")


# --- 3. a tolerance the dtype cannot meet ----------------------------------------------
def test_a_tolerance_below_float32_warns_before_running():
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", vgpu.ToleranceWarning)
        with pytest.raises(vgpu.ToleranceWarning, match=r"rtol = 1e-08 is below what float32 "
                           r"resolves.*use rtol >= 1e-06 in float32, or dtype='float64'"):
            vgpu.solve(SIR, [0.99, 0.01, 0], params={"beta": 0.3}, rtol=1e-8,
                       backend="numpy", progress=lambda done, total: calls.append(done))
    assert calls == []          # warned before the run began


def test_the_tolerance_floor_is_a_few_epsilons_of_each_dtype():
    assert rtol_floor("float32") == 8 * np.finfo(np.float32).eps
    src = SIR.replace("rtol = 1e-4", "rtol = 1e-15")      # the solve statement's rtol
    with pytest.warns(vgpu.ToleranceWarning, match=r"below what float64 resolves") as caught:
        vgpu.solve(src, [0.99, 0.01, 0], params={"beta": 0.3}, dtype="float64",
                   backend="numpy")
    assert caught[0].filename == __file__           # it points at the call
    with pytest.warns(vgpu.ToleranceWarning) as caught:
        vgpu.run_field(src, [0.99, 0.01, 0], params={"beta": 0.3}, backend="numpy")
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", vgpu.ToleranceWarning)
        vgpu.solve(SIR, [0.99, 0.01, 0], params={"beta": 0.3}, rtol=1e-6, backend="numpy")
        vgpu.solve(src, [0.99, 0.01, 0], params={"beta": 0.3}, rtol=1e-14, dtype="float64",
                   backend="numpy")


# --- 4. float64 refusals name the fastest backend that can ------------------------------
def test_a_glsl_float64_refusal_suggests_the_cpu_backend(cpu):
    message = float64_error("sin", None).message
    assert "backend='cpu' for float64" in message and "numpy" not in message
    assert "or backend='cpu' for float64" in _refusal(check_dtype)


def test_without_the_cpu_backend_the_refusal_suggests_what_remains():
    stand_in = Backend(name="cpu", description="absent", run=None,
                       available=lambda: (False, "no compiler"))
    registry.register(stand_in)
    try:
        assert "backend='numpy' for float64" in float64_error("sin", None).message
        assert registry.fastest("float64", exclude=("glsl",)) == "numpy"
        assert registry.fastest("float64", exclude=("glsl", "cpu", "wgpu")) == "numpy"
    finally:
        registry.unregister("cpu")


def _refusal(check) -> str:
    with pytest.raises(vgpu.BackendError) as e:
        check("float64")
    return e.value.message


# --- 5. a name in the wrong mapping ----------------------------------------------------
FORCED = """
field duffing {
    input F[1]
    param delta = 0.2
    output E[1]
    state x, v
    dx/dt = v
    dv/dt = -delta * v - x - x^3 + F[0] * cos(t)
    solve rk4(dt = 0.01, steps = 10)
    flux E[0] += x
}
"""


@pytest.mark.parametrize("given, said", [
    (dict(params={"F": 0.3}),
     r"unknown name 'F' in params=: F is an input of field duffing, pass it in "
     r"inputs=\{'F': array\}; valid names: delta"),
    (dict(inputs={"F": np.ones(1), "delta": np.ones(1)}),
     r"unknown name 'delta' in inputs=: delta is a param of field duffing, pass it in "
     r"params=\{'delta': value\}; valid names: F"),
    (dict(inputs={"F": np.ones(1)}, params={"x": 1.0}),
     r"'x' in params=: x is a state of field duffing, its starting value goes in h0"),
    (dict(inputs={"F": np.ones(1)}, params={"E": 1.0}),
     r"'E' in params=: E is an output of field duffing, computed by the run"),
    (dict(inputs={"F": np.ones(1)}, params={"nu": 1.0}),
     r"unknown name 'nu' in params=; valid names: delta$"),
])
def test_a_name_in_the_wrong_mapping_says_where_it_belongs(given, said):
    with pytest.raises(vgpu.UnknownNameError, match=said):
        vgpu.run_field(FORCED, np.zeros((2, 2)), backend="numpy", **given)
