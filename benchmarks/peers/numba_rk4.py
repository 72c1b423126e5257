"""Numba peer: a parallel=True float32 RK4 kernel, one trajectory per prange iteration."""
from __future__ import annotations

import numpy as np

from ..common import optional

numba, WHY = optional("numba")

if numba is not None:
    _HALF = np.float32(0.5)
    _TWO = np.float32(2.0)
    _SIX = np.float32(6.0)

    @numba.njit(parallel=True, fastmath=False, cache=False)
    def _lorenz(rho, u0, dt, steps, sigma, beta, out):
        n = rho.shape[0]
        hdt = _HALF * dt
        c6 = dt / _SIX
        for i in numba.prange(n):
            r = rho[i]
            x = u0[i, 0]
            y = u0[i, 1]
            z = u0[i, 2]
            for _ in range(steps):
                k1x = sigma * (y - x)
                k1y = x * (r - z) - y
                k1z = x * y - beta * z
                ax = x + hdt * k1x
                ay = y + hdt * k1y
                az = z + hdt * k1z
                k2x = sigma * (ay - ax)
                k2y = ax * (r - az) - ay
                k2z = ax * ay - beta * az
                ax = x + hdt * k2x
                ay = y + hdt * k2y
                az = z + hdt * k2z
                k3x = sigma * (ay - ax)
                k3y = ax * (r - az) - ay
                k3z = ax * ay - beta * az
                ax = x + dt * k3x
                ay = y + dt * k3y
                az = z + dt * k3z
                k4x = sigma * (ay - ax)
                k4y = ax * (r - az) - ay
                k4z = ax * ay - beta * az
                x = x + c6 * (k1x + _TWO * k2x + _TWO * k3x + k4x)
                y = y + c6 * (k1y + _TWO * k2y + _TWO * k3y + k4y)
                z = z + c6 * (k1z + _TWO * k2z + _TWO * k3z + k4z)
            out[i, 0] = x
            out[i, 1] = y
            out[i, 2] = z


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    if numba is None:
        raise ImportError(WHY)
    rho = np.ascontiguousarray(rho, np.float32)
    u0 = np.ascontiguousarray(u0, np.float32)
    f = np.float32

    def run():
        out = np.empty_like(u0)
        _lorenz(rho, u0, f(dt), int(steps), f(sigma), f(beta), out)
        return out
    return run


def threads() -> int | None:
    return numba.get_num_threads() if numba is not None else None
