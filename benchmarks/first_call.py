"""First contact: what a new user's first process pays, on the default backend (auto).

Every measurement is a new Python process with its own empty cache folder
(VGPU_CACHE_DIR), repeated (5 by default, --repeat), the median reported with the
range; wall time, and the CPU time of the process and of the compilers it ran (less
moved by other load on the machine):

  python -c pass         the interpreter's own start, for scale
  import numpy           for scale (VGPU needs it)
  import vgpu
  first run_field, cold  an empty cache folder: the parser's tables from the package
                         (shipped beside the grammar), the templates compiled, the C
                         compiler run (the probe, in the background, and the kernel)
  first run_field, warm  a second process on that folder: everything loaded from disk
  a new field            the parser and templates on disk, the kernel not (a field the
                         user has not run before): render and compile
  make demo, cold/warm   examples/demo.py's "first call (compile + run)" line

The field is examples/lorenz.field, 100 trajectories, rk4, 300 steps (the run itself
is well under a millisecond). Where the time goes: a cold and a warm process per
repeat run the call with timers around its phases (the parser, the probe, the kernel's
plan, key, render and compile: wall and CPU time, no profiler); `python -X importtime`
splits `import vgpu` by module group; and one more process of each kind runs the call
under cProfile (which slows Python down, so read its entries as shares).

    python -m benchmarks.first_call [--repeat 5] [--no-demo] [--quick] [--json out.json]

prints the tables and the targets and writes everything as JSON (by default
benchmarks/results/first_call-<time>.json).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

from .common import Config, Result, Table, Target, jsonable, loadavg, vgpu_module

NAME = "first_call"
ROOT = pathlib.Path(__file__).resolve().parent.parent
FIELD = ROOT / "examples" / "lorenz.field"
N, STEPS = 100, 300
IMPORT_TARGET, WARM_TARGET, COLD_TARGET = 0.2, 0.5, 1.0

CHILD = r"""
import json, os, sys, time
w0, c0 = time.perf_counter(), time.process_time()
import vgpu
out = {"import_s": time.perf_counter() - w0, "import_cpu_s": time.process_time() - c0}
import numpy as np
src = open(sys.argv[1]).read()
n, steps, backend, profile = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
h0 = np.tile(np.float32([1, 0, 0]), (n, 1))
args = dict(params={"rho": np.linspace(0, 21, n).astype(np.float32)}, backend=backend,
            dt=0.001, steps=steps)
kids = os.times()
w, c = time.perf_counter(), time.process_time()
if profile == "1":
    import cProfile, pstats, io
    prof = cProfile.Profile()
    prof.enable()
    h = vgpu.run_field(src, h0, **args)
    prof.disable()
    stats = pstats.Stats(prof)
    top = []
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
        if ct >= 0.002:
            top.append((ct, f"{os.path.relpath(file) if file.startswith('/') else file}:{fn}"))
    top.sort(reverse=True)
    out["profile"] = [[name, ct] for ct, name in top]
else:
    h = vgpu.run_field(src, h0, **args)
out["first_s"] = time.perf_counter() - w
after = os.times()
out["first_cpu_s"] = time.process_time() - c
out["compiler_cpu_s"] = (after.children_user + after.children_system
                         - kids.children_user - kids.children_system)
