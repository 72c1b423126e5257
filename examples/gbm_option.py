"""Price a European call by Monte Carlo with examples/gbm_option.field and check it
against the Black–Scholes formula (within the Monte Carlo standard error).

    python examples/gbm_option.py [--paths 1000000] [--backend auto] [--seed 7]

Milstein's scheme on 250 steps has a weak error far below the standard error of
a million paths, so the two prices must agree to a few standard errors; the
script exits 1 when they do not.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import vgpu

FIELD = Path(__file__).resolve().parent / "gbm_option.field"


def black_scholes_call(s0: float, k: float, r: float, sigma: float, t: float) -> float:
    """Black and Scholes (1973): the price of a European call."""
    d1 = (math.log(s0 / k) + (r + sigma**2 / 2) * t) / (sigma * math.sqrt(t))
    d2 = d1 - sigma * math.sqrt(t)
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))        # noqa: E731
    return s0 * cdf(d1) - k * math.exp(-r * t) * cdf(d2)


def monte_carlo(paths: int, backend: str, seed: int, s0: float = 100.0, **params):
    """(price, standard error) from the final prices of ``paths`` trajectories."""
    src = vgpu.load(FIELD)
    sol = vgpu.solve(src, np.full(paths, s0, np.float32), params=params or None,
                     backend=backend, seed=seed)
    p = {"r": 0.05, "K": 100.0, "T": 1.0, **params}
    payoff = math.exp(-p["r"] * p["T"]) * np.maximum(sol.states.astype(np.float64) - p["K"], 0)
    flux_price = float(sol.outputs["payoff"][0]) / paths        # the field's own sum
    return payoff.mean(), payoff.std(ddof=1) / math.sqrt(paths), flux_price


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", type=int, default=1_000_000)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    price, se, flux = monte_carlo(args.paths, args.backend, args.seed)
    took = time.perf_counter() - start
    exact = black_scholes_call(100.0, 100.0, 0.05, 0.2, 1.0)
    z = (price - exact) / se
    print(f"Monte Carlo ({args.paths} paths, 250 Milstein steps, {took:.2f} s): "
          f"{price:.4f} +- {se:.4f}  (flux sum: {flux:.4f})")
    print(f"Black–Scholes: {exact:.4f}   difference: {z:+.2f} standard errors")
    return 0 if abs(z) < 4 else 1


if __name__ == "__main__":
    sys.exit(main())
