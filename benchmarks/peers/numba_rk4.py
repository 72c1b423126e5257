"""Numba peers: parallel=True float32 RK4 kernels.

make          the straightforward kernel: one trajectory per prange iteration, the
              step loop inside (scalar code in each thread)
make_blocked  the same arithmetic written for SIMD: prange over blocks of 64
              trajectories, the step loop outside and the 64 lanes inside, so
              LLVM vectorises across trajectories (what llvmpipe does for GLSL)
Both without fastmath (IEEE float32, like the GLSL and numpy columns).
"""
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


    _BLOCK = 64

    @numba.njit(parallel=True, fastmath=False, cache=False)
    def _lorenz_blocked(rho, u0, dt, steps, sigma, beta, out):
        n = rho.shape[0]
        hdt = _HALF * dt
        c6 = dt / _SIX
        for b in numba.prange((n + _BLOCK - 1) // _BLOCK):
            lo = b * _BLOCK
            m = min(lo + _BLOCK, n) - lo
            x = np.empty(_BLOCK, np.float32)
            y = np.empty(_BLOCK, np.float32)
            z = np.empty(_BLOCK, np.float32)
            r = np.empty(_BLOCK, np.float32)
            for j in range(m):
                x[j] = u0[lo + j, 0]
                y[j] = u0[lo + j, 1]
                z[j] = u0[lo + j, 2]
                r[j] = rho[lo + j]
            for _ in range(steps):
                for j in range(m):
                    xj, yj, zj, rj = x[j], y[j], z[j], r[j]
                    k1x = sigma * (yj - xj)
                    k1y = xj * (rj - zj) - yj
                    k1z = xj * yj - beta * zj
                    ax, ay, az = xj + hdt * k1x, yj + hdt * k1y, zj + hdt * k1z
                    k2x = sigma * (ay - ax)
                    k2y = ax * (rj - az) - ay
                    k2z = ax * ay - beta * az
                    ax, ay, az = xj + hdt * k2x, yj + hdt * k2y, zj + hdt * k2z
                    k3x = sigma * (ay - ax)
                    k3y = ax * (rj - az) - ay
                    k3z = ax * ay - beta * az
                    ax, ay, az = xj + dt * k3x, yj + dt * k3y, zj + dt * k3z
                    k4x = sigma * (ay - ax)
                    k4y = ax * (rj - az) - ay
                    k4z = ax * ay - beta * az
                    x[j] = xj + c6 * (k1x + _TWO * k2x + _TWO * k3x + k4x)
                    y[j] = yj + c6 * (k1y + _TWO * k2y + _TWO * k3y + k4y)
                    z[j] = zj + c6 * (k1z + _TWO * k2z + _TWO * k3z + k4z)
            for j in range(m):
                out[lo + j, 0] = x[j]
                out[lo + j, 1] = y[j]
                out[lo + j, 2] = z[j]


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0, kernel=None):
    if numba is None:
        raise ImportError(WHY)
    rho = np.ascontiguousarray(rho, np.float32)
    u0 = np.ascontiguousarray(u0, np.float32)
    f = np.float32

    kernel = kernel or _lorenz

    def run():
        out = np.empty_like(u0)
        kernel(rho, u0, f(dt), int(steps), f(sigma), f(beta), out)
        return out
    return run


def make_blocked(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    if numba is None:
        raise ImportError(WHY)
    return make(rho, u0, dt, steps, sigma, beta, kernel=_lorenz_blocked)


def threads() -> int | None:
    return numba.get_num_threads() if numba is not None else None