out["finite"] = bool(np.isfinite(h).all())
from vgpu_compiler.call.counters import COUNTERS
out["counters"] = COUNTERS.snapshot()
from vgpu_compiler import pipeline
out["backend"] = ",".join(sorted(pipeline._chosen))
out["heavy"] = [m for m in ("lark", "jinja2", "moderngl", "wgpu", "cffi") if m in sys.modules]
print("RESULT " + json.dumps(out))
"""

# The same first call with timers around its phases (no profiler: the wall and CPU time
# of each, as it runs). The modules timed are imported before the call (their import is
# reported on its own, "imports"), so this process's call is not the headline figure.
PHASES_CHILD = r"""
import json, os, sys, time
import numpy as np
import vgpu
w0, c0 = time.perf_counter(), time.process_time()
from vgpu_compiler.frontend import parser_cache
from vgpu_compiler.backends.cpu import kernel, library_cache, toolchain
from vgpu_compiler.backends.shader import template
T = {"imports": [time.perf_counter() - w0, time.process_time() - c0]}
def timed(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        w, c, kids = time.perf_counter(), time.process_time(), os.times()
        try:
            return f(*a, **k)
        finally:
            after = os.times()
            cell = T.setdefault(label, [0.0, 0.0])
            cell[0] += time.perf_counter() - w
            cell[1] += (time.process_time() - c + after.children_user + after.children_system
                        - kids.children_user - kids.children_system)
    setattr(owner, name, g)
timed(parser_cache, "load_or_build", "parser")
timed(toolchain, "available", "probe")
timed(kernel, "plan", "plan")
timed(kernel.Plan, "key", "key")
timed(template, "environment", "jinja")
timed(kernel.Plan, "render", "render")
timed(toolchain, "_compile", "compiler")
timed(library_cache, "load", "load")
src = open(sys.argv[1]).read()
n, steps = int(sys.argv[2]), int(sys.argv[3])
h0 = np.tile(np.float32([1, 0, 0]), (n, 1))
w, c, kids = time.perf_counter(), time.process_time(), os.times()
vgpu.run_field(src, h0, params={"rho": np.linspace(0, 21, n).astype(np.float32)},
               backend=sys.argv[4], dt=0.001, steps=steps)
after = os.times()
T["call"] = [time.perf_counter() - w, time.process_time() - c + after.children_user
             + after.children_system - kids.children_user - kids.children_system]
print("RESULT " + json.dumps(T))
"""
# (label, what) of the phases, in the order a cold call meets them; nested ones indented
PHASES = [("call", "the first run_field (modules already imported)"),
          ("parser", "  the parser (tables built / loaded)"),
          ("probe", "  waiting for the cpu backend's probe (compiled / loaded, in the "
                    "background since the call began)"),
          ("plan", "  describe + print the kernel"),
          ("key", "  the kernel's disk key"),
          ("render", "  render the C text"),
          ("jinja", "    of it: import Jinja2, make the environment"),
          ("compiler", "  the C compiler (probe and kernel; its CPU time)"),
          ("load", "  look up / load a library"),
          ("imports", "imports of the timed modules (before the call)")]

SCALE = {"python -c pass": "pass",
         "import numpy": "import numpy",
         "import vgpu": "import vgpu"}


def _env(cache: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["VGPU_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)    # (as installed: the bytecode is on disk)
    return env


def _child(cache: pathlib.Path, backend: str = "auto", profile: bool = False) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(FIELD), str(N), str(STEPS),
                           backend, "1" if profile else "0"],
                          env=_env(cache), capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()
    raise RuntimeError(tail[-1] if tail else f"child exited with {proc.returncode}")


def _phases(cache: pathlib.Path, backend: str = "auto") -> dict:
    proc = subprocess.run([sys.executable, "-c", PHASES_CHILD, str(FIELD), str(N), str(STEPS),
                           backend], env=_env(cache), capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()
    raise RuntimeError(tail[-1] if tail else f"child exited with {proc.returncode}")


# -X importtime's self times of `import vgpu`, summed by group (first match wins)
IMPORT_GROUPS = [("numpy", "numpy"), ("vgpu_compiler.ir", "VGPU's IR (ir/)"),
                 ("vgpu_compiler.call", "VGPU's call layer (call/)"),
                 ("vgpu_compiler", "VGPU, the rest (pipeline, errors, backends' registry...)"),
                 ("vgpu", "VGPU, the rest (pipeline, errors, backends' registry...)"),
                 ("", "the standard library, other packages")]


def _importtime(cache: pathlib.Path) -> dict:
    """`python -X importtime -c 'import vgpu'`: {group: self seconds}, and the five
    largest of VGPU's modules by self time."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import vgpu"],
                         env=_env(cache), capture_output=True, text=True, timeout=120, cwd=ROOT)
    block, lines = [], []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "self" in parts[0]:
            continue
        name = parts[2][1:]
        lines.append((int(parts[0].split(":")[1]), name.strip()))
        if not name.startswith(" "):        # a top-level import: its block ends here
            block, lines = (lines if name == "vgpu" else block), []
    groups: dict[str, float] = {}
    mine = []
    for self_us, name in block:     # (site's imports, made before, are not counted)
        label = next(lab for prefix, lab in IMPORT_GROUPS
                     if name == prefix or name.startswith(prefix + ".") or not prefix)
        groups[label] = groups.get(label, 0.0) + self_us / 1e6
        if name.startswith("vgpu"):
            mine.append((self_us / 1e6, name))
    mine.sort(reverse=True)
    return {"groups": groups, "largest": [[n, t] for t, n in mine[:5]]}


