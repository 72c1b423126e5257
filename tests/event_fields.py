"""Programs and closed forms shared by the event tests (numpy and the compiled backends)."""
from __future__ import annotations

import math
import warnings

import numpy as np

G = 9.81

# a ball dropped from height y (h0), restitution e; n counts bounces; stops at the K-th
BALL = """field ball {
    param g = 9.81
    param e = 0.9
    param K = 1000
    %(basin)s
    state y, v = 0, n = 0
    dy/dt = v
    dv/dt = -g
    dn/dt = 0
    when y < 0 and v < 0 { v = -e * v; n = n + 1 }
    stop when n >= K
    solve %(solve)s
}"""

# integrate-and-fire: fires with period tau * ln(I / (I - 1)) for I > 1
LIF = """field lif {
    param I = 1.5
    param tau = 0.02
    output spikes[N], bins[50]
    state v = 0
    dv/dt = (I - v) / tau
    when v > 1 { v = 0; flux spikes[i] += 1; flux bins[clamp(int(t * 50), 0, 49)] += 1 }
    solve %(solve)s
}"""


def ball(solve: str, basin: str = "") -> str:
    return BALL % {"solve": solve, "basin": basin}


def lif(solve: str) -> str:
    return LIF % {"solve": solve}


def bounce_times(height: float, e: float, count: int, g: float = G) -> list[float]:
    """The first ``count`` bounce times of a ball dropped from rest at ``height``."""
    v = math.sqrt(2 * g * height)
    t = math.sqrt(2 * height / g)
    times = [t]
    for _ in range(count - 1):
        v *= e
        t += 2 * v / g
        times.append(t)
    return times


def apex(height: float, e: float, k: int) -> float:
    """The apex height after the k-th bounce."""
    return height * e ** (2 * k)


def lif_period(current, tau: float = 0.02):
    return tau * np.log(current / (current - 1))


def lif_count(current, t1: float, tau: float = 0.02):
    """Spikes in (0, t1] (exact multiples of the period are avoided by the sweeps)."""
    return np.floor(t1 / lif_period(current, tau)).astype(int)


# --- the numpy reference of a call, once per test session -------------------------------------
def solve_quietly(src, h0, backend, **kw):
    """vgpu.solve without its StatusWarnings (the tests check the statuses)."""
    import vgpu
    from vgpu_compiler.errors import StatusWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatusWarning)
        return vgpu.solve(src, h0, backend=backend, **kw)


def reference(src, h0=None, **kw):
    """The numpy reference of a call, computed once for every test and backend that makes
    the same call (tests/once.py); a call without a dtype is the one with vgpu.solve's
    default."""
    import inspect

    import vgpu
    from once import once
    kw.setdefault("dtype", inspect.signature(vgpu.solve).parameters["dtype"].default)
    return once(solve_quietly, src, h0, "numpy", **kw)
