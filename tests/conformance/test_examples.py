"""Every examples/*.field program runs, with a small input, on both backends, and
does what its comments say (the model-level property, not just "no error")."""
from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest

import vgpu

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _glsl_available() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vgpu.run_field("field f { state x\n dx/dt = 1\n solve euler(dt = 1, steps = 1) }",
                           np.zeros(1, np.float32), backend="glsl")
        return True
    except Exception:
        return False


BACKENDS = ["numpy", pytest.param("glsl", marks=pytest.mark.skipif(
    not _glsl_available(), reason="no OpenGL 4.3 context / GLSL backend")), "wgpu", "cuda"]


@pytest.fixture(autouse=True)
def _wgpu_device(request):
    """A wgpu case needs the device (the wgpu fixture: skipped with the reason locally,
    a failure on CI)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("backend") == "wgpu":
        request.getfixturevalue("wgpu")
    if params.get("backend") in ("cpu", "cuda"):      # (cuda: skipped without a GPU)
        request.getfixturevalue(params["backend"])


def load(name):
    return vgpu.load(EXAMPLES / f"{name}.field")


def test_every_example_is_covered():
    names = {p.stem for p in EXAMPLES.glob("*.field")}
    assert names == {"scale", "matmul", "converge", "barrier", "lorenz", "kuramoto", "heat",
                     "histogram", "vanderpol", "vanderpol_adaptive", "lorenz_tsit5",
                     "ou", "gbm_option", "bouncing_ball", "lif", "robertson",
                     "vanderpol_stiff", "dosing", "sir"}
    for name in names:
        vgpu.compile(load(name))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale(backend):
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    np.testing.assert_allclose(vgpu.run_field(load("scale"), x, backend=backend), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(vgpu.run_field(load("scale"), x, params={"s": 0.5},
                                              backend=backend), 0.5 * x, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul(backend):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((5, 7)).astype(np.float32)
    B = rng.standard_normal((7, 3)).astype(np.float32)
    C = vgpu.run_field(load("matmul"), inputs={"A": A, "B": B}, backend=backend)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_converge(backend):
    x0 = np.linspace(-3, 3, 257, dtype=np.float32)
    x = vgpu.run_field(load("converge"), x0, backend=backend)
    np.testing.assert_allclose(x, np.sin(x0), atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_barrier_basins_stop_together(backend):
    h0 = np.random.default_rng(2).uniform(-2, 2, 1000).astype(np.float32)   # 16 basins, last partial
    sol = vgpu.solve(load("barrier"), h0, backend=backend)
    assert np.all(np.abs(np.abs(sol.states) - 1) < 1e-3)
    np.testing.assert_array_equal(np.sign(sol.states), np.sign(h0))
    per_basin = np.split(sol.steps_taken, range(64, 1000, 64))
    assert all((b == b[0]).all() for b in per_basin)
    firsts = np.array([b[0] for b in per_basin])
    assert firsts.max() < 10000 and len(set(firsts.tolist())) > 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_lorenz_sweep_agrees_with_reference(backend):
    n = 512
    h0 = np.tile(np.float32([1, 0, 0]), (n, 1))
    args = dict(params={"rho": np.linspace(0, 21, n).astype(np.float32)}, dt=0.0025, steps=400)
    h = vgpu.run_field(load("lorenz"), h0, backend=backend, **args)
    ref = vgpu.run_field(load("lorenz"), h0, backend="numpy", dtype="float64", **args)
    assert h.shape == (n, 3)
    err = np.linalg.norm(h - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert err.max() < 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_kuramoto_synchronises(backend):
    n = 256 * 4
    rng = np.random.default_rng(3)
    theta0 = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    omega = (0.2 * rng.standard_normal(n)).astype(np.float32)   # narrow spread: K = 2 locks
    theta = vgpu.run_field(load("kuramoto"), theta0, inputs={"omega": omega}, backend=backend,
                           steps=1000)
    r = np.abs(np.exp(1j * theta.astype(np.float64)).reshape(-1, 256).mean(axis=1))
    assert r.min() > 0.9
    short = vgpu.run_field(load("kuramoto"), theta0, inputs={"omega": omega}, backend=backend,
                           steps=20)
    ref = vgpu.run_field(load("kuramoto"), theta0, inputs={"omega": omega}, backend="numpy",
                         dtype="float64", steps=20)
    assert np.max(np.abs(np.angle(np.exp(1j * (short - ref))))) < 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_heat_is_conserved_and_diffuses(backend):
    u0 = np.zeros((4, 64), np.float32)
    u0[:, 28:36] = 1.0
    u = vgpu.run_field(load("heat"), u0.ravel(), backend=backend).reshape(4, 64)
    np.testing.assert_allclose(u.sum(axis=1), 8.0, rtol=1e-4)
    assert u.max() < 0.5 and u.min() > 0.0


def _numpy_histogram(x: np.ndarray) -> np.ndarray:
    """32 bins of width 1/16 over [-1, 1]; values outside land in the end bins (clamp)."""
    return np.histogram(np.clip(x.astype(np.float64), -1, 1), bins=32, range=(-1, 1))[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_histogram_is_the_histogram_of_the_final_states(backend):
    n = 5000
    sol = vgpu.solve(load("histogram"), dims={"N": n}, backend=backend)
    counts = sol.outputs["counts"]
    assert counts.shape == (32,) and counts.sum() == n
    x = sol.states[:, 0]
    assert np.abs(counts - _numpy_histogram(x)).sum() <= 4        # bin-edge rounding only
    # the final states themselves: x = cos(20 w) for the swept frequencies w
    w = 1.0 + 2.0 * np.arange(n) / n
    np.testing.assert_allclose(x, np.cos(20 * w), atol=2e-3)
    # the arcsine law: fullest at both ends, flat and low in the middle
    assert min(counts[0], counts[-1]) > 4 * counts[12:20].max()
    assert (counts > 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_vanderpol_limit_cycle(backend):
    n = 64
    mu = np.linspace(0.5, 5, n).astype(np.float32)
    sol = vgpu.solve(load("vanderpol"), np.tile(np.float32([0.5, 0]), (n, 1)),
                     params={"mu": mu}, save_every=10, backend=backend)
    assert sol.history.shape == (201, n, 2)
    late = sol.history[100:, :, 0]                  # t in [10, 20]: on the limit cycle
    amp = np.abs(late).max(axis=0)
    np.testing.assert_allclose(amp, 2.0, atol=0.1)


# examples/README.md and the guide say these agree bit for bit (arithmetic only).
_RNG = np.random.default_rng(9)
BITWISE = {
    "scale": (_RNG.standard_normal(300).astype(np.float32), {}),
    "matmul": (None, {"inputs": {"A": _RNG.standard_normal((9, 7)).astype(np.float32),
                                 "B": _RNG.standard_normal((7, 5)).astype(np.float32)}}),
    "lorenz": (np.tile(np.float32([1, 0, 0]), (256, 1)),
               {"params": {"rho": np.linspace(0, 40, 256)}, "steps": 300}),
    "heat": (np.where(np.arange(256) % 64 < 8, 1.0, 0.0).astype(np.float32), {"steps": 200}),
    "vanderpol": (np.tile(np.float32([2, 0]), (64, 1)),
                  {"params": {"mu": np.linspace(0, 5, 64)}, "save_every": 100}),
    "histogram": (None, {"dims": {"N": 3000}}),
}


@pytest.mark.skipif(not _glsl_available(), reason="no OpenGL 4.3 context / GLSL backend")
@pytest.mark.parametrize("name", sorted(BITWISE))
def test_arithmetic_examples_agree_bit_for_bit(name):
    h0, kw = BITWISE[name]
    ref = vgpu.solve(load(name), h0, backend="numpy", **kw)
    gpu = vgpu.solve(load(name), h0, backend="glsl", **kw)
    np.testing.assert_array_equal(gpu.states, ref.states)
    for out in ref.outputs:
        np.testing.assert_array_equal(gpu.outputs[out], ref.outputs[out])
    if ref.history is not None:
        np.testing.assert_array_equal(gpu.history, ref.history)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ou_ensemble_matches_the_closed_form(backend):
    n = 20_000
    x = vgpu.run_field(load("ou"), np.full(n, 2.0, np.float32), backend=backend, seed=1)
    mean = 0.5 + 1.5 * np.exp(-1.5)
    var = 0.4**2 / 3 * (1 - np.exp(-3))
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n) + 2e-3        # + the EM bias bound
    assert abs(x.var() - var) < 5 * var * np.sqrt(2 / n) + 2e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_gbm_option_prices_the_call(backend):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gbm_option", EXAMPLES / "gbm_option.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    price, se, flux = script.monte_carlo(50_000, backend, seed=3)
    exact = script.black_scholes_call(100.0, 100.0, 0.05, 0.2, 1.0)
    assert abs(exact - 10.4506) < 1e-4                 # the textbook value
    assert abs(price - exact) < 5 * se
    assert abs(flux - price) < 1e-3 * price            # the field's flux sums the same payoff


EVENT_BACKENDS = ["numpy", pytest.param("glsl", marks=pytest.mark.skipif(
    not _glsl_available(), reason="no OpenGL 4.3 context / GLSL backend")), "cpu", "cuda"]


@pytest.mark.parametrize("backend", EVENT_BACKENDS)
def test_bouncing_ball(backend):
    """Every ball bounces at the closed-form times until a bounce is slower than
    `rest`, then lies on the floor (status 1)."""
    n = 9
    sol = vgpu.solve(load("bouncing_ball"), dims={"N": n}, backend=backend)
    e = 0.5 + 0.4 * np.arange(n) / (n - 1)
    g, t1 = 9.81, np.sqrt(2 / 9.81)
    v1 = g * t1
    for k in range(n):      # bounces until e^m * v1 < rest, the last one stops it
        m = int(np.ceil(np.log(0.2 / v1) / np.log(e[k])))
        times = t1 + 2 * v1 * np.cumsum(np.r_[0, e[k] ** np.arange(1, m)]) / g
        assert sol.event_counts[k, 0] == m
        assert abs(sol.t[k] - times[-1]) < 1e-4
    assert (sol.status == 1).all()
    assert sol.outputs["bounces"].sum() == sol.event_counts.sum()


@pytest.mark.parametrize("backend", EVENT_BACKENDS)
def test_lif_spike_counts(backend):
    n = 12
    sol = vgpu.solve(load("lif"), dims={"N": n}, backend=backend)
    current = 0.8 + 1.2 * np.arange(n) / (n - 1)
    above = current > 1
    want = np.zeros(n, int)
    want[above] = np.floor(1 / (0.02 * np.log(current[above] / (current[above] - 1))))
    np.testing.assert_array_equal(sol.event_counts[:, 0], want)
    np.testing.assert_array_equal(sol.outputs["raster"].sum(axis=1), want)
    np.testing.assert_array_equal(sol.outputs["rate"], sol.outputs["raster"].sum(axis=0))


# rodas4 on numpy here; the compiled backends against it: tests/conformance/test_rodas4_compiled.py
def test_robertson_as_its_comments_say():
    sol = vgpu.solve(load("robertson"), dims={"N": 64}, backend="numpy", dtype="float64",
                     save_at=np.logspace(-5, 5, 41))
    assert (sol.status == 0).all() and sol.history.shape == (41, 64, 3)
    np.testing.assert_allclose(sol.states[0], [0.017866, 7.27e-8, 0.98213], rtol=1e-3)
    assert 150 <= sol.steps_taken[0] <= 220
    np.testing.assert_allclose(sol.states.sum(axis=1), 1, rtol=1e-6)


def test_vanderpol_stiff_as_its_comments_say():
    sol = vgpu.solve(load("vanderpol_stiff"), params={"mu": np.logspace(2, 3, 8)},
                     dims={"N": 8}, backend="numpy", dtype="float64")
    assert (sol.status == 0).all()
    assert 4500 < sol.steps_taken[0] < 6500 and 450 < sol.steps_taken[-1] < 750
    assert (np.diff(sol.steps_taken) < 0).all()


DOSES = np.zeros(49)
DOSES[[0, 1, 12, 13, 24, 25]] = 150.0           # the comment's schedule: three doses a day


@pytest.mark.parametrize("backend", BACKENDS + ["cpu"])
def test_dosing_accounts_for_every_dose(backend):
    """gut + V c + gone is the trapezoid sum of the schedule (rk4 integrates each linear
    piece of the table exactly), for every patient of the clearance sweep."""
    sol = vgpu.solve(load("dosing"), inputs={"dose": DOSES}, dims={"N": 16}, save_every=16,
                     backend=backend)
    assert sol.history.shape == (49, 16, 3)
    gut, c, gone = np.moveaxis(sol.history.astype(np.float64), -1, 0)
    given = np.concatenate([[0], np.cumsum((DOSES[1:] + DOSES[:-1]) / 2)])   # by each hour
    np.testing.assert_allclose(gut + 40.0 * c + gone, given[:, None] * np.ones(16),
                               rtol=1e-5, atol=1e-3)
    assert (np.diff(c[-1]) < 0).all()            # faster clearance, less left at 48 h


def test_dosing_matches_solve_ivp_with_np_interp():
    from scipy.integrate import solve_ivp
    sol = vgpu.solve(load("dosing"), inputs={"dose": DOSES}, dims={"N": 4}, save_every=16,
                     backend="numpy", dtype="float64")
    ke = 0.05 * 10.0 ** (np.arange(4) / 3)
    for j in range(4):
        def rhs(t, y, k=ke[j]):
            return [np.interp(t, np.arange(49), DOSES) - 1.2 * y[0],
                    1.2 * y[0] / 40.0 - k * y[1], k * 40.0 * y[1]]
        ref = solve_ivp(rhs, (0, 48), [0, 0, 0], method="DOP853", rtol=1e-12, atol=1e-12,
                        t_eval=sol.times, max_step=0.5)
        np.testing.assert_allclose(sol.history[:, j], ref.y.T, rtol=1e-5, atol=1e-7)  # rk4 at 1/16 h
