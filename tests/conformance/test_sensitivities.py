"""Forward sensitivities (``solve(..., sensitivities=NAMES)``), on every backend.

Oracles, all independent of the compiler's derivative rules:
- complex-step derivatives of a hand-written fixed-step loop in numpy (the same
  tableau, the same steps): exact to rounding for explicit methods, since S is the
  derivative of the computed solution with the steps held fixed;
- central finite differences of scipy's solve_ivp at tight tolerance, for adaptive
  methods (S there is the derivative of the solution, to the method's tolerance);
- closed forms (exponential decay);
- the call without sensitivities: the same states and steps, bit for bit;
- noise: a complex-step Euler–Maruyama loop on the same Philox increments
  (``vgpu.philox``, the contract's Box–Muller formula written out here).
"""
from __future__ import annotations

import subprocess
import sys
import pathlib
import os

import numpy as np
import pytest

import vgpu

REPO = pathlib.Path(__file__).resolve().parents[2]
BACKENDS = ("numpy", "cpu", "glsl", "wgpu")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """A backend name; a compiled one's own fixture (conftest.py) skips or fails."""
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def dtype_of(backend: str, functions: bool = False) -> str:
    """float64 where the backend has it (GLSL: arithmetic only), else float32."""
    if backend == "wgpu" or (backend == "glsl" and functions):
        return "float32"
    return "float64"


def tol(dtype: str, f64: float, f32: float) -> float:
    return f64 if dtype == "float64" else f32


LORENZ = """
field lorenz {
    param sigma = 10.0
    param rho = 28.0
    param beta = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve METHOD
}
"""


def lorenz_F(h, t, p):
    x, y, z = h
    return np.array([p["sigma"] * (y - x), x * (p["rho"] - z) - y, x * y - p["beta"] * z])


def rk4_loop(F, h, p, dt, steps, t0=0.0):
    """The classic rk4 (1/6, 1/3, 1/3, 1/6), h of shape (n_states, n_traj); any dtype."""
    t = t0
    for n in range(steps):
        k1 = F(h, t, p)
        k2 = F(h + dt / 2 * k1, t + dt / 2, p)
        k3 = F(h + dt / 2 * k2, t + dt / 2, p)
        k4 = F(h + dt * k3, t + dt, p)
        h = h + dt * (k1 / 6 + k2 / 3 + k3 / 3 + k4 / 6)
        t = t0 + (n + 1) * dt
    return h


def complex_step(run, p: dict, h0: np.ndarray, names, step=1e-30):
    """(n_states, n_traj, len(names)): imag(run(p + i step)) / step per name."""
    out = []
    for name in names:
        q = {k: np.asarray(v, complex) for k, v in p.items()}
        h = np.asarray(h0, complex).copy()
        if name.startswith("init("):
            k = int(name[5:-1])
            h[k] = h[k] + 1j * step
        else:
            q[name] = q[name] + 1j * step
        out.append(run(q, h).imag / step)
    return np.stack(out, axis=-1)


# --- explicit fixed steps: exact to rounding --------------------------------------
def test_rk4_lorenz_equals_complex_step_of_a_hand_loop(backend):
    dtype = dtype_of(backend)
    n = 6
    rng = np.random.default_rng(1)
    h0 = rng.normal(size=(n, 3))
    rho = np.linspace(20.0, 30.0, n)
    src = LORENZ.replace("METHOD", "rk4(dt = 0.01, steps = 60)")
    sol = vgpu.solve(src, h0, params={"rho": rho}, backend=backend, dtype=dtype,
                     sensitivities=["rho", "sigma", "init(x)", "init(z)"])
    assert sol.sensitivities.shape == (n, 3, 4)
    assert sol.sensitivity_names == ("rho", "sigma", "init(x)", "init(z)")
    p = {"sigma": 10.0, "rho": rho, "beta": 8.0 / 3.0}
    want = complex_step(lambda q, h: rk4_loop(lorenz_F, h, q, 0.01, 60), p, h0.T,
                        ["rho", "sigma", "init(0)", "init(2)"])
    want = np.moveaxis(want, 0, 1)              # (n_traj, n_states, names)
    np.testing.assert_allclose(sol.sensitivities, want, rtol=tol(dtype, 1e-11, 2e-3),
                               atol=tol(dtype, 1e-11, 2e-3) * np.abs(want).max())


