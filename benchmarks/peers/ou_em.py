"""Ornstein–Uhlenbeck Euler–Maruyama peers: dx = theta (mu - x) dt + sigma dW, float32.

Every peer offers ``make(x0, theta, mu, sigma, dt, steps, seed) -> run`` where
``run()`` returns the final states, float32, shape (N,); each draws its own
normals (the paths differ from VGPU's: the columns are compared by statistics).

numpy_em    hand-vectorised numpy with numpy.random.Generator (PCG64, ziggurat),
            in place, no allocation per step                    (always available)
torch_em    batched CPU tensors, torch.randn per step           (optional: torch)
diffrax_em  diffeqsolve(MultiTerm(ODETerm, ControlTerm(UnsafeBrownianPath)), Euler)
            under jax.jit(jax.vmap), ConstantStepSize            (optional: jax, diffrax)
"""
from __future__ import annotations

import os

import numpy as np

from ..common import optional

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def numpy_em(x0, theta, mu, sigma, dt, steps, seed=0):
    n = len(x0)
    a = np.float32(1 - theta * dt)
    b = np.float32(theta * mu * dt)
    c = np.float32(sigma * np.sqrt(dt))

    def run():
        rng = np.random.default_rng(seed)
        x = np.array(x0, np.float32)
        z = np.empty(n, np.float32)
        for _ in range(steps):
            rng.standard_normal(dtype=np.float32, out=z)
            x *= a
            x += b
            z *= c
            x += z
        return x
    return run


def torch_em(x0, theta, mu, sigma, dt, steps, seed=0):
    torch, why = optional("torch")
    if torch is None:
        raise ImportError(f"torch {why}")
    x_init = torch.from_numpy(np.ascontiguousarray(x0, np.float32))
    sq = float(np.sqrt(dt))

    def run():
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            x = x_init.clone()
            z = torch.empty_like(x)
            for _ in range(steps):
                z.normal_(generator=gen)
                x.add_(theta * (mu - x) * dt + sigma * sq * z)
        return x.numpy()
    return run


def diffrax_em(x0, theta, mu, sigma, dt, steps, seed=0):
    jax, why = optional("jax")
    diffrax, why_d = optional("diffrax") if jax is not None else (None, why)
    if jax is None or diffrax is None:
        raise ImportError(f"jax {why}" if jax is None else f"diffrax {why_d}")
    import jax.numpy as jnp

    t1 = dt * steps
    drift = diffrax.ODETerm(lambda t, y, args: theta * (mu - y))

    def one(y0, key):
        bm = diffrax.UnsafeBrownianPath(shape=(), key=key)
        terms = diffrax.MultiTerm(drift, diffrax.ControlTerm(lambda t, y, args: sigma, bm))
        sol = diffrax.diffeqsolve(terms, diffrax.Euler(), t0=0.0, t1=t1, dt0=dt, y0=y0,
                                  saveat=diffrax.SaveAt(t1=True),
                                  stepsize_controller=diffrax.ConstantStepSize(),
                                  adjoint=diffrax.DirectAdjoint(),    # what an unsafe path allows
                                  max_steps=steps + 8)
        return sol.ys[0]

    fn = jax.jit(jax.vmap(one))
    y0 = jnp.asarray(np.asarray(x0, np.float32))
    keys = jax.random.split(jax.random.PRNGKey(seed), len(x0))

    def run():
        return np.asarray(fn(y0, keys).block_until_ready())
    return run
