"""``vgpu.fit``: per-trajectory Levenberg–Marquardt against scipy.optimize.least_squares
(method="lm": MINPACK itself) on each trajectory's own problem, with the model
integrated by scipy's solve_ivp: the fitted parameters, costs and covariances agree
where both converge. Plus bounds, NaN data, weights, statuses, independence of the
trajectories, and every backend against the numpy reference."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import vgpu

SIR = """
field sir {
    param beta = 0.5
    param gamma = 0.1
    state S, I, R
    dS/dt = -beta * S * I
    dI/dt = beta * S * I - gamma * I
    dR/dt = gamma * I
    solve dopri5(t1 = 30, rtol = 1e-10, atol = 1e-12)
}
"""
TIMES = np.linspace(0.0, 30.0, 25)


def outbreaks(n, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.35, 0.6, n)
    gamma = rng.uniform(0.08, 0.15, n)
    i0 = rng.uniform(0.005, 0.02, n)
    h0 = np.stack([1 - i0, i0, np.zeros(n)], -1)
    truth = vgpu.solve(SIR, h0, params={"beta": beta, "gamma": gamma}, save_at=TIMES,
                       dtype="float64", backend="numpy")
    data = truth.history[..., 1] + rng.normal(0, noise, (len(TIMES), n))
    return data, h0, beta, gamma


def sir_I(theta, s0, times=TIMES):
    beta, gamma, i0 = theta
    f = solve_ivp(lambda t, y: [-beta * y[0] * y[1], beta * y[0] * y[1] - gamma * y[1],
                                gamma * y[1]], (0, times[-1]), [s0, i0, 0.0], t_eval=times,
                  rtol=1e-11, atol=1e-13, method="DOP853")
    return f.y[1]


def scipy_fit(i, data, h0, start, w=None, **kw):
    w = np.ones(len(TIMES)) if w is None else w
    use = np.isfinite(data[:, i]) & (w != 0)

    def res(th):
        return (w * (sir_I(th, h0[i, 0]) - data[:, i]))[use]
    return least_squares(res, start, method="lm", xtol=1e-12, ftol=1e-12, **kw)


def test_200_sir_fits_equal_scipy_least_squares_per_trajectory():
    n = 200
    data, h0, beta, gamma = outbreaks(n)
    guess = h0.copy()
    guess[:, 1] = 0.01
    fr = vgpu.fit(SIR, data, TIMES, fit=["beta", "gamma", "init(I)"],
                  params={"beta": 0.45, "gamma": 0.11}, h0=guess, observe="I",
                  backend="numpy", xtol=1e-12, ftol=1e-12)
    assert fr.params["beta"].shape == (n,) and fr.covariance.shape == (n, 3, 3)
    assert set(np.unique(fr.status)) <= {0, 1}
    for i in range(0, n, 20):                   # scipy on a sample of them
        ref = scipy_fit(i, data, h0, [0.45, 0.11, 0.01])
        assert ref.status > 0
        got = np.array([fr.params["beta"][i], fr.params["gamma"][i], fr.params["init(I)"][i]])
        np.testing.assert_allclose(got, ref.x, rtol=1e-6)
        np.testing.assert_allclose(fr.cost[i], ref.cost, rtol=1e-8)
        # covariance: (J^T J)^-1 2 cost / (m - n), J scipy's at its solution
        J = ref.jac
        cov = np.linalg.inv(J.T @ J) * 2 * ref.cost / (len(TIMES) - 3)
        np.testing.assert_allclose(fr.covariance[i], cov, rtol=1e-4)
    # the truth is within a few standard errors of the fits (noisy data)
    z = (fr.params["beta"] - beta) / np.sqrt(fr.covariance[:, 0, 0])
    assert np.mean(np.abs(z) < 3) > 0.95


def test_nan_data_and_weights_as_scipy_on_the_points_left():
    n = 6
    data, h0, _, _ = outbreaks(n, seed=3)
    rng = np.random.default_rng(4)
    data[rng.random(data.shape) < 0.2] = np.nan
    w = rng.uniform(0.5, 2.0, len(TIMES))
    w[3] = 0.0
    fr = vgpu.fit(SIR, data, TIMES, fit=["beta", "gamma"], h0=h0, observe=["I"],
                  weights=w[:, None], backend="numpy", xtol=1e-12, ftol=1e-12)
    for i in range(n):
        def res(th, i=i):
            use = np.isfinite(data[:, i]) & (w != 0)
            return (w * (sir_I([th[0], th[1], h0[i, 1]], h0[i, 0]) - data[:, i]))[use]
        ref = least_squares(res, [0.5, 0.1], method="lm", xtol=1e-12, ftol=1e-12)
        np.testing.assert_allclose([fr.params["beta"][i], fr.params["gamma"][i]], ref.x,
                                   rtol=1e-6)
        m = int((np.isfinite(data[:, i]) & (w != 0)).sum())
        np.testing.assert_allclose(fr.covariance[i],
                                   np.linalg.inv(ref.jac.T @ ref.jac) * 2 * ref.cost / (m - 2),
                                   rtol=1e-4)


def test_bounds_keep_a_parameter_in_its_interval():
    data, h0, beta, _ = outbreaks(4, seed=5, noise=0.0)
    top = beta - 0.05                  # every trajectory's beta is above its bound
    fr = vgpu.fit(SIR, data, TIMES, fit=["beta"], h0=h0, observe="I",
                  params={"beta": 0.3},
                  bounds={"beta": (0.0, float(top.min()))}, backend="numpy")
    assert np.all(fr.params["beta"] <= top.min())
    assert np.all(fr.status <= 1)


def test_bounded_fit_equals_scipy_on_the_bound():
    """A one-parameter problem whose minimum lies past its bound: the fit stops on the
    bound, as scipy's bounded least_squares (trf) does."""
    data, h0, beta, gamma = outbreaks(3, seed=6, noise=0.0)
    hi = 0.3
    fr = vgpu.fit(SIR, data, TIMES, fit=["beta"], h0=h0, observe="I",
                  params={"beta": 0.25, "gamma": gamma}, bounds={"beta": (None, hi)},
                  backend="numpy")
    for i in range(3):
        ref = least_squares(lambda th, i=i: sir_I([th[0], gamma[i], h0[i, 1]], h0[i, 0])
                            - data[:, i], [0.25], bounds=([-np.inf], [hi]))
        np.testing.assert_allclose(fr.params["beta"][i], ref.x[0], rtol=1e-6)