FUNCS = """
field f {
    param a = 0.7
    param b = 1.3
    state x, y = 2.0 * a * x
    let r = sin(a * x) + exp(-b * t)
    dx/dt = where(x > 0.0, r * y, -y) - 0.1 * x
    dy/dt = -a * x + b * init(y) * 0.1 - y * y * 0.05
    solve rk4(dt = 0.02, steps = 40)
}
"""


def funcs_F(h, t, p, y0):
    x, y = h
    r = np.sin(p["a"] * x) + np.exp(-p["b"] * t)
    dx = np.where(x.real > 0.0, r * y, -y) - 0.1 * x
    dy = -p["a"] * x + p["b"] * y0 * 0.1 - y * y * 0.05
    return np.array([dx, dy])


def test_lets_where_functions_t_start_expressions_and_init(backend):
    """A let, where(), sin/exp, a field reading t, a start value reading a param and a
    state, and init(y) in an equation: the chain rule through all of them."""
    dtype = dtype_of(backend, functions=True)
    n = 5
    x0 = np.linspace(-1.0, 1.5, n)
    a = np.linspace(0.5, 0.9, n)
    sol = vgpu.solve(FUNCS, x0, params={"a": a}, backend=backend, dtype=dtype,
                     sensitivities=["a", "b", "init(x)", "init(y)"])

    def run(q, h):
        h = np.array([h[0], 2.0 * q["a"] * h[0] if h.shape[0] == 1 else h[1]])
        return rk4_loop(lambda s, t, qq: funcs_F(s, t, qq, h[1]), h, q, 0.02, 40)

    p = {"a": a, "b": 1.3}
    x0c = x0[None, :]
    cols = []
    for name in ["a", "b", "init(x)"]:
        cols.append(complex_step(run, p, x0c, [name.replace("init(x)", "init(0)")])[..., 0])
    # init(y): perturb y's start value directly (it then no longer follows 2 a x)
    y_start = 2.0 * a * x0
    h = np.array([x0, y_start], complex)
    h[1] = h[1] + 1e-30j
    cols.append(rk4_loop(lambda s, t, qq: funcs_F(s, t, qq, h[1]), h.copy(), p, 0.02, 40)
                .imag / 1e-30)
    want = np.moveaxis(np.stack(cols, axis=-1), 0, 1)
    np.testing.assert_allclose(sol.sensitivities, want, rtol=tol(dtype, 1e-10, 1e-3),
                               atol=tol(dtype, 1e-11, 1e-4))


# --- bit-identical states and steps ---------------------------------------------
@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 50)", "bs3(t1 = 1)",
                                    "dopri5(t1 = 1, rtol = 1e-6, atol = 1e-9)",
                                    "tsit5(t1 = 1, rtol = 1e-5)",
                                    "rodas4(t1 = 0.5, rtol = 1e-6, atol = 1e-9)"])
def test_states_and_steps_are_bit_identical_to_the_call_without(backend, method):
    """(rodas4: the joined system's W is solved by blocks with the states' own LU, so its
    states are the very numbers of the call without sensitivities.)"""
    dtype = dtype_of(backend)
    src = LORENZ.replace("METHOD", method)
    h0 = np.random.default_rng(2).normal(size=(7, 3))
    times = np.linspace(0.0, 0.5, 6)
    plain = vgpu.solve(src, h0, backend=backend, dtype=dtype, save_at=times)
    sens = vgpu.solve(src, h0, backend=backend, dtype=dtype, save_at=times,
                      sensitivities=["rho", "init(y)"])
    assert np.array_equal(plain.states, sens.states)
    assert np.array_equal(plain.history, sens.history)
    assert np.array_equal(plain.steps_taken, sens.steps_taken)
    if plain.steps_rejected is not None:
        assert np.array_equal(plain.steps_rejected, sens.steps_rejected)
    assert sens.history_sensitivities.shape == (6, 7, 3, 2)
    assert np.array_equal(sens.history_sensitivities[0][..., 1],
                          np.broadcast_to([0.0, 1.0, 0.0], (7, 3)))


