"""Hand-vectorised numpy RK4 for the Lorenz sweep: one array per state component."""
from __future__ import annotations

import numpy as np


def lorenz_rk4(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0, dtype=np.float32):
    """Classic RK4 (1/6, 1/3, 1/3, 1/6), vectorised over trajectories, in `dtype`."""
    f = np.dtype(dtype).type
    rho = np.asarray(rho, dtype)
    x, y, z = (np.array(u0[:, k], dtype) for k in range(3))
    sigma, beta, dt = f(sigma), f(beta), f(dt)
    half, sixth, third = f(0.5) * dt, dt / f(6), dt / f(3)

    def F(x, y, z):
        return sigma * (y - x), x * (rho - z) - y, x * y - beta * z

    for _ in range(steps):
        k1x, k1y, k1z = F(x, y, z)
        k2x, k2y, k2z = F(x + half * k1x, y + half * k1y, z + half * k1z)
        k3x, k3y, k3z = F(x + half * k2x, y + half * k2y, z + half * k2z)
        k4x, k4y, k4z = F(x + dt * k3x, y + dt * k3y, z + dt * k3z)
        x = x + (sixth * k1x + third * k2x + third * k3x + sixth * k4x)
        y = y + (sixth * k1y + third * k2y + third * k3y + sixth * k4y)
        z = z + (sixth * k1z + third * k2z + third * k3z + sixth * k4z)
    return np.stack([x, y, z], axis=1)


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    rho = np.asarray(rho, np.float32)
    u0 = np.asarray(u0, np.float32)
    return lambda: lorenz_rk4(rho, u0, dt, steps, sigma, beta, np.float32)


def kuramoto_rk4(theta0, omega, K, dt, steps, basin=256, dtype=np.float32):
    """Hand-vectorised Kuramoto populations (one per `basin` consecutive oscillators)."""
    f = np.dtype(dtype).type
    th = np.asarray(theta0, dtype).reshape(-1, basin)
    om = np.asarray(omega, dtype).reshape(-1, basin)
    K, dt = f(K), f(dt)
    half, sixth, third = f(0.5) * dt, dt / f(6), dt / f(3)

    def F(th):
        s, c = np.sin(th), np.cos(th)
        ms, mc = s.mean(axis=1, keepdims=True), c.mean(axis=1, keepdims=True)
        return om + K * (ms * c - mc * s)

    for _ in range(steps):
        k1 = F(th)
        k2 = F(th + half * k1)
        k3 = F(th + half * k2)
        k4 = F(th + dt * k3)
        th = th + (sixth * k1 + third * k2 + third * k3 + sixth * k4)
    return th.reshape(-1)