def test_each_trajectory_is_its_own_problem():
    """A trajectory's fit is bit-identical alone and in an ensemble whose others take
    more iterations: converged trajectories stop changing."""
    data, h0, _, _ = outbreaks(5, seed=7)
    kw = dict(fit=["beta", "gamma"], observe="I", backend="numpy", xtol=1e-12, ftol=1e-12)
    guess = {"beta": np.array([0.5, 0.2, 0.9, 0.45, 0.3]), "gamma": 0.1}
    all5 = vgpu.fit(SIR, data, TIMES, h0=h0, params=guess, **kw)
    assert len(set(all5.iterations.tolist())) > 1
    for i in (0, 2):
        one = vgpu.fit(SIR, data[:, i:i + 1], TIMES, h0=h0[i:i + 1],
                       params={"beta": guess["beta"][i:i + 1], "gamma": 0.1}, **kw)
        assert one.params["beta"][0] == all5.params["beta"][i]
        assert one.params["gamma"][0] == all5.params["gamma"][i]
        assert one.iterations[0] == all5.iterations[i]


FLAT = """
field f {
    param a = 1.0
    param b = 0.0
    state x
    dx/dt = -a * x * x
    solve dopri5(t1 = 2, rtol = 1e-9, atol = 1e-12)
}
"""