def test_the_first_step_ignores_the_sensitivities():
    """Hairer's starting step measures the states alone: a sensitivity column much
    larger than the states (d/d init(x) of x' = -k x with huge k) would change it."""
    src = """
field s {
    param k = 50.0
    state x, y
    dx/dt = -k * x + y
    dy/dt = -y
    solve dopri5(t1 = 1)
}
"""
    h0 = np.array([[1e-3, 1e-3]])
    plain = vgpu.solve(src, h0, backend="numpy", dtype="float64")
    sens = vgpu.solve(src, h0, backend="numpy", dtype="float64", sensitivities=["k"])
    assert np.array_equal(plain.steps_taken, sens.steps_taken)
    assert np.array_equal(plain.states, sens.states)


# --- adaptive methods: the derivative of the solution ---------------------------
LOGISTIC = """
field logistic {
    param r = 1.5
    param K = 10.0
    state x
    dx/dt = r * x * (1.0 - x / K)
    solve METHOD
}
"""


@pytest.mark.parametrize("method", ["dopri5", "tsit5", "rodas4"])
def test_adaptive_equals_finite_differences_of_scipy(backend, method):
    from scipy.integrate import solve_ivp
    dtype = dtype_of(backend)
    src = LOGISTIC.replace("METHOD", f"{method}(t1 = 4, rtol = 1e-10, atol = 1e-12)")
    if dtype == "float32":
        src = src.replace("rtol = 1e-10, atol = 1e-12", "rtol = 1e-6, atol = 1e-6")
    x0 = np.array([0.5, 1.0, 3.0])
    times = np.array([0.0, 1.0, 2.5, 4.0])
    sol = vgpu.solve(src, x0, backend=backend, dtype=dtype, save_at=times,
                     sensitivities=["r", "K", "init(x)"])

    def y(r, K, x):
        f = solve_ivp(lambda t, v: r * v * (1 - v / K), (0, 4), [x], t_eval=times,
                      rtol=1e-13, atol=1e-14, method="DOP853")
        return f.y[0]

    want = np.zeros((len(times), len(x0), 1, 3))
    for i, x in enumerate(x0):
        e = 1e-5
        want[:, i, 0, 0] = (y(1.5 + e, 10, x) - y(1.5 - e, 10, x)) / (2 * e)
        want[:, i, 0, 1] = (y(1.5, 10 + e, x) - y(1.5, 10 - e, x)) / (2 * e)
        want[:, i, 0, 2] = (y(1.5, 10, x + e) - y(1.5, 10, x - e)) / (2 * e)
    np.testing.assert_allclose(sol.history_sensitivities, want,
                               rtol=tol(dtype, 1e-6, 2e-3), atol=tol(dtype, 1e-7, 2e-3))
    np.testing.assert_allclose(sol.sensitivities, want[-1], rtol=tol(dtype, 1e-6, 2e-3),
                               atol=tol(dtype, 1e-7, 2e-3))


DECAY = """
field decay {
    param k = 0.5
    state x
    dx/dt = -k * x
    solve METHOD
}
"""


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 200)",
                                    "dopri5(t1 = 2, rtol = 1e-10, atol = 1e-12)",
                                    "rodas4(t1 = 2, rtol = 1e-10, atol = 1e-12)"])
def test_exponential_decay_closed_form(backend, method):
    """x = x0 e^{-kt}: dx/dk = -t x0 e^{-kt}, dx/dx0 = e^{-kt} (the state axis is kept
    for a one-state field)."""
    dtype = dtype_of(backend, functions=True)
    x0 = np.array([1.0, 2.0, -0.5])
    k = np.array([0.5, 1.0, 2.0])
    times = np.linspace(0.0, 2.0, 5)
    sol = vgpu.solve(DECAY.replace("METHOD", method), x0, params={"k": k}, backend=backend,
                     dtype=dtype, save_at=times, sensitivities=["k", "init(x)"])
    t = times[:, None]
    e = np.exp(-k * t)
    assert sol.states.shape == (3,)
    assert sol.sensitivities.shape == (3, 1, 2)
    r = tol(dtype, 1e-7, 1e-4)
    np.testing.assert_allclose(sol.history_sensitivities[:, :, 0, 0], -t * x0 * e, rtol=r,
                               atol=r)
    np.testing.assert_allclose(sol.history_sensitivities[:, :, 0, 1], e, rtol=r, atol=r)


