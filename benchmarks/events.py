"""Events: integrate-and-fire neurons beside Brian2, and the bouncing-ball sweep.

1. 100,000 independent leaky integrate-and-fire neurons, `tau dv/dt = I - v`,
   spike and reset to 0 at v > 1, I swept over [0.5, 3), tau = 20 ms, 1 s of model
   time at dt = 0.1 ms with Euler (10,000 steps):
   - VGPU GLSL: `when v > 1 { v = 0 }`, the spike located inside its step;
   - Brian2 (threshold/reset, spikes at step ends): its default code generation
     target (runtime Cython) and its numpy target; Brian2 runs in its own
     interpreter (``--brian-python``, e.g. a venv with `pip install brian2`; it is
     not a dependency of VGPU);
   - a hand-vectorised numpy loop (the same Euler step and step-end reset);
   - VGPU GLSL and cpu on the same field without its `when` block: the step alone,
     what the backend's kernel costs with no event code at all (its ceiling here).
   Every column is timed on a warm call (code generation and compilation done
   by a short run first). Spike counts are compared with the closed form
   floor(1 / (tau ln(I / (I - 1)))).
   Target: VGPU GLSL >= 5x Brian2 (its default target).
   Targets on cpu: VGPU cpu >= 5x Brian2 (cython), and its event path at most 2x the
   cost of the same field's bare step.
2. A high-rate population: 100,000 of the same neurons with I over [0.9, 3) (0 to 25
   spikes each), 2,000 Euler steps: VGPU cpu against the plain numpy loop (step-end
   resets), and the cpu bare step. Target: VGPU cpu >= 5x numpy.
3. The bouncing-ball sweep of examples/bouncing_ball.field at N = 1,048,576
   (rk4, 1000 steps, restitution 0.5..0.9), VGPU GLSL, one warm call.

    python -m benchmarks.events [--brian-python .venv-brian2/bin/python] [--quick]
                                [--json out.json] [--no-ball] [--only-cpu]

Prints a table and writes JSON (load average included: the machine is shared).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
TAU, DT, T1 = 0.02, 1e-4, 1.0
I_LO, I_HI = 0.5, 3.0
HIGH_LO, HIGH_STEPS = 0.9, 2000         # the high-rate population: I over [0.9, 3)

LIF = """field lif {
    param tau = 0.02
    param I = 1.5
    state v = 0
    dv/dt = (I - v) / tau
    %(when)s
    solve euler(dt = %(dt)r, steps = %(steps)d)
}"""

BRIAN = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import brian2 as b2
    n, steps, target = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    b2.prefs.codegen.target = target
    b2.defaultclock.dt = %(dt)r * b2.second
    tau = %(tau)r * b2.second
    G = b2.NeuronGroup(n, "dv/dt = (I - v) / tau : 1\\nI : 1", threshold="v > 1",
                       reset="v = 0", method="euler")
    G.I = np.linspace(%(lo)r, %(hi)r, n, endpoint=False)
    M = b2.SpikeMonitor(G, record=False)
    net = b2.Network(G, M)
    began = time.perf_counter()
    net.run(10 * %(dt)r * b2.second)          # code generation, compilation
    warm = time.perf_counter() - began
    before = np.array(M.count)
    began = time.perf_counter()
    net.run(steps * %(dt)r * b2.second)
    took = time.perf_counter() - began
    counts = (np.array(M.count) - before).tolist()
    print(json.dumps({"seconds": took, "first": warm, "counts": counts,
                      "version": b2.__version__}))
""") % {"dt": DT, "tau": TAU, "lo": I_LO, "hi": I_HI}


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def closed_form(current: np.ndarray, t1: float) -> np.ndarray:
    out = np.zeros(len(current), int)
    above = current > 1
    out[above] = np.floor(t1 / (TAU * np.log(current[above] / (current[above] - 1))))
    return out


