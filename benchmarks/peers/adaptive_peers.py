"""Adaptive peers of the adaptive Lorenz sweep (benchmarks/lorenz_adaptive.py).

Each ``make_*(rho, u0, t1, rtol, atol, sigma, beta) -> run`` where ``run()``
returns ``(final states (N, 3) float32, accepted steps per trajectory or None)``.

diffrax   diffeqsolve(Tsit5(), PIDController(rtol, atol)) under jit(vmap)  (jax, diffrax)
torch     torchdiffeq.odeint(method="dopri5") on the (N, 3) batch           (torch, torchdiffeq)
scipy     solve_ivp(method="RK45") one trajectory at a time, on a sample     (scipy)

torchdiffeq controls the error of the whole batch as one system (one step size
for all N trajectories: the hardest one sets it); diffrax under vmap gives each
trajectory its own step size, but the vmapped while-loop runs until the last
trajectory is done (diffrax #500, jax #2586).
"""
from __future__ import annotations

import os

import numpy as np

from ..common import optional

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def make_diffrax(rho, u0, t1, rtol, atol, sigma=10.0, beta=8.0 / 3.0):
    jax, why = optional("jax")
    diffrax, why_d = optional("diffrax") if jax is not None else (None, why)
    if jax is None or diffrax is None:
        raise ImportError(why if jax is None else why_d)
    import jax.numpy as jnp

    def vf(t, u, r):
        x, y, z = u[0], u[1], u[2]
        return jnp.stack([sigma * (y - x), x * (r - z) - y, x * y - beta * z])

    term = diffrax.ODETerm(vf)
    controller = diffrax.PIDController(rtol=rtol, atol=atol)

    def one(u, r):
        sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=t1, dt0=None, y0=u, args=r,
                                  saveat=diffrax.SaveAt(t1=True), stepsize_controller=controller,
                                  max_steps=100_000)
        return sol.ys[0], sol.stats["num_accepted_steps"]

    fn = jax.jit(jax.vmap(one))
    r = jnp.asarray(np.asarray(rho, np.float32))
    y0 = jnp.asarray(np.asarray(u0, np.float32))

    def run():
        ys, steps = fn(y0, r)
        return np.asarray(ys.block_until_ready()), np.asarray(steps)
    return run


def make_torch(rho, u0, t1, rtol, atol, sigma=10.0, beta=8.0 / 3.0):
    torch, why = optional("torch")
    tde, why_t = optional("torchdiffeq") if torch is not None else (None, why)
    if torch is None or tde is None:
        raise ImportError(why if torch is None else why_t)
    r = torch.tensor(np.asarray(rho, np.float32))
    y0 = torch.tensor(np.asarray(u0, np.float32))
    t = torch.tensor([0.0, t1], dtype=torch.float32)

    def f(_t, u):
        x, y, z = u[:, 0], u[:, 1], u[:, 2]
        return torch.stack([sigma * (y - x), x * (r - z) - y, x * y - beta * z], dim=1)

    def run():
        with torch.no_grad():
            out = tde.odeint(f, y0, t, method="dopri5", rtol=rtol, atol=atol)
        return out[-1].numpy(), None
    return run


SCIPY_SAMPLE = 64       # trajectories timed per call; the time is scaled to N


def make_scipy(rho, u0, t1, rtol, atol, sigma=10.0, beta=8.0 / 3.0):
    integrate, why = optional("scipy.integrate")
    if integrate is None:
        raise ImportError(why)
    n = len(rho)
    pick = np.unique(np.linspace(0, n - 1, min(n, SCIPY_SAMPLE)).astype(np.int64))

    def run():
        out = np.full((n, 3), np.nan, np.float32)
        steps = np.full(n, -1, np.int64)
        for i in pick:
            r = float(rho[i])
            sol = integrate.solve_ivp(
                lambda _t, u: [sigma * (u[1] - u[0]), u[0] * (r - u[2]) - u[1],
                               u[0] * u[1] - beta * u[2]],
                (0.0, t1), np.asarray(u0[i], np.float64), method="RK45", rtol=rtol, atol=atol)
            out[i] = sol.y[:, -1]
            steps[i] = sol.t.size - 1
        return out, steps
    run.sample = pick
    return run
