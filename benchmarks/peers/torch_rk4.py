"""torchdiffeq peer: odeint(method="rk4", step_size=dt) on a batched (N, 3) CPU tensor.

torchdiffeq's "rk4" is the 3/8-rule variant of RK4 (rk4_alt_step_func): fourth
order, four evaluations a step, like classic RK4, with slightly different weights.
"""
from __future__ import annotations

import numpy as np

from ..common import optional

torch, WHY = optional("torch")
torchdiffeq, WHY_T = optional("torchdiffeq") if torch is not None else (None, WHY)


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    if torch is None or torchdiffeq is None:
        raise ImportError(WHY if torch is None else WHY_T)
    r = torch.from_numpy(np.ascontiguousarray(rho, np.float32))
    y0 = torch.from_numpy(np.ascontiguousarray(u0, np.float32))
    t = torch.tensor([0.0, dt * steps], dtype=torch.float32)

    def f(_t, u):
        x, y, z = u[:, 0], u[:, 1], u[:, 2]
        return torch.stack((sigma * (y - x), x * (r - z) - y, x * y - beta * z), dim=1)

    def run():
        with torch.no_grad():
            sol = torchdiffeq.odeint(f, y0, t, method="rk4", options={"step_size": dt})
        return sol[-1].numpy()
    return run


def threads() -> int | None:
    return torch.get_num_threads() if torch is not None else None