def test_statuses_max_iter_failed_solve_and_singular_jacobian():
    times = np.linspace(0, 2, 9)
    x0 = np.array([1.0, 0.5, -3.0])         # x0 = -3 with a = 1 blows up before t = 2
    truth = 1 / (1 / 1.0 + 1.0 * times)[:, None] * np.ones(3)
    fr = vgpu.fit(FLAT, truth, times, fit=["a"], h0=x0, params={"a": np.array([1, 1, 1.0])},
                  backend="numpy")
    assert fr.status[2] == 3 and fr.status[0] <= 1 and fr.status[1] <= 1
    assert fr.iterations[2] == 1
    few = vgpu.fit(FLAT, truth, times, fit=["a"], h0=np.array([1.0, 0.5, 0.7]),
                   params={"a": 3.0}, backend="numpy", max_iter=2)
    assert np.all(few.status == 2) and np.all(few.iterations == 2)
    flat = vgpu.fit(FLAT, truth, times, fit=["a", "b"], h0=np.array([1.0, 0.5, 0.7]),
                    backend="numpy")
    assert np.all(flat.status == 4)         # b is read by nothing: a zero column
    assert np.isnan(flat.covariance).all()


def test_covariance_is_nan_where_there_are_too_few_points():
    times = np.array([0.0, 1.0])
    data = np.array([[np.nan, np.nan], [0.5, np.nan]])
    fr = vgpu.fit(FLAT, data, times, fit=["a"], h0=np.array([1.0, 1.0]), backend="numpy")
    assert np.isnan(fr.covariance).all()
    np.testing.assert_allclose(fr.params["a"][0], 1.0, rtol=1e-6)      # 1/(1 + a) = 0.5


@pytest.mark.parametrize("kwargs, words", [
    (dict(fit=["zeta"]), "not a param"),
    (dict(fit=["beta"], observe=["Q"]), "not a state"),
    (dict(fit=["beta"], bounds={"gamma": (0, 1)}), "not one of the fitted"),
    (dict(fit=["beta"], bounds={"beta": (1, 0)}), "above high"),
    (dict(fit=["beta"], bounds={"beta": (0.6, 1)}), "outside its bounds"),
    (dict(fit=["beta"], save_at=[1.0]), "sets save_at"),
    (dict(fit=["beta"], observe="I", data=np.zeros((3, 2))), "data must have shape"),
])
def test_bad_fit_calls_are_clear_errors(kwargs, words):
    data, h0, _, _ = outbreaks(2, seed=1)
    kwargs = dict(kwargs)
    d = kwargs.pop("data", data[..., None].repeat(3, -1))
    with pytest.raises(vgpu.VgpuError) as err:
        vgpu.fit(SIR, d, TIMES, h0=h0, backend="numpy", **kwargs)
    assert words in str(err.value)


def test_init_of_a_state_with_a_start_expression_is_refused():
    src = SIR.replace("state S, I, R", "state S, I, R = 0.0")
    data, h0, _, _ = outbreaks(2, seed=1)
    with pytest.raises(vgpu.VgpuError, match="start expression"):
        vgpu.fit(src, data, TIMES, fit=["init(R)"], h0=h0[:, :2], observe="I",
                 backend="numpy")


@pytest.mark.parametrize("name", ["cpu", "glsl", "wgpu"])
def test_every_backend_fits_as_the_reference(name, request):
    request.getfixturevalue(name)
    dtype = "float32" if name == "wgpu" else "float64"
    data, h0, _, _ = outbreaks(16, seed=9)
    kw = dict(fit=["beta", "gamma"], observe="I", h0=h0, dtype=dtype)
    ref = vgpu.fit(SIR, data, TIMES, backend="numpy", **kw)
    got = vgpu.fit(SIR, data, TIMES, backend=name, **kw)
    assert got.solution.backend == name
    r = 1e-6 if dtype == "float64" else 2e-3
    np.testing.assert_allclose(got.params["beta"], ref.params["beta"], rtol=r)
    np.testing.assert_allclose(got.params["gamma"], ref.params["gamma"], rtol=r)


def test_the_example_fits_outbreaks(capsys):
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fit_sir.py"
    spec = importlib.util.spec_from_file_location("fit_sir", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--n", "40", "--backend", "numpy"])
    out = capsys.readouterr().out
    assert "40 outbreaks fitted" in out and "converged: 40" in out