def test_rk4_save_every_history_sensitivities():
    src = DECAY.replace("METHOD", "rk4(dt = 0.1, steps = 10)")
    sol = vgpu.solve(src, np.array([1.0]), backend="numpy", dtype="float64", save_every=5,
                     sensitivities=["k"])
    assert sol.history_sensitivities.shape == (3, 1, 1, 1)
    np.testing.assert_allclose(sol.history_sensitivities[:, 0, 0, 0],
                               -sol.times * np.exp(-0.5 * sol.times), rtol=1e-6)


# --- noise: the pathwise derivative on the same increments ----------------------
GBM = """
field gbm {
    param mu = 0.3
    param sigma = 0.4
    noise xi
    state x
    dx/dt = mu * x + sigma * x * xi + sin(x) * 0.1
    solve euler(dt = 0.01, steps = 50)
}
"""


def philox_normals(n_traj, steps, seed):
    """Z of (trajectory, step) for noise 0: the contract's formula, from vgpu.philox."""
    ctr = np.zeros((steps, n_traj, 4), np.uint32)
    ctr[..., 0] = np.arange(n_traj, dtype=np.uint32)[None, :]
    ctr[..., 1] = np.arange(steps, dtype=np.uint32)[:, None]
    w = vgpu.philox(ctr, (seed & 0xFFFFFFFF, seed >> 32))
    u1 = ((w[..., 0] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -23)
    u2 = ((w[..., 1] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -23)
    return (np.sqrt(np.float32(-2.0) * np.log(u1))
            * np.cos(np.float32(2.0 * np.pi) * u2)).astype(np.float64)


def test_noise_pathwise_sensitivity_equals_complex_step_on_the_same_increments(backend):
    dtype = dtype_of(backend, functions=True)
    n, seed, dt, steps = 8, 7, 0.01, 50
    x0 = np.linspace(0.5, 2.0, n)
    sol = vgpu.solve(GBM, x0, backend=backend, dtype=dtype, seed=seed,
                     sensitivities=["mu", "sigma", "init(x)"])
    Z = philox_normals(n, steps, seed)

    def run(q, h):
        x = h[0]
        for s in range(steps):
            x = x + (q["mu"] * x + np.sin(x) * 0.1) * dt + q["sigma"] * x * np.sqrt(dt) * Z[s]
        return x[None]

    want = complex_step(run, {"mu": 0.3, "sigma": 0.4}, x0[None], ["mu", "sigma", "init(0)"])
    want = np.moveaxis(want, 0, 1)
    np.testing.assert_allclose(sol.sensitivities, want, rtol=tol(dtype, 1e-6, 1e-3),
                               atol=tol(dtype, 1e-8, 1e-4))


# --- what is out of scope: clear errors -----------------------------------------
BASE = """
field f {
    param a = 1.0
    param n = 2.0
    input A[4]
    state x
    dx/dt = -a * x + A[0]
    solve rk4(dt = 0.1, steps = 10)
}
"""


@pytest.mark.parametrize("src, names, words", [
    (BASE, ["zeta"], "not a param"),
    (BASE, ["init(q)"], "names no state"),
    (BASE, ["dt"], "cannot be differentiated"),
    (BASE, ["t1"], "cannot be differentiated"),
    (BASE, ["a", "a"], "named twice"),
    (BASE, [], "names nothing"),
    (BASE, [3], "must be str"),
    (BASE.replace("dt = 0.1", "dt = 0.1 * n"), ["n"], "solve statement"),
    (BASE.replace("param n = 2.0", "param n = 2.0 * a"), ["a"], "default reads"),
    (BASE.replace("-a * x", "-float(int(a)) * x"), ["a"], "step function"),
    (BASE.replace("A[0]", "A[int(a)]"), ["a"], "index of `A"),
    (BASE.replace("A[0]", "A[clamp(int(x), 0, 3)]"), ["a"], "index of `A"),
    (BASE.replace("-a * x", "-floor(x) * a"), ["a"], "step function"),
    (BASE.replace("solve rk4", "when x < 0 { x = A[int(a)] }\n    solve rk4"), ["a"],
     "index of `A"),
    (BASE.replace("solve rk4", "basin l < 4\n    collapse when x < 0\n    solve rk4"), ["a"],
     "collapse"),
    (BASE.replace("solve rk4", "basin l < 4\n    coupled m = x\n    solve rk4"), ["a"],
     "coupled"),
    (GBM.replace("euler", "milstein"), ["mu"], "euler"),
])
def test_out_of_scope_is_a_clear_error(src, names, words):
    inputs = {"A": np.zeros(4)} if "input A" in src else None
    with pytest.raises(vgpu.VgpuError) as err:
        vgpu.solve(src, np.array([0.5, 1.0, 1.5, 2.0]), inputs=inputs, backend="numpy",
                   sensitivities=names)
    assert words in str(err.value)


def test_chunks_are_refused():
    with pytest.raises(vgpu.VgpuError, match="Dask"):
        vgpu.solve(DECAY.replace("METHOD", "rk4(dt = 0.1, steps = 5)"), np.ones(4),
                   sensitivities=["k"], chunks=2)


def test_rodas4_state_limit_counts_the_sensitivities():
    src = LORENZ.replace("METHOD", "rodas4(t1 = 1)").replace("state x, y, z",
                                                              "state x, y, z, w, v")
    src = src.replace("dz/dt", "dw/dt = -w\n    dv/dt = -v\n    dz/dt")
    with pytest.raises(vgpu.VgpuError, match="at most 32"):     # 5 * (1 + 7) = 40
        vgpu.solve(src, np.ones((2, 5)), backend="numpy",
                   sensitivities=["rho", "sigma", "beta", "init(x)", "init(y)", "init(z)",
                                  "init(w)"])


# --- vgpuc ir --sensitivities ----------------------------------------------------
def test_vgpuc_ir_prints_the_derived_equations(tmp_path):
    path = tmp_path / "lorenz.field"
    path.write_text(LORENZ.replace("METHOD", "rk4(dt = 0.01, steps = 10)"))
    env = dict(os.environ, PYTHONPATH=str(REPO), VGPU_CACHE_DIR=str(tmp_path / "c"))
    run = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "ir", str(path),
                          "--sensitivities", "rho,sigma"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "d_x_d_rho = 0.0" in out and "d_z_d_sigma = 0.0" in out
    assert "dd_y_d_rho/dt = " in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("dd_y_d_rho/dt"))
    assert line.rstrip().endswith("+ x)")          # the dF/drho term of dy/dt
    bad = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "ir", str(path),
                          "--sensitivities", "dt"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "cannot be differentiated" in bad.stderr


# --- events: the jump rule ------------------------------------------------------
BALL = """
field ball {
    param g = 9.81
    param e = 0.9
    state y, v
    dy/dt = v
    dv/dt = -g
    when y < 0 and v < 0 { v = -e * v }
    solve METHOD
}
"""


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 100)",
                                    "dopri5(t1 = 1, rtol = 1e-9, atol = 1e-12)"])
