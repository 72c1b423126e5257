"""Stochastic fields against closed forms, on both backends, with tolerances derived from
the sample size: Ornstein–Uhlenbeck mean and variance, GBM's mean, and the orders of
Euler–Maruyama (weak 1, strong 1/2) and Milstein (strong 1) in a convergence table
against GBM's exact solution from the same increments."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler.noise.normal import normals

SIGMAS = 5.0        # every tolerance: 5 standard errors (a false alarm about 1 in 10^6)


@pytest.fixture(params=["numpy", "glsl", "wgpu"])
def backend(request):
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


OU = """field ou {
  param theta = 1.5
  param mu = 0.5
  param sigma = 0.4
  noise xi
  state x
  dx/dt = theta * (mu - x) + sigma * xi
  solve euler(dt = 0.002, steps = 500)
}"""


def test_ou_mean_and_variance_at_t(backend):
    n, theta, mu, sigma, T, x0 = 40_000, 1.5, 0.5, 0.4, 1.0, 2.0
    x = vgpu.run_field(OU, np.full(n, x0, np.float32), backend=backend, seed=2024)
    x = x.astype(np.float64)
    mean = mu + (x0 - mu) * np.exp(-theta * T)
    var = sigma**2 / (2 * theta) * (1 - np.exp(-2 * theta * T))
    # Euler–Maruyama's own mean and variance differ from these by O(theta dt) (< 0.4%):
    # the discretisation bias, bounded exactly from the scheme's recurrence
    a, dt = 1 - theta * 0.002, 0.002
    em_mean = mu + (x0 - mu) * a**500
    em_var = sigma**2 * dt * (1 - a**1000) / (1 - a**2)
    se_mean = np.sqrt(var / n)
    se_var = var * np.sqrt(2 / (n - 1))             # normal samples
    assert abs(x.mean() - mean) < SIGMAS * se_mean + abs(em_mean - mean)
    assert abs(x.var(ddof=1) - var) < SIGMAS * se_var + abs(em_var - var)
    # and the sample is normal: its standardised fourth moment is 3 (se sqrt(24 / n))
    kurt = np.mean((x - x.mean())**4) / x.var()**2
    assert abs(kurt - 3) < SIGMAS * np.sqrt(24 / n)


GBM = """field gbm {
  param mu = 0.8
  param sigma = 0.5
  noise w
  state s
  ds/dt = mu * s + sigma * s * w
  solve %s(dt = 0.01, steps = 100)
}"""


@pytest.mark.parametrize("method", ["euler", "milstein"])
def test_gbm_mean(backend, method):
    n, mu, sigma, T, s0 = 40_000, 0.8, 0.5, 1.0, 1.0
    s = vgpu.run_field(GBM % method, np.full(n, s0, np.float32), backend=backend, seed=7)
    s = s.astype(np.float64)
    mean = s0 * np.exp(mu * T)
    sd = s0 * np.exp(mu * T) * np.sqrt(np.exp(sigma**2 * T) - 1)
    bias = abs(mean - s0 * (1 + mu * 0.01) ** 100)      # both schemes: E = s0 (1 + mu dt)^N
    assert abs(s.mean() - mean) < SIGMAS * sd / np.sqrt(n) + bias


# --- the convergence table ------------------------------------------------------------
T, S0 = 1.0, 1.0
STRONG = (0.1, 1.0)     # mu, sigma: the noise dominates (the strong errors show)
WEAK = (1.5, 0.5)       # the drift dominates (Euler–Maruyama's weak error is clear of noise)
LEVELS = [16, 32, 64, 128, 256]     # steps; dt = T / steps


def brownian_end(n: int, steps: int, seed: int) -> np.ndarray:
    """W_T from the very increments the field used: sqrt(dt) * sum of Z(i, step, 0)."""
    dt = np.float64(T / steps)
    index = np.arange(n, dtype=np.uint32)
    return np.sqrt(dt) * sum(normals(index, k, 0, (seed, 0)).astype(np.float64)
                             for k in range(steps))


def convergence_table(backend: str, mu: float, sigma: float, n: int = 4000,
                      seed: int = 3) -> dict:
    """Per method and level: strong error E|S - S_exact| and the weak error |E[S - S_exact]|
    (the same increments make the difference's variance small: a control variate)."""
    dtype = "float64" if backend == "numpy" else "float32"
    rows: dict = {"euler": [], "milstein": []}
    for steps in LEVELS:
        exact = S0 * np.exp((mu - sigma**2 / 2) * T + sigma * brownian_end(n, steps, seed))
        for method in rows:
            s = vgpu.run_field(GBM % method, np.full(n, S0), backend=backend, dtype=dtype,
                               params={"mu": mu, "sigma": sigma}, dt=T / steps, steps=steps,
                               seed=seed).astype(np.float64)
            d = s - exact
            rows[method].append((steps, np.mean(np.abs(d)), abs(np.mean(d)),
                                 np.std(d) / np.sqrt(n)))
    return rows


def order(errors) -> float:
    """The slope of log(error) against log(dt) over LEVELS: the order of convergence."""
    dts = [T / steps for steps in LEVELS]
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


def show(backend, mu, sigma, rows, capsys) -> None:
    with capsys.disabled():
        print(f"\nGBM mu={mu} sigma={sigma} T={T}, {backend}: steps, strong EM, strong "
              "Milstein, weak EM (+- se), weak Milstein")
        for (n, se, we, wse), (_, sm, wm, _) in zip(rows["euler"], rows["milstein"]):
            print(f"  {n:4d}  {se:.3e}  {sm:.3e}  {we:.3e} (+- {wse:.1e})  {wm:.3e}")


def test_strong_orders(backend, capsys):
    rows = convergence_table(backend, *STRONG)
    show(backend, *STRONG, rows, capsys)
    strong_em = order([r[1] for r in rows["euler"]])
    strong_mil = order([r[1] for r in rows["milstein"]])
    assert 0.35 < strong_em < 0.65, strong_em          # Euler–Maruyama: strong order 1/2
    assert 0.85 < strong_mil < 1.15, strong_mil        # Milstein: strong order 1
    assert rows["milstein"][-1][1] < 0.2 * rows["euler"][-1][1]


def test_weak_order_of_euler_maruyama(backend, capsys):
    rows = convergence_table(backend, *WEAK)
    show(backend, *WEAK, rows, capsys)
    weak_em = order([r[2] for r in rows["euler"]])
    assert 0.8 < weak_em < 1.2, weak_em                # Euler–Maruyama: weak order 1
    for n, _, we, wse in rows["euler"]:                 # the weak error is no sampling artefact
        assert we > 4 * wse
