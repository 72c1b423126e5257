"""The long reliability runs: source fuzzing and generated programs on both backends.

    python -m benchmarks.reliability --fuzz 100000 --programs 2000
    python -m benchmarks.reliability --quick            # a smoke run (seconds)

--fuzz N     N mutated or random program texts through the front end. Anything but a
             vgpu.VgpuError, or a SourceError whose line/column lie outside the text
             (or whose caret shows another line), is an internal error. Mutants that
             compile (distinct IR, up to --run-compiled of them) also run for 2 steps on
             a tiny grid on numpy and GLSL, which must agree.
--programs M M generated well-formed fields (tests/strategies.py) run on both backends;
             the largest disagreement is reported in units of the tolerance
             (rtol = atol = 1e-4 in float32, 1e-9 in float64; <= 1 agrees).

Writes the figures as JSON (benchmarks/results/reliability.json, or --json PATH)
and prints them; exits 1 when anything failed. Standalone: not part of
`python -m benchmarks`. The figures are quoted in docs/reliability.md.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
KEEP = 10                   # failing examples kept in the report


GPU = ["glsl"]              # the GPU backend compared with numpy (--gpu)


def fuzz(n: int, seed: int, run_compiled: int, log) -> dict:
    import strategies as S
    from vgpu_compiler.errors import VgpuError
    rng = random.Random(seed)
    seeds = S.examples()
    kinds: collections.Counter = collections.Counter()
    internal, disagreements = [], []
    seen, ran, compiled = set(), 0, 0
    gl = _gl_available()
    t0 = time.perf_counter()
    for k in range(n):
        if k and k % 10000 == 0:
            log(f"  fuzz {k}/{n}: {len(internal)} internal errors, {compiled} compiled, "
                f"{ran} run on both backends, {len(disagreements)} disagreements")
        src = S.fuzz_input(rng, seeds)
        try:
            prog = S.front_end(src)
        except AssertionError as exc:       # a VgpuError with a bad position or display
            kinds["bad position"] += 1
            internal.append({"src": src, "error": f"position: {exc}"})
            continue
        except Exception as exc:            # noqa: BLE001 - what the fuzzer hunts
            kinds["internal"] += 1
            internal.append({"src": src, "error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc(limit=-4)})
            continue
        if prog is None:
            kinds["VgpuError"] += 1
            continue
        compiled += 1
        key = tuple(prog.program.fields)
        if gl and ran < run_compiled and key not in seen:
            seen.add(key)
            ran += 1
            try:
                problem = S.run_both(src, prog, gpu=GPU[0])
            except Exception as exc:        # noqa: BLE001
                problem = f"run_both crashed: {type(exc).__name__}: {exc}"
            if problem:
                disagreements.append({"src": src, "problem": problem})
    return {
        "inputs": n, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
        "compiled": compiled, "rejected_with_vgpu_error": kinds["VgpuError"],
        "internal_errors": len(internal), "compiled_run_on_both_backends": ran,
        "backend_disagreements": len(disagreements),
        "internal_error_examples": internal[:KEEP], "disagreement_examples": disagreements[:KEEP],
    }


def programs(n: int, seed: int, log) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    import strategies as S
    stats = {"run": 0, "disagreements": 0, "errors": 0, "worst": 0.0}
    features: collections.Counter = collections.Counter()
    failures = []
    t0 = time.perf_counter()

    @hseed(seed)
    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(S.cases())
    def one(case):
        stats["run"] += 1
        features.update(case.features or ("plain",))
        try:
            if GPU[0] == "wgpu" and case.dtype == "float64":    # refused, as it must be
                worst, problem = S.compare(case, "wgpu"), None
            else:
                worst, problem = S.measure(case, GPU[0])
        except Exception as exc:            # noqa: BLE001 - an error on a well-formed program
            stats["errors"] += 1
            failures.append({"case": repr(case), "problem": f"{type(exc).__name__}: {exc}"})
            return
        stats["worst"] = max(stats["worst"], worst)
        if problem:
            stats["disagreements"] += 1
            failures.append({"case": repr(case), "problem": problem})
        if stats["run"] % 250 == 0:
            log(f"  programs {stats['run']}/{n}: {stats['disagreements']} disagreements, "
                f"{stats['errors']} errors, worst {stats['worst']:.3g} x tolerance")

    if n:
        one()
    return {
        "programs": stats["run"], "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
        "disagreements": stats["disagreements"], "errors": stats["errors"],
        "max_disagreement_in_tolerances": stats["worst"],
        "tolerance": {"float32": list(S.TOL["float32"]), "float64": list(S.TOL["float64"])},
        "features": dict(features), "failure_examples": failures[:KEEP],
    }


def _gl_available() -> bool:
    from vgpu_compiler import backends
    return backends.get(GPU[0]).available()[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.reliability",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--fuzz", type=int, default=100_000, help="fuzzed source inputs")
    ap.add_argument("--programs", type=int, default=2000, help="generated programs")
    ap.add_argument("--run-compiled", type=int, default=600,
                    help="at most this many compiling mutants run on both backends")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpu", choices=("glsl", "wgpu"), default="glsl",
                    help="the GPU backend compared with the numpy reference (default glsl)")
    ap.add_argument("--quick", action="store_true", help="--fuzz 2000 --programs 30")
    ap.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    args = ap.parse_args(argv)
    if args.quick:
        args.fuzz, args.programs, args.run_compiled = 2000, 30, 20
    GPU[0] = args.gpu
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    os.environ.setdefault("VGPU_CACHE_DIR", tempfile.mkdtemp(prefix="vgpu-reliability-"))

    def log(msg):
        print(msg, flush=True)

    import vgpu_compiler
    from vgpu_compiler.backends.glsl import device as gl
    report = {
        "command": "python -m benchmarks.reliability " + " ".join(argv or sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "gl": gl.device_info().get("renderer", "no GL context")},
        "version": getattr(vgpu_compiler, "__version__", ""), "gpu_backend": args.gpu,
    }
    log(f"fuzzing {args.fuzz} inputs ...")
    report["fuzz"] = fuzz(args.fuzz, args.seed, args.run_compiled, log)
    log(f"running {args.programs} generated programs on both backends ...")
    report["programs"] = programs(args.programs, args.seed, log)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str))
    f, p = report["fuzz"], report["programs"]
    log(f"\nfuzz:     {f['inputs']} inputs, {f['internal_errors']} internal errors, "
        f"{f['compiled']} compiled, {f['compiled_run_on_both_backends']} run on both backends, "
        f"{f['backend_disagreements']} disagreements ({f['seconds']} s)")
    log(f"programs: {p['programs']} compared, {p['disagreements']} disagreements, "
        f"{p['errors']} errors, max disagreement {p['max_disagreement_in_tolerances']:.3g} "
        f"x tolerance ({p['seconds']} s)")
    log(f"written to {args.json}")
    bad = f["internal_errors"] + f["backend_disagreements"] + p["disagreements"] + p["errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
