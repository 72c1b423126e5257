"""The reference backend's noise: Euler–Maruyama and Milstein increments (docs/language.md).

After the drift step (``euler``'s update ``x' = x + dt * F``, computed by the
runner), each noise ``k`` in declaration order adds, to each state ``x`` it drives,

    x' = x' + G * dW                                   (Euler–Maruyama)
    x' = (x' + G * dW) + ((0.5 * G) * G_x) * (dW * dW - dt)     (milstein)

with ``G`` and ``G_x = dG/dx`` (taken by the compiler) evaluated on the state at
the step's start, ``t = t_n``, ``step = n``; ``dW = sqrt(dt) * Z``, ``sqrt(dt)``
in the working dtype and ``Z`` the float32 normal of ``noise.normal`` for the
trajectory's flat row-major index, the step number and the noise's index,
converted to the working dtype. (Kloeden and Platen, *Numerical Solution of
Stochastic Differential Equations*, 10.2 (Euler) and 10.3 (Milstein).)
"""
from __future__ import annotations

import numpy as np

from ...noise.normal import key_of, normals


class Noise:
    def __init__(self, run):
        self.run = run
        f = run.field
        self.key = key_of(run.bound.seed)
        self.index = np.asarray(run.layout.trajectory, np.uint64).astype(np.uint32)  # global (a window's too)
        self.sqrt_dt = np.sqrt(run.dt)                  # in the working dtype
        self.half = run.dtype.type(0.5)
        self.milstein = f.solver.method == "milstein"
        # (noise index, state index, root of G, root of G_x or None), in the update's order
        self.terms, roots = [], []
        for n in f.noises:
            for i, g in enumerate(n.diffusion):
                if g is None:
                    continue
                g_at, roots = len(roots), roots + [g]
                s_at = None
                if self.milstein:
                    s_at, roots = len(roots), roots + [n.slope[i]]
                self.terms.append((n.index, i, g_at, s_at))
        self.roots = roots

    def add(self, h: list, new: list, n: int, mask) -> list:
        """The noise increments of step n (state h at its start) added to ``new``."""
        if not self.terms:
            return new
        run = self.run
        frame, _ = run.frame(dict(zip(run.names, h)), run.time(n), np.int32(n), mask)
        values = frame.run(run.schedule("noise", self.roots), mask)
        dws: dict = {}
        dtype = run.dtype
        for k, i, g_at, s_at in self.terms:
            if k not in dws:
                z = normals(self.index, n, k, self.key).astype(dtype)
                dws[k] = self.sqrt_dt * z
            dw, g = dws[k], values[g_at]
            x = new[i] + g * dw
            if s_at is not None:
                x = x + ((self.half * g) * values[s_at]) * (dw * dw - run.dt)
            new[i] = np.asarray(x, dtype)
        return new
