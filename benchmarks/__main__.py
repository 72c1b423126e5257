"""python -m benchmarks [NAME ...] [options]

Runs the chosen benchmarks (all by default), prints one side-by-side table per
problem size and the PASS/FAIL lines of the targets, and writes everything as
JSON (benchmarks/results/<time>.json, or --json PATH). VGPU's disk cache is
pointed at a temporary folder for the run (VGPU_CACHE_DIR), so the user's own
cache is never read, cleared or filled.

    python -m benchmarks                          # everything, default sizes (minutes)
    python -m benchmarks lorenz --n 4096,65536    # one benchmark, chosen sizes
    python -m benchmarks --quick                  # tiny sizes: the smoke test
    python -m benchmarks dispatch --calls 200 --columns vgpu,hand
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import pathlib
import sys
import tempfile
import time

from .common import Config, jsonable, machine_info

BENCHMARKS = {
    "lorenz": "benchmarks.lorenz",
    "dispatch": "benchmarks.dispatch",
    "compile": "benchmarks.compile_latency",
    "matmul": "benchmarks.matmul",
    "kuramoto": "benchmarks.kuramoto",
    "lorenz_adaptive": "benchmarks.lorenz_adaptive",
    "ou": "benchmarks.ou",
    "cluster": "benchmarks.cluster",
    "simulation": "benchmarks.simulation",
    "mlp": "benchmarks.mlp",
    "functions": "benchmarks.functions",
    "fit": "benchmarks.fit",
    "tight": "benchmarks.tight",
    "sensitivities": "benchmarks.sensitivities",
}
RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _ints(text: str) -> list[int]:
    try:
        return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)")
    p.add_argument("--n", type=_ints, help="sizes, comma-separated (lorenz/kuramoto: "
                   "trajectories; matmul: matrix side)")
    p.add_argument("--steps", type=int, help="steps (lorenz, kuramoto)")
    p.add_argument("--calls", type=int, help="calls (dispatch)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs after the warm-up (default 3)")
    p.add_argument("--min-time", type=float, default=1.0,
                   help="stop repeating once this many seconds are spent (default 1)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one timed run")
    p.add_argument("--columns", type=lambda s: [c for c in s.split(",") if c],
                   help="only the columns whose name contains one of these words")
    p.add_argument("--no-peers", action="store_true",
                   help="skip numba, torchdiffeq and diffrax")
    p.add_argument("--json", type=pathlib.Path, help="where to write the JSON "
                   "(default benchmarks/results/<time>.json)")
    p.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    p.add_argument("-v", "--verbose", action="store_true", help="tracebacks of failing columns")
    args = p.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        p.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # A private kernel cache: the benchmarks clear it (dispatch) and time it cold (compile),
    # which must never touch the user's own cache or another process's.
    tmp = tempfile.TemporaryDirectory(prefix="vgpu-bench-")
    os.environ["VGPU_CACHE_DIR"] = os.path.join(tmp.name, "vgpu")
    try:
        return _main(args, argv)
    finally:
        tmp.cleanup()


def _main(args, argv) -> int:
    cfg = Config(quick=args.quick, n=args.n, steps=args.steps, calls=args.calls,
                 repeat=args.repeat, min_time=args.min_time, columns=args.columns,
                 peers=not args.no_peers, verbose=args.verbose)
    names = args.names or list(BENCHMARKS)
    info = machine_info()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    report = {"started": _dt.datetime.now().isoformat(timespec="seconds"),
              "argv": sys.argv[1:] if argv is None else list(argv),
              "quick": args.quick, "machine": info, "benchmarks": {}}
    failed = False
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        t = time.perf_counter()
        try:
            res = importlib.import_module(BENCHMARKS[name]).run(cfg)
        except Exception as exc:       # one broken benchmark does not stop the others
            import traceback
            traceback.print_exc()
            report["benchmarks"][name] = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
            failed = True
            continue
        print(res.render(), flush=True)
        if args.markdown:
            print("\n" + "\n\n".join(t.markdown() for t in res.tables))
        entry = res.to_json()
        entry["seconds"] = time.perf_counter() - t
        report["benchmarks"][name] = entry
        failed |= any(tg.passed is False and tg.kind != "info" for tg in res.targets)
    path = args.json or RESULTS / f"{_dt.datetime.now():%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(report), indent=1) + "\n")
    print(f"\nJSON written to {path}")
    return 1 if (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