def vgpu_lif(n: int, steps: int, backend: str = "glsl", events: bool = True,
             lo: float = I_LO) -> dict:
    """The LIF field on ``backend`` (I over [lo, I_HI)); ``events=False``: the same field
    without its `when` block (no spikes: the step alone, the backend's ceiling here)."""
    import vgpu
    current = np.linspace(lo, I_HI, n, endpoint=False).astype(np.float32)
    src = LIF % {"dt": DT, "steps": steps, "when": "when v > 1 { v = 0 }" if events else ""}
    vgpu.solve(src, params={"I": current[:1024]}, dims={"N": 1024}, backend=backend,
               steps=10)                                   # compile
    began = time.perf_counter()
    sol = vgpu.solve(src, params={"I": current}, dims={"N": n}, backend=backend)
    took = time.perf_counter() - began
    counts = sol.event_counts[:, 0] if events else None
    return {"seconds": took, "counts": counts}


def numpy_lif(n: int, steps: int, lo: float = I_LO) -> dict:
    """The plain numpy loop: the Euler step of every neuron, then the step-end reset."""
    current = np.linspace(lo, I_HI, n, endpoint=False).astype(np.float32)
    v = np.zeros(n, np.float32)
    count = np.zeros(n, np.int32)
    a = np.float32(DT / TAU)
    began = time.perf_counter()
    for _ in range(steps):
        v += a * (current - v)
        spike = v > 1
        v[spike] = 0
        count += spike
    return {"seconds": time.perf_counter() - began, "counts": count}