def test_bouncing_ball_jump_equals_the_closed_form(backend, method):
    """A ball dropped from H bounces at tau = sqrt(2H/g); at s = t - tau after it,
    v = e g tau - g s and y = e g tau s - g s^2 / 2, so dv/dH = (1 + e) / tau,
    dy/dH = -e + (1 + e) s / tau (-e just after the bounce), dv/de = g tau,
    dy/de = g tau s."""
    dtype = dtype_of(backend)
    g, e = 9.81, 0.9
    H = np.array([1.0, 2.0, 3.0])
    tau = np.sqrt(2 * H / g)
    src = BALL.replace("METHOD", method)
    for i in range(3):
        kw = (dict(steps=int(np.ceil((tau[i] + 0.05) / 0.01))) if "rk4" in method
              else dict(t1=float(tau[i] + 0.05)))
        sol = vgpu.solve(src, np.array([[H[i], 0.0]]), backend=backend, dtype=dtype,
                         sensitivities=["init(y)", "e"], **kw)
        assert sol.event_counts[0, 0] == 1
        s = float(sol.t[0]) - tau[i]
        want = np.array([[-e + (1 + e) * s / tau[i], g * tau[i] * s],
                         [(1 + e) / tau[i], g * tau[i]]])
        np.testing.assert_allclose(sol.sensitivities[0], want, rtol=tol(dtype, 1e-7, 1e-4))


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 300)",
                                    "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-9)"])