def _wall(code: str, cache: pathlib.Path) -> float:
    script = ("import time, os; t = time.perf_counter(); exec(os.environ['CODE']); "
              "print('RESULT', time.perf_counter() - t)")
    env = dict(_env(cache), CODE=code)
    t0 = _now()
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    total = _now() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1])
    return total


def _now() -> float:
    import time
    return time.perf_counter()


def _demo(cache: pathlib.Path) -> float | None:
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], env=_env(cache),
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    found = re.search(r"first call \(compile \+ run\):\s*([0-9.]+) ms", out.stdout)
    return float(found.group(1)) / 1e3 if found else None


def _stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def run(cfg: Config, demo: bool = True) -> Result:
    res = Result(NAME)
    reps = 1 if cfg.quick else cfg.repeat
    table = Table(f"First contact in fresh processes: {FIELD.name}, N = {N}, rk4, {STEPS} "
                  f"steps, backend='auto' (median of {reps}, [min, max])",
                  ["what", "wall s", "range s", "CPU s (process + compiler)", "ran on",
                   "compiles", "disk hits"])
    res.tables.append(table)
    vgpu, why = vgpu_module()
    if vgpu is None:
        table.rows.append([f"skipped: {why}"] + [None] * 6)
        return res
    load_before = loadavg()
    rows: dict[str, list[dict]] = {k: [] for k in
                                   ("cold", "warm", "new field", "demo cold", "demo warm")}
    scale: dict[str, list[float]] = {k: [] for k in SCALE}
    phases: dict[str, list[dict]] = {"cold": [], "warm": []}
    imports: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="vgpu-first-call-") as tmp:
        tmp = pathlib.Path(tmp)
        for i in range(reps):
            cache = tmp / f"c{i}"
            for label, code in SCALE.items():
                scale[label].append(_wall(code, tmp / "scale"))
            rows["cold"].append(_child(cache))
            rows["warm"].append(_child(cache))
            for lib in (cache / "cpu").glob("field-*"):      # the kernel alone is new
                lib.unlink()
            rows["new field"].append(_child(cache))
            phase_cache = tmp / f"p{i}"
            phases["cold"].append(_phases(phase_cache))
            phases["warm"].append(_phases(phase_cache))
            imports.append(_importtime(tmp / "scale"))
            if demo and i < 3:
                demo = tmp / f"d{i}"
                rows["demo cold"].append({"first_s": _demo(demo)})
                rows["demo warm"].append({"first_s": _demo(demo)})
        prof_cache = tmp / "profile"
        profiles = {"cold": _child(prof_cache, profile=True),
                    "warm": _child(prof_cache, profile=True)}
        shutil.rmtree(prof_cache, ignore_errors=True)
    for label, values in scale.items():
        med, lo, hi = _stats(values)
        table.rows.append([f"{label} (whole process)", med, f"[{lo:.3f}, {hi:.3f}]", None,
                           None, None, None])
    import_s = [r["import_s"] for r in rows["cold"] + rows["warm"]]
    med, lo, hi = _stats(import_s)
    table.rows.append(["import vgpu (timed inside)", med, f"[{lo:.3f}, {hi:.3f}]",
                       statistics.median(r["import_cpu_s"] for r in rows["cold"] + rows["warm"]),
                       None, None, None])
    summary = {}
    for label in ("cold", "warm", "new field"):
        rs = rows[label]
        med, lo, hi = _stats([r["first_s"] for r in rs])
        cpu = statistics.median(r["first_cpu_s"] + r["compiler_cpu_s"] for r in rs)
        c = rs[0]["counters"]
        table.rows.append([f"first run_field, {label}", med, f"[{lo:.3f}, {hi:.3f}]", cpu,
                           rs[0].get("backend"), c.get("compiles"),
                           c.get("disk_hits")])
        summary[label] = med
    for label in ("demo cold", "demo warm"):
        values = [r["first_s"] for r in rows[label] if r["first_s"] is not None]
        if values:
            med, lo, hi = _stats(values)
            table.rows.append([f"make demo's first call, {label[5:]} (65,536 x 1000)", med,
                               f"[{lo:.3f}, {hi:.3f}]", None, None, None, None])
    load_after = loadavg()
    table.notes = [f"load average before {load_before}, after {load_after} (2 cores: other "
                   "work on the machine stretches wall times; CPU time less so)",
                   "cold: an empty cache folder (compiled templates, the compiler "
                   "probe's and the kernel's libraries all made; the parser's tables "
                   "shipped with the package); warm: the same folder in the next process; "
                   "new field: templates on disk, the kernel compiled",
                   "heavy modules a warm first call imported: "
                   + (", ".join(rows["warm"][0]["heavy"]) or "none")]
    phase_table = Table(f"Where the first call's time goes (timers, no profiler; median of "
                        f"{reps} processes each; CPU includes the compilers')",
                        ["phase", "cold wall s", "cold CPU s", "warm wall s", "warm CPU s"])
    for label, what in PHASES:
        cells = []
        for which in ("cold", "warm"):
            got = [p[label] for p in phases[which] if label in p]
            cells += ([statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)]
                      if got else [None, None])
        phase_table.rows.append([what] + cells)
    res.tables.append(phase_table)
    import_table = Table(f"Where `import vgpu` goes (python -X importtime, self times summed; "
                         f"median of {reps})", ["modules", "s"])
    for label in dict.fromkeys(lab for _, lab in IMPORT_GROUPS):
        import_table.rows.append([label, statistics.median(
            m["groups"].get(label, 0.0) for m in imports)])
    import_table.notes = ["VGPU's largest modules (self s, one run): " + ", ".join(
        f"{n} {t:.4f}" for n, t in imports[0]["largest"]),
        "-X importtime adds its own overhead: read the shares"]
    res.tables.append(import_table)
    prof_table = Table("Where the first call's time goes (cProfile, cumulative s; one "
                       "process each)", ["function", "cold", "warm"])
    wanted = _profile_rows(profiles)
    prof_table.rows.extend(wanted)
    res.tables.append(prof_table)
    res.data = {"processes": rows, "scale": scale, "profiles": profiles, "phases": phases,
                "importtime": imports,
                "load": [load_before, load_after]}
    med_import = statistics.median(import_s)
    res.targets += [
        Target(f"import vgpu at most {IMPORT_TARGET} s", med_import <= IMPORT_TARGET,
               f"{med_import:.3f} s (median)"),
        Target(f"first run_field with a warm disk cache at most {WARM_TARGET} s",
               summary["warm"] <= WARM_TARGET, f"{summary['warm']:.3f} s (median)"),
        Target(f"first run_field cold (compiler included) at most {COLD_TARGET} s",
               summary["cold"] <= COLD_TARGET, f"{summary['cold']:.3f} s (median)"),
    ]
    return res


