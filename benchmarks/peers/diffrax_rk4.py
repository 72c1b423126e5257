"""diffrax peer: diffeqsolve of one trajectory, batched with jax.vmap, jit-compiled, on CPU.

diffrax has no classic RK4 solver built in; it takes any explicit Butcher
tableau, so the classic RK4 tableau is declared here as an AbstractERK and run
with ConstantStepSize (fixed steps, the error estimate unused). If that ever
fails to build, Tsit5 with ConstantStepSize (fixed-step, 5th order, 6
evaluations a step) is used instead and the column's note says so.
"""
from __future__ import annotations

import os

import numpy as np

from ..common import optional

os.environ.setdefault("JAX_PLATFORMS", "cpu")
jax, WHY = optional("jax")
diffrax, WHY_D = optional("diffrax") if jax is not None else (None, WHY)

SOLVER_NOTE = ""


def _solver():
    global SOLVER_NOTE
    try:
        from diffrax import AbstractERK, ButcherTableau
        from diffrax import ThirdOrderHermitePolynomialInterpolation as Hermite

        _tab = ButcherTableau(
            c=np.array([0.5, 0.5, 1.0]),
            b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
            b_error=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]) - np.array([0.0, 0.0, 0.0, 1.0]),
            a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
        )

        class RK4(AbstractERK):
            tableau = _tab
            interpolation_cls = Hermite.from_k

            def order(self, terms):
                return 4

        SOLVER_NOTE = "classic RK4 tableau (custom AbstractERK), ConstantStepSize"
        return RK4()
    except Exception as exc:        # pragma: no cover - depends on the diffrax version
        SOLVER_NOTE = f"Tsit5 fixed-step (custom RK4 failed: {type(exc).__name__})"
        return diffrax.Tsit5()


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    if jax is None or diffrax is None:
        raise ImportError(WHY if jax is None else WHY_D)
    import jax.numpy as jnp

    solver = _solver()

    def vf(t, u, r):
        x, y, z = u[0], u[1], u[2]
        return jnp.stack([sigma * (y - x), x * (r - z) - y, x * y - beta * z])

    term = diffrax.ODETerm(vf)

    def one(u, r):
        sol = diffrax.diffeqsolve(term, solver, t0=0.0, t1=dt * steps, dt0=dt, y0=u, args=r,
                                  saveat=diffrax.SaveAt(t1=True),
                                  stepsize_controller=diffrax.ConstantStepSize(),
                                  max_steps=steps + 8)
        return sol.ys[0]

    fn = jax.jit(jax.vmap(one))
    r = jnp.asarray(np.asarray(rho, np.float32))
    y0 = jnp.asarray(np.asarray(u0, np.float32))

    def run():
        return np.asarray(fn(y0, r).block_until_ready())
    return run
