"""Observers against a stored history: N leaky integrate-and-fire neurons' spike counts,
peak voltage, first-spike time and mean voltage, and the memory each way.

    python -m benchmarks.observers [--n 1000000] [--steps 1000] [--json out.json]

The field (float32, rk4, dt = 1e-4, ``--steps`` steps; I_i = linspace(0.9, 3, N), so
the neurons with I < 1 never spike):

    dv/dt = (I - v) / tau,  when v > 1 { v = 0; n = n + 1 }

is run on cpu and glsl (and numpy at a smaller N, ``--numpy-n``) three ways: plain,
with observers, and plain with ``save_every`` (the history a user would otherwise keep
to compute the statistics afterwards). The spike count is ``event_counts``. On every
backend the observers are ``average(v)``, ``peak(v)``, the first-spike time
``first(v > 1)`` (located on the step's extension as the event is), and the same time
written as ``integral(where(n < 0.5, 1.0, 0.0))`` (the time spent before the first
spike: the event ends the step there, so the integrand is 1 up to the spike and 0
after): the run checks that the two first-spike times agree (``--recipe-only``: the
integral without ``peak`` and ``first``, as before the compiled backends computed them).

Memory: the observers' arrays (N values each) against the history: the one measured
(``save_every``) and a dense one (every step, what ``peak`` over step ends needs),
computed as (steps + 1) * N * n_states * itemsize. Prints a table, writes JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

LIF = """
field lif {
    param I = 1.5
    param tau = 0.02
    state v = 0, n = 0
    dv/dt = (I - v) / tau
    dn/dt = 0
    when v > 1 { v = 0; n = n + 1 }
%s
    solve rk4(dt = 0.0001, steps = 1000)
}
"""
EVERYWHERE = ("    observe vbar = average(v)\n"
              "    observe before = integral(where(n < 0.5, 1.0, 0.0))")
NATIVE = EVERYWHERE + "\n    observe vmax = peak(v)\n    observe tfirst = first(v > 1)"


def _solve(vgpu, src, backend, currents, steps, **kw):
    t = time.perf_counter()
    sol = vgpu.solve(src, params={"I": currents}, backend=backend, dtype="float32",
                     steps=steps, **kw)
    return sol, time.perf_counter() - t


def measure(vgpu, backend: str, n: int, steps: int, every: int, native: bool) -> dict:
    currents = np.linspace(0.9, 3.0, n).astype(np.float32)
    observed = LIF % (NATIVE if native else EVERYWHERE)
    plain_src = LIF % ""
    _solve(vgpu, observed, backend, currents[:64], steps)       # compile, warm up
    _solve(vgpu, plain_src, backend, currents[:64], steps)
    _solve(vgpu, plain_src, backend, currents[:64], steps, save_every=every)
    plain, t_plain = _solve(vgpu, plain_src, backend, currents, steps)
    obs, t_obs = _solve(vgpu, observed, backend, currents, steps)
    hist, t_hist = _solve(vgpu, plain_src, backend, currents, steps, save_every=every)
    assert np.array_equal(plain.states, obs.states), "observers changed the states"
    assert np.array_equal(plain.event_counts, obs.event_counts), "observers changed events"
    spikes = obs.event_counts[..., 0]
    before = obs.observed["before"]
    first = np.where(spikes > 0, before, np.nan)
    row = {"backend": backend, "n": n, "steps": steps, "save_every": every,
           "plain_s": t_plain, "observers_s": t_obs, "history_s": t_hist,
           "observer_bytes": int(sum(a.nbytes for a in obs.observed.values())),
           "spike_count_bytes": int(spikes.nbytes),
           "history_bytes": int(hist.history.nbytes),
           "dense_history_bytes": int((steps + 1) * n * 2 * 4),
           "observers": sorted(obs.observed),
           "spikes_total": int(spikes.sum()),
           "first_spike_median_s": float(np.nanmedian(first)) if np.isfinite(first).any()
           else None,
           "never_spiked": int(np.isnan(first).sum())}
    if native:
        tfirst = obs.observed["tfirst"]
        both = np.isfinite(tfirst) & np.isfinite(first)
        assert (np.isnan(tfirst) == np.isnan(first)).all(), "first() and the recipe differ"
        row["first_recipe_vs_native_max_abs"] = float(np.max(np.abs(tfirst - first)[both]))
        row["vmax_max"] = float(np.max(obs.observed["vmax"]))
        row["first_spike_median_s"] = (float(np.nanmedian(tfirst)) if np.isfinite(tfirst)
                                       .any() else None)
    return row


def table(rows: list[dict]) -> str:
    head = (f"{'backend':8} {'N':>9} {'plain s':>8} {'observers s':>11} {'history s':>9} "
            f"{'observers MB':>12} {'history MB (every k)':>20} {'dense history MB':>16}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['backend']:8} {r['n']:>9,} {r['error']}")
            continue
        mb = lambda b: b / 1e6      # noqa: E731
        lines.append(f"{r['backend']:8} {r['n']:>9,} {r['plain_s']:>8.3f} "
                     f"{r['observers_s']:>11.3f} {r['history_s']:>9.3f} "
                     f"{mb(r['observer_bytes'] + r['spike_count_bytes']):>12.2f} "
                     f"{mb(r['history_bytes']):>13.1f} (k={r['save_every']}) "
                     f"{mb(r['dense_history_bytes']):>16.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--numpy-n", type=int, default=20_000)
    ap.add_argument("--glsl-n", type=int, default=None, help="N on glsl (default --n)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=50, help="save_every of the history run")
    ap.add_argument("--backends", default="numpy,cpu,glsl")
    ap.add_argument("--json", default="observers.json")
    ap.add_argument("--recipe-only", action="store_true",
                    help="no peak(v) and first(v > 1): the integral recipe alone")
    args = ap.parse_args(argv)
    import vgpu
    rows = []
    for backend in args.backends.split(","):
        n = {"numpy": args.numpy_n, "glsl": args.glsl_n or args.n}.get(backend, args.n)
        try:
            rows.append(measure(vgpu, backend, n, args.steps, args.every,
                                native=not args.recipe_only))
        except vgpu.VgpuError as e:
            rows.append({"backend": backend, "n": n, "error": str(e).split("\n")[0]})
        print(table(rows[-1:]) if len(rows) == 1 else table(rows).split("\n")[-1], flush=True)
    print()
    print(table(rows))
    out = {"rows": rows, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