PROFILED = [
    ("pipeline.py:solve_call", "the call"),
    ("pipeline.py:parsed", "  front end (parse, check, IR)"),
    ("parser_cache.py:load_or_build", "    the parser (tables loaded or built)"),
    ("backends/__init__.py:auto_order", "  auto's order"),
    ("cpu/toolchain.py:available", "  the cpu backend's probe"),
    ("cpu/kernel.py:plan", "  describe + print the kernel"),
    ("cpu/kernel.py:key", "  the kernel's disk key"),
    ("cpu/kernel.py:render", "  render the C text (templates)"),
    ("cpu/toolchain.py:_compile", "  the C compiler (probe, kernel)"),
    ("cpu/library_cache.py:load", "  look up / load the library"),
    ("<built-in method builtins.exec>", "  imports (module bodies)"),
]


def _profile_rows(profiles: dict) -> list[list]:
    out = []
    for key, label in PROFILED:
        cells = []
        for which in ("cold", "warm"):
            entries = profiles[which].get("profile", [])
            cells.append(sum(ct for name, ct in entries if name.endswith(key)) or None)
        out.append([label] + cells)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="processes of each kind (default 5)")
    p.add_argument("--quick", action="store_true", help="one process of each kind")
    p.add_argument("--no-demo", action="store_true", help="leave out make demo's first call")
    p.add_argument("--json", type=pathlib.Path, default=None)
    args = p.parse_args(argv)
    res = run(Config(quick=args.quick, repeat=args.repeat), demo=not args.no_demo)
    print(res.render())
    path = args.json or (ROOT / "benchmarks" / "results"
                         / f"first_call-{_dt.datetime.now():%Y%m%d-%H%M%S}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(res.to_json()), indent=1) + "\n")
    print(f"\nJSON written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
