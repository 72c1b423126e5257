"""Shared pieces of the benchmark suite: configuration, timing, tables, targets, JSON."""
from __future__ import annotations

import importlib
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


# --- configuration -------------------------------------------------------------

@dataclass
class Config:
    quick: bool = False                 # tiny sizes, one timed repeat: the smoke test
    n: list[int] | None = None          # sizes override (meaning depends on the benchmark)
    steps: int | None = None            # step-count override (lorenz, kuramoto)
    calls: int | None = None            # call-count override (dispatch)
    repeat: int = 3                     # at most this many timed runs after the warm-up
    min_time: float = 1.0               # ... stopping early once this many seconds are spent
    columns: list[str] | None = None    # only columns whose name contains one of these
    peers: bool = True                  # False: skip numba / torchdiffeq / diffrax
    verbose: bool = False               # print tracebacks of failing columns

    def wants(self, column: str) -> bool:
        if self.columns is None:
            return True
        return any(c.lower() in column.lower() for c in self.columns)


# --- optional imports ----------------------------------------------------------

def optional(module: str):
    """Import an optional module: (module, None), or (None, 'not installed' / reason)."""
    try:
        return importlib.import_module(module), None
    except ImportError:
        return None, "not installed"
    except Exception as exc:            # a broken install is reported, not raised
        return None, f"import failed: {type(exc).__name__}: {exc}"


def vgpu_module():
    """The vgpu package, or (None, reason) while the API is missing or broken."""
    mod, why = optional("vgpu")
    if mod is None:
        return None, "vgpu " + why
    if not hasattr(mod, "run_field"):
        return None, "vgpu.run_field not available yet"
    return mod, None


def version_of(dist: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


# --- timing --------------------------------------------------------------------

@dataclass
class Timing:
    first_s: float          # the first call: compile / JIT / cache fill + one run
    best_s: float           # the fastest of the timed runs after it
    runs: int               # how many timed runs
    result: Any = None      # what the last call returned


def measure(fn: Callable[[], Any], cfg: Config, setup_s: float = 0.0) -> Timing:
    """Warm up once (timed as the first call, plus `setup_s` spent building `fn`),
    then time up to cfg.repeat runs, stopping once cfg.min_time seconds are spent."""
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t + setup_s
    best, runs, spent = float("inf"), 0, 0.0
    repeat = 1 if cfg.quick else max(1, cfg.repeat)
    while runs < repeat and (runs == 0 or spent < cfg.min_time):
        t = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t
        best, runs, spent = min(best, dt), runs + 1, spent + dt
    return Timing(first, best, runs, result)


def measure_round_robin(makers: dict[str, Callable[[], Callable[[], Any]]], cfg: Config,
                        on_error: Callable[[str, BaseException], None]) -> dict[str, Timing]:
    """Like `measure` for several columns at once, interleaved: every column is built and
    warmed up, then the timed runs go round-robin (a, b, c, a, b, c, ...), so that load
    from other processes on a shared machine hits every column alike. A column stops
    repeating once it has spent cfg.min_time seconds. Failures go to on_error."""
    fns, timings = {}, {}
    for name, make in makers.items():
        try:
            t = time.perf_counter()
            fn = make()
            setup = time.perf_counter() - t
            t = time.perf_counter()
            result = fn()
            first = time.perf_counter() - t + setup
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            on_error(name, exc)
            continue
        fns[name] = fn
        timings[name] = Timing(first, float("inf"), 0, result)
        log(f"  {name}: first call {first:.3g} s")
    repeat = 1 if cfg.quick else max(1, cfg.repeat)
    spent = dict.fromkeys(fns, 0.0)
    for r in range(repeat):
        for name, fn in list(fns.items()):
            tm = timings[name]
            if r > 0 and spent[name] >= cfg.min_time:
                continue
            try:
                t = time.perf_counter()
                tm.result = fn()
                dt = time.perf_counter() - t
            except Exception as exc:
                on_error(name, exc)
                del fns[name], timings[name]
                continue
            tm.best_s, tm.runs = min(tm.best_s, dt), tm.runs + 1
            spent[name] += dt
    return timings


def log(msg: str) -> None:
    """Progress on stderr (the tables go to stdout when a benchmark ends)."""
    print(msg, file=sys.stderr, flush=True)


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def describe_error(exc: BaseException, cfg: Config) -> str:
    """A column's status after ``exc``: a missing peer is "not installed", not an error."""
    if isinstance(exc, ImportError):
        return "not installed" if "not installed" in str(exc) else str(exc)
    if cfg.verbose:
        traceback.print_exception(exc, file=sys.stderr)
    msg = str(exc).strip().splitlines()
    return f"error: {type(exc).__name__}: {msg[0] if msg else ''}"[:90]


def max_rel_err(a: np.ndarray, ref: np.ndarray) -> float:
    """max over trajectories of |a - ref| / |ref| (vector norms over the last axis
    when there is one per trajectory). NaN anywhere gives inf."""
    a = np.asarray(a, np.float64)
    ref = np.asarray(ref, np.float64)
    if a.shape != ref.shape:
        return float("inf")
    if not np.all(np.isfinite(a)):
        return float("inf")
    if a.ndim >= 2:
        num = np.linalg.norm(a - ref, axis=-1)
        den = np.linalg.norm(ref, axis=-1)
    else:
        num, den = np.abs(a - ref), np.abs(ref)
    floor = 1e-30 + 1e-6 * float(np.max(den)) if den.size else 1.0
    return float(np.max(num / np.maximum(den, floor))) if num.size else 0.0


# --- tables and targets ---------------------------------------------------------

@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        cells = [[clip(fmt(c)) for c in row] for row in self.rows]
        widths = [len(h) for h in self.headers]
        for row in cells:
            for k, c in enumerate(row):
                widths[k] = max(widths[k], len(c))
        def line(row):
            return "  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                             for k, (c, w) in enumerate(zip(row, widths)))
        out = [self.title, line(self.headers), line(["-" * w for w in widths])]
        out += [line(r) for r in cells]
        out += [f"  * {n}" for n in self.notes]
        return "\n".join(out)

    def markdown(self) -> str:
        out = [f"**{self.title}**", "",
               "| " + " | ".join(self.headers) + " |",
               "|" + "|".join("---" if k == 0 else "---:" for k in range(len(self.headers))) + "|"]
        out += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in self.rows]
        if self.notes:
            out += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(out)

    def to_json(self) -> dict:
        return {"title": self.title, "headers": self.headers,
                "rows": [[jsonable(c) for c in r] for r in self.rows], "notes": self.notes}