def test_events_keep_states_and_steps_bit_identical(backend, method):
    dtype = dtype_of(backend)
    src = BALL.replace("METHOD", method)
    h0 = np.stack([np.linspace(0.5, 3.0, 5), np.zeros(5)], -1)
    plain = vgpu.solve(src, h0, backend=backend, dtype=dtype)
    sens = vgpu.solve(src, h0, backend=backend, dtype=dtype, sensitivities=["e", "init(y)"])
    assert np.array_equal(plain.states, sens.states)
    assert np.array_equal(plain.steps_taken, sens.steps_taken)
    assert np.array_equal(plain.event_counts, sens.event_counts)
    assert np.array_equal(plain.t, sens.t)


def test_a_cascaded_event_takes_the_tau_of_the_one_before_and_no_time_is_nan():
    """`when n >= 2` fires because the spike's reset made it true: its condition does not
    move with time, so it takes the spike's tau_p (finite); an event whose condition has
    no float comparison (nothing moves it: g_t + g_h F = 0) makes them NaN."""
    src = """
field lif {
    param I = 1.5
    state v = 0, n = 0, m = 0
    dv/dt = I - v
    dn/dt = 0
    dm/dt = 0
    when v > 1 { v = 0; n = n + 1 }
    when n >= 2 { m = 1 }
    solve dopri5(t1 = 6, rtol = 1e-9, atol = 1e-12)
}
"""
    sol = vgpu.solve(src, backend="numpy", dims={"N": 1}, dtype="float64",
                     sensitivities=["I"])
    assert sol.event_counts[0, 1] == 1
    assert np.isfinite(sol.sensitivities).all()
    assert sol.sensitivities.shape == (1, 3, 1) and sol.states.shape == (1, 3)
    # a condition with no float comparison moves with nothing: NaN from then on
    no_time = """
field g {
    param a = 1.0
    state x
    dx/dt = -a * x
    when step >= 5 { x = 2 * x }
    solve rk4(dt = 0.1, steps = 10)
}
"""
    nan = vgpu.solve(no_time, np.array([1.0]), backend="numpy", dtype="float64",
                     sensitivities=["a"])
    assert nan.event_counts[0, 0] == 1 and np.isnan(nan.sensitivities).all()
    never = src.replace("when n >= 2 { m = 1 }", "when n >= 2 and v > 5 { m = 1 }")
    assert np.isfinite(vgpu.solve(never, backend="numpy", dims={"N": 1}, dtype="float64",
                                  sensitivities=["I"]).sensitivities).all()


LIF = """
field lif {
    param I = 1.5
    param tau = 0.02
    state v = 0, n = 0, c = 0
    dv/dt = (I - v) / tau
    dn/dt = 0
    dc/dt = 1
    when v > 1 { v = 0; n = n + 1 }
    stop when n >= 3
    solve METHOD
}
"""


@pytest.mark.parametrize("method", ["dopri5(t1 = 1, rtol = 1e-10, atol = 1e-12)",
                                    "rk4(dt = 0.0005, steps = 2000)"])
def test_a_stop_made_true_by_a_reset_takes_that_events_tau(backend, method):
    """Integrate-and-fire: spikes every T = tau ln(I / (I - 1)); `stop when n >= 3` fires
    at the third spike because of its reset, with the spike's tau_p: the clock c stops at
    3T, so dc/dI = -3 tau / (I (I - 1)) and dc/dtau = 3 ln(I / (I - 1)); v is 0 there
    whatever I (dv/dI = 0)."""
    dtype = dtype_of(backend, functions=True)
    I = np.array([1.5, 2.0, 3.0])
    sol = vgpu.solve(LIF.replace("METHOD", method), params={"I": I}, dims={"N": 3},
                     backend=backend, dtype=dtype, sensitivities=["I", "tau"])
    assert np.all(sol.status == 1) and np.all(sol.states[:, 1] == 3)
    r = tol(dtype, 1e-6, 2e-3)
    np.testing.assert_allclose(sol.sensitivities[:, 2, 0], -3 * 0.02 / (I * (I - 1)), rtol=r)
    np.testing.assert_allclose(sol.sensitivities[:, 2, 1], 3 * np.log(I / (I - 1)), rtol=r)
    np.testing.assert_allclose(sol.sensitivities[:, 0, :], 0.0, atol=r)