def brian_lif(python: str, n: int, steps: int, target: str) -> dict:
    proc = subprocess.run([python, "-c", BRIAN, str(n), str(steps), target],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["counts"] = np.asarray(out["counts"])
    return out


def high_rate(n: int, steps: int) -> dict:
    """The high-rate population on cpu, its bare step and the numpy loop (warm calls)."""
    cpu = vgpu_lif(n, steps, "cpu", lo=HIGH_LO)
    bare = vgpu_lif(n, steps, "cpu", events=False, lo=HIGH_LO)
    ref = numpy_lif(n, steps, lo=HIGH_LO)
    return {"n": n, "steps": steps, "cpu": cpu["seconds"], "bare": bare["seconds"],
            "numpy": ref["seconds"], "spikes": int(np.sum(cpu["counts"])),
            "numpy_spikes": int(np.sum(ref["counts"]))}


def _target(targets: dict, what: str, ratio: float, want: float, at_most=False) -> None:
    met = ratio <= want if at_most else ratio >= want
    targets[what] = {"ratio": round(ratio, 2), "met": met}
    print(f"target {what}: {ratio:.2f}x ({'met' if met else 'NOT met'})")


def ball_sweep(n: int) -> dict:
    import vgpu
    src = (ROOT / "examples" / "bouncing_ball.field").read_text()
    vgpu.solve(src, dims={"N": 1024}, backend="glsl", steps=10)        # compile
    began = time.perf_counter()
    sol = vgpu.solve(src, dims={"N": n}, backend="glsl")
    took = time.perf_counter() - began
    return {"seconds": took, "bounces": int(sol.event_counts.sum()),
            "stopped": int((sol.status == 1).sum())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--brian-python", default=str(ROOT / ".venv-brian2" / "bin" / "python"))
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--json", default=None)
    p.add_argument("--no-ball", action="store_true")
    p.add_argument("--only-cpu", action="store_true",
                   help="the cpu columns and their peers only (no GLSL)")
    args = p.parse_args(argv)
    n, steps = (2000, 1000) if args.quick else (100_000, int(round(T1 / DT)))
    t1 = steps * DT
    current = np.linspace(I_LO, I_HI, n, endpoint=False)
    want = closed_form(current.astype(np.float32).astype(np.float64), t1)
    rows, result = [], {"n": n, "steps": steps, "dt": DT, "loadavg_before": loadavg()}
    columns = [("VGPU GLSL", lambda: vgpu_lif(n, steps)),
               ("VGPU cpu", lambda: vgpu_lif(n, steps, "cpu")),
               ("GLSL, no when", lambda: vgpu_lif(n, steps, "glsl", events=False)),
               ("cpu, no when", lambda: vgpu_lif(n, steps, "cpu", events=False)),
               ("numpy loop", lambda: numpy_lif(n, steps))]
    if args.only_cpu:
        columns = [c for c in columns if "GLSL" not in c[0]]
    if os.path.exists(args.brian_python):
        columns += [("Brian2 cython", lambda: brian_lif(args.brian_python, n, steps, "cython")),
                    ("Brian2 numpy", lambda: brian_lif(args.brian_python, n, steps, "numpy"))]
    for name, fn in columns:
        try:
            out = fn()
        except Exception as exc:        # noqa: BLE001 - a column that cannot run says why
            rows.append((name, None, str(exc)))
            continue
        if out["counts"] is None:
            note = "the step alone, no `when` (no spikes): the backend's ceiling"
        else:
            off = np.abs(np.asarray(out["counts"]) - want)
            note = (f"spikes {int(np.sum(out['counts']))}, |count - closed form| max "
                    f"{int(off.max())}")
        rows.append((name, out["seconds"], note))
    result["lif"] = {name: {"seconds": s, "note": note} for name, s, note in rows}
    glsl = result["lif"].get("VGPU GLSL", {}).get("seconds")
    brian = result["lif"].get("Brian2 cython", {}).get("seconds")
    print(f"LIF: {n} neurons, {steps} Euler steps of {DT} s (load {result['loadavg_before']})")
    print(f"{'column':<16} {'seconds':>9} {'vs GLSL':>8}  notes")
    for name, s, note in rows:
        ratio = f"{s / glsl:7.1f}x" if s and glsl else "      -"
        print(f"{name:<16} {s if s is not None else float('nan'):9.2f} {ratio}  {note}")
    if glsl and brian:
        speedup = brian / glsl
        result["target"] = {"what": "VGPU GLSL >= 5x Brian2 (default target)",
                            "ratio": round(speedup, 2), "met": speedup >= 5}
        print(f"target VGPU GLSL >= 5x Brian2: {speedup:.1f}x "
              f"({'met' if speedup >= 5 else 'NOT met'})")
    cpu = result["lif"].get("VGPU cpu", {}).get("seconds")
    bare = result["lif"].get("cpu, no when", {}).get("seconds")
    targets = result.setdefault("targets_cpu", {})
    if cpu and brian:
        _target(targets, "VGPU cpu >= 5x Brian2 (cython)", brian / cpu, 5)
    if cpu and bare:
        _target(targets, "cpu event path <= 2x the bare step", cpu / bare, 2, at_most=True)
    high = high_rate(n, HIGH_STEPS // (5 if args.quick else 1))
    result["high_rate"] = high
    print(f"high rate: {n} neurons, I over [{HIGH_LO}, {I_HI}), {high['steps']} Euler steps: "
          f"VGPU cpu {high['cpu']:.3f} s ({high['spikes']} spikes), numpy loop "
          f"{high['numpy']:.3f} s ({high['numpy_spikes']} spikes at step ends), cpu bare "
          f"step {high['bare']:.3f} s")
    _target(targets, "high rate: VGPU cpu >= 5x the numpy loop", high["numpy"] / high["cpu"], 5)
    if not args.no_ball and not args.only_cpu:
        nb = 16384 if args.quick else 1 << 20
        ball = ball_sweep(nb)
        result["ball"] = {"n": nb, **ball}
        print(f"bouncing-ball sweep, N = {nb}, rk4 x 1000 steps, GLSL: {ball['seconds']:.2f} s, "
              f"{ball['bounces']} bounces, {ball['stopped']} at rest")
    result["loadavg_after"] = loadavg()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