@dataclass
class Target:
    name: str
    passed: bool | None     # None: could not be checked (a column missing, a size not run)
    detail: str
    kind: str = "speed"     # "speed" (a target), "accuracy" (answers agree), "info" (no target)

    def render(self) -> str:
        tag = {True: "PASS", False: "FAIL", None: "N/A "}[self.passed]
        if self.kind == "info":
            tag = "INFO"
        return f"{tag}  {self.name}: {self.detail}"


def as_info(t: Target) -> Target:
    """The target as a figure to read, not a PASS/FAIL line."""
    t.kind = "info"
    return t


def ratio_target(name: str, num: float | None, den: float | None, need: float,
                 what: str = "") -> Target:
    """PASS when num / den >= need (both rates, bigger is better)."""
    if num is None or den is None or not np.isfinite(num) or not np.isfinite(den) or den <= 0:
        return Target(name, None, f"not measured{(' (' + what + ')') if what else ''}")
    r = num / den
    return Target(name, r >= need, f"{r:.2f}x (need >= {need:g}x)")


@dataclass
class Result:
    name: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def render(self) -> str:
        parts = [t.render() for t in self.tables]
        if self.targets:
            parts.append("targets:\n" + "\n".join("  " + t.render() for t in self.targets))
        return "\n\n".join(parts)

    def to_json(self) -> dict:
        return {"name": self.name, "tables": [t.to_json() for t in self.tables],
                "targets": [{"name": t.name, "passed": t.passed, "detail": t.detail,
                             "kind": t.kind}
                            for t in self.targets],
                "data": jsonable(self.data)}


def clip(s: str, width: int = 64) -> str:
    return s if len(s) <= width else s[:width - 3] + "..."


def fmt(c: Any) -> str:
    if c is None:
        return "-"
    if isinstance(c, (bool, np.bool_)):
        return "yes" if c else "no"
    if isinstance(c, (int, np.integer)):
        return f"{int(c):,}"
    if isinstance(c, (float, np.floating)):
        c = float(c)
        if not np.isfinite(c):
            return str(c)
        a = abs(c)
        if a == 0:
            return "0"
        if a >= 1e6 or a < 1e-3:
            return f"{c:.2e}"
        if a >= 100:
            return f"{c:,.0f}"
        if a >= 10:
            return f"{c:.1f}"
        return f"{c:.3g}" if a < 1 else f"{c:.2f}"
    return str(c)


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if np.isfinite(x) else str(x)
    return x


# --- the machine ---------------------------------------------------------------

def machine_info() -> dict:
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "loadavg_at_start": loadavg(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for dist in ("moderngl", "numba", "torch", "torchdiffeq", "jax", "jaxlib", "diffrax", "lark"):
        v = version_of(dist)
        if v:
            info[dist] = v
    try:
        from .peers import glsl_hand
        ctx = glsl_hand.context()
        info["gl_renderer"] = ctx.info["GL_RENDERER"]
        info["gl_version"] = ctx.info["GL_VERSION"]
    except Exception as exc:
        info["gl_renderer"] = f"unavailable ({type(exc).__name__}: {exc})"[:200]
    try:
        import numpy as _np
        cfg = _np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        info["blas"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        pass
    return info