NOISY_EVENT = """
field ou {
    param theta = 1.0
    param sigma = 0.5
    noise xi
    state x
    dx/dt = -theta * x + sigma * xi
    when x > 0.4 { x = 0.5 * x - 0.1 * theta }
    solve euler(dt = 0.01, steps = 60)
}
"""


def test_noise_events_at_step_ends_jump_by_the_reset_only(backend):
    """With noise, an event happens at the step's end (no location): S+ = R_h S- + R_p,
    the complex-step derivative of the same path with the same resets."""
    dtype = dtype_of(backend)
    n, seed, dt, steps = 8, 3, 0.01, 60
    x0 = np.linspace(-0.2, 0.6, n)
    sol = vgpu.solve(NOISY_EVENT, x0, backend=backend, dtype=dtype, seed=seed,
                     sensitivities=["theta", "sigma", "init(x)"])
    Z = philox_normals(n, steps, seed)

    def run(q, h):
        x = h[0]
        before = x.real > 0.4
        for s in range(steps):
            x = x + (-q["theta"] * x) * dt + q["sigma"] * np.sqrt(dt) * Z[s]
            now = x.real > 0.4
            fire = now & ~before
            x = np.where(fire, 0.5 * x - 0.1 * q["theta"], x)
            before = x.real > 0.4
        return x[None]

    assert sol.event_counts.sum() > 0
    want = np.moveaxis(complex_step(run, {"theta": 1.0, "sigma": 0.5}, x0[None],
                                    ["theta", "sigma", "init(0)"]), 0, 1)
    # (the compiled backends' normals differ from numpy's by the rounding of log/cos)
    np.testing.assert_allclose(sol.sensitivities, want, rtol=tol(dtype, 1e-5, 1e-3),
                               atol=tol(dtype, 1e-7, 1e-4))


@pytest.mark.parametrize("method", ["rk4(dt = 0.01, steps = 200)",
                                    "dopri5(t1 = 2, rtol = 1e-9, atol = 1e-12)"])
def test_a_stop_freezes_the_sensitivities_at_the_stop_time(backend, method):
    """Dropped from H and stopped at the floor (tau = sqrt(2H/g)): the final height is 0
    whatever H (dy/dH = 0), the final speed -sqrt(2 g H) (dv/dH = -1/tau); the event
    counts are the field's own (the block the compiler adds for the stop is not)."""
    dtype = dtype_of(backend)
    src = BALL.replace("METHOD", method).replace(
        "when y < 0 and v < 0 { v = -e * v }", "when v < -100 { v = 0 }\n    stop when y < 0")
    H = np.array([1.0, 2.0, 3.0])
    h0 = np.stack([H, np.zeros(3)], -1)
    sol = vgpu.solve(src, h0, backend=backend, dtype=dtype, sensitivities=["init(y)", "g"])
    plain = vgpu.solve(src, h0, backend=backend, dtype=dtype)
    assert np.array_equal(sol.states, plain.states) and np.array_equal(sol.t, plain.t)
    assert np.array_equal(sol.event_counts, plain.event_counts)
    assert sol.event_counts.shape == (3, 1) and np.all(sol.status == 1)
    tau = np.sqrt(2 * H / 9.81)
    r = tol(dtype, 1e-7, 1e-4)
    np.testing.assert_allclose(sol.sensitivities[:, 0, 0], 0.0, atol=r)
    np.testing.assert_allclose(sol.sensitivities[:, 1, 0], -1 / tau, rtol=r)
    # v = -sqrt(2 g H): dv/dg = -H / sqrt(2 g H) = -tau / 2
    np.testing.assert_allclose(sol.sensitivities[:, 1, 1], -tau / 2, rtol=r)
