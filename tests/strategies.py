"""Random programs for the reliability tests (and benchmarks/reliability.py).

Two families:

- ``cases()``: a hypothesis strategy of *well-formed* fields with the call
  arguments to run them: expressions over states, params (scalar and per
  trajectory), ``t``, lets, int index arithmetic, ``where``, ``and/or/not``,
  the math functions over safe domains, coupled values with reductions and
  neighbour reads under every edge rule, ``collapse`` and ``flux``. Every
  float expression carries a bound on its magnitude and is squashed
  (``tanh``, ``x / (1 + |x|)``) when the bound grows, and every derivative
  is bounded, so trajectories stay finite and comparisons stay meaningful.
  ``compare(case)`` runs one case on both backends and returns the largest
  disagreement in units of the tolerance (<= 1 passes).

- ``mutants(rng, seeds)``: damaged program text (token deletion, duplication
  and swaps, random characters, truncation, splices of two programs) and
  random text, for the source fuzz tests; ``call_arguments(field)`` makes up
  a small call for any field that does compile.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field as dc_field
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]

# Tolerances: float32 runs differ in the last bits of transcendental functions and in
# the order of reductions and atomic adds; float64 runs only in summation order.
TOL = {"float32": (1e-4, 1e-4), "float64": (1e-9, 1e-9)}
SQUASH_AT = 60.0            # a float expression whose bound exceeds this is squashed

# Names for states, params, lets and coupled values: plain ones and GLSL words
# (the backend must mangle them).
NAMES = ["x", "y", "z", "u", "v", "w2", "q", "main", "void", "uniform", "buffer", "shared",
         "vec3", "gl_Position", "in_", "out", "barrier", "gl_LocalInvocationID", "atomicAdd",
         "float2", "lerp", "p_1", "_h"]


# --- the program description ------------------------------------------------------------------
@dataclass
class Case:
    src: str
    h0: np.ndarray | None
    params: dict
    inputs: dict
    dims: dict
    dtype: str
    save_every: int | None
    features: tuple[str, ...] = ()

    def kwargs(self) -> dict:
        kw = dict(params=self.params, inputs=self.inputs, dims=self.dims, dtype=self.dtype)
        if self.save_every is not None:
            kw["save_every"] = self.save_every
        return kw

    def __repr__(self) -> str:          # what hypothesis prints for a failing example
        arrays = {"h0": self.h0, **{f"param {k}": v for k, v in self.params.items()},
                  **{f"input {k}": v for k, v in self.inputs.items()}}
        shown = "\n".join(f"  {k} = {np.array2string(np.asarray(v), precision=9)}"
                          for k, v in arrays.items())
        return (f"Case(dtype={self.dtype}, dims={self.dims}, save_every={self.save_every})\n"
                f"{self.src}\n{shown}")


@dataclass
class _Scope:
    """What an expression being generated may use."""

    f64: bool
    floats: list = dc_field(default_factory=list)       # (text, bound)
    ints: list = dc_field(default_factory=list)         # (text, bound)
    inputs: list = dc_field(default_factory=list)       # (name, (extent texts))
    coupled: list = dc_field(default_factory=list)      # (name, bound)
    basin: tuple = ()                                   # (index name, size) per axis
    grid: tuple = ()                                    # (index name, extent text) per axis
    states: list = dc_field(default_factory=list)       # state names, for init(x)
    time: bool = True                                   # t, dt usable


FLOAT_LITERALS = ["0.5", "1.5", "0.25", "2.0", "3.0", "0.1", "1.0", "0.75", "2.5", ".5", "1e-1",
                  "2.5E+0", "4"]

# Squashing: unbounded in, bounded out. (text with {a}, bound of the result)
SQUASH_F32 = [("tanh({a})", 1.0), ("atan({a})", 1.6), ("{a} / (1 + abs({a}))", 1.0),
              ("exp(-({a}) * ({a}) / 100)", 1.0), ("sin(tanh({a}) * 3)", 1.0),
              ("clamp({a}, -2, 2.5)", 2.5)]
SQUASH_F64 = [("{a} / (1 + abs({a}))", 1.0), ("clamp({a}, -2, 2.5)", 2.5),
              ("{a} / (1.0 + ({a}) * ({a}) / 64)", 4.0)]

# Math functions on safe domains, float32 only: (text, bound of the result, needs a small
# argument (|a| <= 3)).
MATH_F32 = [("sin({a})", 1.0, False), ("cos({a})", 1.0, False), ("tanh({a})", 1.0, False),
            ("atan({a})", 1.6, False), ("exp(-({a}) * ({a}))", 1.0, True),
            ("log(1 + ({a}) * ({a}))", 9.0, True), ("log2(1 + ({a}) * ({a}))", 13.0, True),
            ("sqrt(abs({a}))", 2.0, True), ("exp({a})", 21.0, True), ("sinh({a})", 11.0, True),
            ("cosh({a})", 11.0, True), ("tan(0.5 * tanh({a}))", 0.6, False),
            ("asin(0.9 * tanh({a}))", 1.2, False), ("acos(0.9 * tanh({a}))", 2.7, False),
            ("atan2({a}, 1 + abs({b}))", 1.6, False), ("pow(1 + abs({a}), 0.5)", 2.0, True),
            ("(1 + abs({a})) ^ 1.5", 8.0, True), ("floor({a})", None, False),
            ("ceil({a})", None, False), ("sign({a})", 1.0, False),
            ("abs({a}) ^ 0.5", 2.0, True), ("{a} ^ 2", None, True), ("2 ^ -1", 0.5, False)]
MATH_F64 = [("sqrt(abs({a}))", 2.0, True), ("floor({a})", None, False), ("ceil({a})", None, False),
            ("sign({a})", 1.0, False), ("{a} ^ 2", None, True), ("{a} ^ 3", None, True),
            ("abs({a})", None, False)]


@st.composite
def _float(draw, sc: _Scope, depth: int):
    """(text, bound) of a float expression."""
    leafy = depth <= 0 or draw(st.integers(0, 9)) < 3
    if leafy:
        options = ["lit", "name", "name", "int"]
        if sc.time:
            options += ["t", "dt"]
        if sc.inputs:
            options += ["input", "input"]
        if sc.coupled:
            options += ["coupled", "coupled", "reduce", "neighbour", "neighbour"]
        if sc.states:
            options += ["init"]
        kind = draw(st.sampled_from(options))
        if kind == "name" and sc.floats:
            return draw(st.sampled_from(sc.floats))
        if kind == "int":
            text, b = draw(_int(sc, 1))
            return f"float({text})", float(b)
        if kind == "t":
            return "t", 3.0
        if kind == "dt":
            return "dt", 0.25
        if kind == "init":
            return f"init({draw(st.sampled_from(sc.states))})", 2.0
        if kind == "input":
            return draw(_input_read(sc, depth))
        if kind == "coupled":
            return draw(st.sampled_from(sc.coupled))
        if kind == "reduce":
            name, b = draw(st.sampled_from(sc.coupled))
            op = draw(st.sampled_from(["sum", "mean", "min", "max"]))
            lanes = math.prod(size for _, size in sc.basin)
            return f"{op}({name})", b * (lanes if op == "sum" else 1)
        if kind == "neighbour":
            name, b = draw(st.sampled_from(sc.coupled))
            idx = []
            for axis, _size in sc.basin:
                if draw(st.booleans()):
                    k = draw(st.sampled_from(["- 1", "+ 1", "+ 2", "- 3", "+ 0"]))
                    idx.append(f"{axis} {k}")
                else:
                    idx.append(draw(_int(sc, 1))[0])
            return f"{name}[{', '.join(idx)}]", b
        return draw(st.sampled_from(FLOAT_LITERALS)), 4.0
    kind = draw(st.sampled_from(["add", "sub", "mul", "neg", "div", "math", "math", "where",
                                 "minmax", "clamp", "mixed", "squash"]))
    a, ba = draw(_float(sc, depth - 1))
    if kind in ("add", "sub", "mul", "div", "minmax"):
        b, bb = draw(_float(sc, depth - 1))
        if kind == "add":
            return _bounded(sc, f"{a} + {b}", ba + bb, draw)
        if kind == "sub":
            return _bounded(sc, f"{a} - ({b})", ba + bb, draw)
        if kind == "mul":
            return _bounded(sc, f"({a}) * ({b})", ba * bb, draw)
        if kind == "div":
            return _bounded(sc, f"({a}) / (1 + abs({b}))", ba, draw)
        fn = draw(st.sampled_from(["min", "max"]))
        return f"{fn}({a}, {b})", max(ba, bb)
    if kind == "neg":
        return f"-({a})", ba
    if kind == "clamp":
        return f"clamp({a}, -1.5, {draw(st.sampled_from(['0.5', '2', '1']))})", 2.0
    if kind == "mixed":                     # int and float operands: promotion
        i, bi = draw(_int(sc, 1))
        return _bounded(sc, f"{a} + {i}", ba + bi, draw)
    if kind == "where":
        c = draw(_cond(sc, depth - 1))
        b, bb = draw(_float(sc, depth - 1))
        return f"where({c}, {a}, {b})", max(ba, bb)
    if kind == "squash":
        return _squash(sc, a, draw)
    table = MATH_F64 if sc.f64 else MATH_F32
    text, bound, small = draw(st.sampled_from(table))
    if small and ba > 3:
        a, ba = _squash(sc, a, draw)
    if "{b}" in text:
        b, _ = draw(_float(sc, depth - 1))
        text = text.replace("{b}", b)
    if bound is None:                       # floor, ceil, abs, powers: from the argument
        bound = ba + 1 if "^" not in text else ba ** int(text[-1])
    return _bounded(sc, text.replace("{a}", a), bound, draw)


def _bounded(sc: _Scope, text: str, bound: float, draw):
    if bound > SQUASH_AT:
        return _squash(sc, text, draw)
    return text, bound


def _squash(sc: _Scope, text: str, draw):
    form, bound = draw(st.sampled_from(SQUASH_F64 if sc.f64 else SQUASH_F32))
    return form.replace("{a}", f"({text})"), bound


@st.composite
def _int(draw, sc: _Scope, depth: int):
    """(text, bound) of an int expression; bounds stay far inside int32 except on purpose."""
    if depth <= 0 or draw(st.integers(0, 9)) < 4:
        options = [(str(k), abs(k)) for k in (0, 1, 2, 3, 5, -1)]
        options += [(name, 1 << 10) for name, _ in sc.grid]
        options += [(name, size) for name, size in sc.basin]
        options += [(ext, 1 << 10) for _, ext in sc.grid if not ext.isdigit()]
        if sc.time:
            options.append(("step", 8))
        options += sc.ints
        return draw(st.sampled_from(options))
    kind = draw(st.sampled_from(["add", "mul", "floordiv", "mod", "neg", "abs", "minmax",
                                 "clamp", "int", "where", "guarded", "wrap", "sign"]))
    a, ba = draw(_int(sc, depth - 1))
    if kind == "add":
        b, bb = draw(_int(sc, depth - 1))
        op = draw(st.sampled_from(["+", "-"]))
        return f"{a} {op} ({b})", ba + bb
    if kind == "mul":
        k = draw(st.sampled_from([2, 3, -2, 7]))
        return f"({a}) * {k}", ba * abs(k)
    if kind == "floordiv":
        k = draw(st.sampled_from(["2", "3", "-2", "4"] + ["(abs(step) + 1)"] * sc.time))
        return f"({a}) // {k}", ba
    if kind == "mod":
        k = draw(st.sampled_from(["2", "3", "-3", "5"] + ["(abs(step) + 2)"] * sc.time))
        return f"({a}) % {k}", 8
    if kind == "neg":
        return f"-({a})", ba
    if kind == "abs":
        return f"abs({a})", ba
    if kind == "sign":
        return f"sign({a})", 1
    if kind == "minmax":
        b, bb = draw(_int(sc, depth - 1))
        return f"{draw(st.sampled_from(['min', 'max']))}({a}, {b})", max(ba, bb)
    if kind == "clamp":
        return f"clamp({a}, -1, 4)", 4
    if kind == "int":
        f, _ = draw(_float(sc, 0))
        return f"int(tanh({f}) * 3.5)" if not sc.f64 else f"int(clamp({f}, -3, 3))", 4
    if kind == "where":
        c = draw(_cond(sc, depth - 1))
        b, bb = draw(_int(sc, depth - 1))
        return f"where({c}, {a}, {b})", max(ba, bb)
    if kind == "guarded":                   # the branch not taken would divide by zero
        return f"where({a} != 0, 7 // ({a}), -1)", 8
    # int32 wrap-around on purpose, reduced to a small range afterwards
    return f"(({a}) * 65537 * 65537 + 123456789) % 11", 11


@st.composite
def _cond(draw, sc: _Scope, depth: int):
    kind = draw(st.sampled_from(["fcmp", "fcmp", "icmp", "and", "or", "not", "parity",
                                 "lazy"] if depth > 0 else ["fcmp", "icmp", "parity"]))
    if kind == "fcmp":
        a, _ = draw(_float(sc, min(depth, 1)))
        op = draw(st.sampled_from(["<", "<=", ">", ">=", "!="]))
        return f"{a} {op} {draw(st.sampled_from(['0', '0.3', '-0.7', '1.1']))}"
    if kind == "icmp":
        a, _ = draw(_int(sc, 1))
        b, _ = draw(_int(sc, 1))
        return f"{a} {draw(st.sampled_from(['<', '==', '!=', '>=']))} {b}"
    if kind == "parity":
        a, _ = draw(_int(sc, 1))
        return f"({a}) % 2 == 0"
    if kind == "not":
        return f"not ({draw(_cond(sc, depth - 1))})"
    if kind == "lazy" and sc.inputs:        # the right side would read out of range
        name, exts = sc.inputs[0]
        idx, _ = draw(_int(sc, 1))
        if len(exts) == 1:
            return f"({idx} >= 0 and {idx} < {exts[0]} and {name}[{idx}] > 0)"
    a = draw(_cond(sc, depth - 1))
    b = draw(_cond(sc, depth - 1))
    return f"({a}) {'and' if kind == 'and' else 'or'} ({b})"


@st.composite
def _input_read(draw, sc: _Scope, depth: int):
    name, exts = draw(st.sampled_from(sc.inputs))
    form = draw(st.sampled_from(["clamp", "mod", "guard"] if len(exts) == 1 else
                                ["clamp", "mod"]))
    idx = []
    for ext in exts:
        e, _ = draw(_int(sc, 2))
        idx.append(f"clamp({e}, 0, {ext} - 1)" if form == "clamp" else f"({e}) % {ext}")
    if form == "guard":
        e, _ = draw(_int(sc, 2))
        return f"where({e} >= 0 and {e} < {exts[0]}, {name}[{e}], -0.5)", 1.0
    return f"{name}[{', '.join(idx)}]", 1.0


@st.composite
def cases(draw, features=("coupled", "collapse", "flux", "f64", "grid2")):
    """One well-formed field, with h0, params, inputs and dims to call it."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    f64 = "f64" in features and draw(st.integers(0, 4)) == 0
    dtype = "float64" if f64 else "float32"
    sc = _Scope(f64=f64)
    lines: list[str] = []
    used = set()

    def fresh():
        name = draw(st.sampled_from([n for n in NAMES if n not in used]))
        used.add(name)
        return name

    # grid and basin
    rank = 2 if "grid2" in features and draw(st.integers(0, 3)) == 0 else 1
    coupled_on = "coupled" in features and draw(st.booleans())
    collapse_on = "collapse" in features and draw(st.integers(0, 2)) == 0
    flux_on = "flux" in features and draw(st.integers(0, 2)) == 0
    basin_on = coupled_on or collapse_on or draw(st.integers(0, 4)) == 0
    if rank == 1:
        n = draw(st.integers(1, 40))
        implicit = not basin_on and draw(st.booleans())
        if not implicit:
            lines.append("grid i < N")
        sc.grid = (("i", "N"),)
        shape = (n,)
        if basin_on:
            size = draw(st.sampled_from([4, 8, 16, 32]))
            lines.append(f"basin l < {size}")
            sc.basin = (("l", size),)
    else:
        m, p = draw(st.integers(1, 9)), draw(st.integers(1, 9))
        lines.append("grid i < M, j < P")
        sc.grid = (("i", "M"), ("j", "P"))
        shape = (m, p)
        if basin_on:
            a, b = draw(st.sampled_from([2, 4])), draw(st.sampled_from([2, 4, 8]))
            lines.append(f"basin a < {a}, b < {b}")
            sc.basin = (("a", a), ("b", b))

    # inputs (bound the grid's dim symbols too)
    inputs = {}
    if draw(st.booleans()):
        exts = tuple(ext for _, ext in sc.grid)
        lines.append(f"input w[{', '.join(exts)}]")
        inputs["w"] = rng.uniform(-1, 1, shape).astype(dtype)
        sc.inputs.append(("w", exts))
    if draw(st.integers(0, 3)) == 0:
        lines.append("input c3[3]")
        inputs["c3"] = rng.uniform(-1, 1, 3)                 # float64: converted by bind
        sc.inputs.append(("c3", ("3",)))

    # params
    params = {}
    for _ in range(draw(st.integers(0, 2))):
        name = fresh()
        kind = draw(st.sampled_from(["default", "given", "given", "per", "per_default"]))
        if kind in ("default", "per_default"):
            lines.append(f"param {name} = {draw(st.sampled_from(FLOAT_LITERALS))} / 2")
        else:
            lines.append(f"param {name}")
        if kind == "given":
            params[name] = float(rng.uniform(-1, 1.5))
        elif kind in ("per", "per_default"):
            params[name] = rng.uniform(-1, 1.5, shape)
        sc.floats.append((name, 4.0))

    # states: some with start expressions
    names = [fresh() for _ in range(draw(st.integers(1, 3)))]
    decls, n_free = [], 0
    start_scope = _Scope(f64=f64, floats=list(sc.floats), inputs=sc.inputs, grid=sc.grid,
                         basin=sc.basin, time=False)
    for nm in names:
        if draw(st.integers(0, 3)) == 0:
            e, b = draw(_float(start_scope, 1))
            if b > 3:
                e, b = _squash(start_scope, e, draw)
            decls.append(f"{nm} = {e}")
        else:
            decls.append(nm)
            n_free += 1
        start_scope.floats.append((nm, 3.0))
    lines.append("state " + ", ".join(decls))
    sc.floats += [(nm, 4.0) for nm in names]
    sc.states = list(names)

    # lets (no coupled names inside)
    for _ in range(draw(st.integers(0, 2))):
        name = fresh()
        e, b = draw(_float(sc, 2))
        lines.append(f"let {name} = {e}")
        sc.floats.append((name, b))

    # coupled values
    if coupled_on:
        parts, shared = [], []
        for _ in range(draw(st.integers(1, 2))):
            name = fresh()
            e, b = draw(_float(sc, 2))      # before any coupled name is in scope
            edge = draw(st.sampled_from(["", " edge clamp", " edge wrap", " edge zero"]))
            parts.append(f"{name} = {e}{edge}")
            shared.append((name, b))
        sc.coupled += shared
        lines.append("coupled " + ", ".join(parts))

    # equations: bounded right-hand sides
    for nm in names:
        g, _ = draw(_float(sc, 3))
        g, _ = _squash(sc, g, draw)
        decay = draw(st.sampled_from(["", f"-{nm} + ", f"-0.5 * {nm} + ", f"-2 * {nm} + "]))
        lines.append(f"d{nm}/dt = {decay}{g}")

    if collapse_on:
        lines.append(f"collapse when {draw(_cond(sc, 2))}")
    if flux_on:
        k = draw(st.integers(1, 5))
        two = draw(st.booleans())
        lines.append(f"output H[{'2, ' if two else ''}{k}]")
        for _ in range(draw(st.integers(1, 2))):
            e, _ = draw(_int(sc, 2))
            idx = draw(st.sampled_from([f"clamp({e}, 0, {k - 1})", f"({e}) % {k}"]))
            if two:
                idx = f"({draw(_int(sc, 1))[0]}) % 2, {idx}"
            v, _ = draw(_float(sc, 2))
            lines.append(f"flux H[{idx}] += {v}")

    method = draw(st.sampled_from(["euler", "midpoint", "heun", "rk4"]))
    dt = draw(st.sampled_from(["0.05", "0.1", "0.2", "0.25"]))
    steps = draw(st.integers(0, 5))
    t0 = draw(st.sampled_from(["", "", ", t0 = 0.5", ", t0 = -1"]))
    lines.append(f"solve {method}(dt = {dt}, steps = {steps}{t0})")
    save_every = draw(st.sampled_from([None, None, None, 1, 2]))

    order = draw(st.permutations(range(len(lines)))) if draw(st.integers(0, 3)) == 0 \
        else range(len(lines))
    body = "\n".join("    " + lines[k] for k in order)
    src = f"field gen {{\n{body}\n}}\n"

    h0 = None
    if n_free:
        h0 = rng.uniform(-2, 2, shape + (n_free,)).astype(dtype)
        if n_free == 1 and draw(st.booleans()):
            h0 = h0[..., 0]
    dims = {ext: size for (_, ext), size in zip(sc.grid, shape)}   # also bound by arrays
    feats = tuple(f for f, on in [("coupled", coupled_on), ("collapse", collapse_on),
                                  ("flux", flux_on), ("f64", f64), ("grid2", rank == 2),
                                  ("basin", basin_on)] if on)
    return Case(src, h0, params, inputs, dims, dtype, save_every, feats)


# --- running a case on both backends -----------------------------------------------------------
def compare(case: Case, backend: str = "glsl") -> float:
    """Run ``case`` on numpy and a compiled backend; assert they agree; the worst error /
    tolerance. wgpu has no float64: there a float64 case must be refused, naming it."""
    if backend == "wgpu" and case.dtype == "float64":
        import vgpu
        from vgpu_compiler.errors import BackendError
        try:
            vgpu.solve(case.src, case.h0, backend="wgpu", **case.kwargs())
        except BackendError as e:
            assert "wgpu" in str(e) and "float64" in str(e)
            return 0.0
        raise AssertionError("wgpu ran a float64 case")
    worst, problem = measure(case, backend)
    assert problem is None, problem
    return worst


def measure(case: Case, backend: str = "glsl") -> tuple[float, str | None]:
    """(worst error / tolerance, None) when both backends agree, else (worst, what differs)."""
    import warnings

    import vgpu
    rtol, atol = TOL[case.dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vgpu.NonFiniteWarning)
        ref = vgpu.solve(case.src, case.h0, backend="numpy", **case.kwargs())
        gpu = vgpu.solve(case.src, case.h0, backend=backend, **case.kwargs())
    if sorted(gpu.outputs) != sorted(ref.outputs):
        return np.inf, f"outputs {sorted(gpu.outputs)} != {sorted(ref.outputs)}"
    pairs = [("states", gpu.states, ref.states, atol)]
    # flux sums many deposits: its absolute tolerance grows with their number
    deposits = max(1, int(np.prod(ref.steps_taken.shape)))
    pairs += [(f"output {k}", gpu.outputs[k], v, atol * deposits) for k, v in ref.outputs.items()]
    if ref.history is not None:
        pairs.append(("history", gpu.history, ref.history, atol))
    worst, problems = 0.0, []
    for what, g, r, a in pairs:
        if g is None or g.shape != r.shape or g.dtype != r.dtype:
            return np.inf, f"{what}: {getattr(g, 'shape', None)} {getattr(g, 'dtype', None)} " \
                           f"!= {r.shape} {r.dtype}"
        w = disagreement(g, r, rtol, a)
        worst = max(worst, w)
        if w > 1:
            k = np.unravel_index(np.argmax(np.abs(np.asarray(g, float) - r)), r.shape)
            problems.append(f"{what} differ by {w:.3g} x tolerance, e.g. at {k}: "
                            f"glsl {g[k]!r} numpy {r[k]!r}")
    if not np.array_equal(gpu.steps_taken, ref.steps_taken):
        problems.append(f"steps_taken differ: glsl {gpu.steps_taken.ravel()[:8]} "
                        f"numpy {ref.steps_taken.ravel()[:8]}")
    if ref.history is not None and not np.array_equal(gpu.times, ref.times):
        problems.append("history times differ")
    return worst, ("; ".join(problems) or None)


def disagreement(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> float:
    """max |got - ref| / (atol + rtol |ref|); NaN in the same places counts as equal."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    same = (np.isnan(got) & np.isnan(ref)) | (got == ref)
    err = np.where(same, 0.0, np.abs(got - ref) / (atol + rtol * np.abs(ref)))
    err = np.where(np.isnan(err), np.inf, err)
    return float(err.max()) if err.size else 0.0


# --- fuzzed program text -----------------------------------------------------------------------
TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|\d*\.\d+(?:[eE][+-]?\d+)?|\d+\.?"
                   r"(?:[eE][+-]?\d+)?|//|<=|>=|==|!=|\+=|.", re.S)
ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789"
            "(){}[]<>=+-*/^%,;.#:!?@$&|~'\"\\ \t\n\r\x00\x0b\x0c\x1c\x85\u2028é∂→💥")
WORDS = ["field", "param", "input", "output", "state", "let", "coupled", "collapse", "when",
         "flux", "solve", "grid", "basin", "edge", "and", "or", "not", "t", "dt", "step",
         "sin", "exp", "where", "init", "sum", "mean", "min", "max", "clamp", "int", "float",
         "interp",
         "euler", "rk4", "heun", "midpoint", "wrap", "zero", "x", "N", "i", "l", "0", "1",
         "2.5", "1e-3", "2147483648", "1e400", "(", ")", "[", "]", "{", "}", ",", ";", "\n",
         "=", "+=", "/", "//", "%", "^", "<", "==", "dx/dt", "-", "*"]


def examples() -> list[str]:
    """The example programs, plus the contract's, as seeds for mutation."""
    srcs = [p.read_text() for p in sorted((ROOT / "examples").glob("*.field"))]
    import field_examples as fe
    srcs += [fe.LORENZ, fe.MATMUL, fe.KURAMOTO, fe.HISTOGRAM, fe.HEAT, fe.COLLAPSE]
    return srcs


def tokens(src: str) -> list[str]:
    return TOKEN.findall(src)


def mutate(rng: random.Random, src: str, seeds: list[str]) -> str:
    """One to three random damages to ``src``."""
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        toks = tokens(src)
        kind = rng.randrange(9)
        if not toks:
            kind = 5
        k = rng.randrange(len(toks)) if toks else 0
        if kind == 0:                                   # delete a token
            del toks[k]
        elif kind == 1:                                 # duplicate a token
            toks.insert(k, toks[k])
        elif kind == 2:                                 # swap two tokens
            m = rng.randrange(len(toks))
            toks[k], toks[m] = toks[m], toks[k]
        elif kind == 3:                                 # replace a token by a known word
            toks[k] = rng.choice(WORDS)
        elif kind == 4:                                 # insert a word
            toks.insert(k, rng.choice(WORDS) + rng.choice(["", " "]))
        elif kind == 5:                                 # random characters
            p = rng.randrange(len(src) + 1)
            junk = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 4)))
            src = src[:p] + junk + src[p + rng.randint(0, 2):]
            continue
        elif kind == 6:                                 # truncate
            src = src[:rng.randrange(len(src) + 1)]
            continue
        elif kind == 7:                                 # splice with another program
            other = rng.choice(seeds)
            p, q = rng.randrange(len(src) + 1), rng.randrange(len(other) + 1)
            src = src[:p] + other[q:] if rng.random() < 0.5 else other[:q] + src[p:]
            continue
        else:                                           # move a run of tokens
            m = rng.randint(k, min(len(toks), k + 6))
            run = toks[k:m]
            del toks[k:m]
            p = rng.randrange(len(toks) + 1)
            toks[p:p] = run
        src = "".join(toks)
    return src


def random_text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 80)))
    body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40)))
    return f"field f {{ {body} }}" if rng.random() < 0.7 else body


def fuzz_input(rng: random.Random, seeds: list[str]) -> str:
    r = rng.random()
    if r < 0.1:
        return random_text(rng)
    return mutate(rng, rng.choice(seeds), seeds)


def check_source_error(err, src: str) -> None:
    """A SourceError's position lies inside the text, and it renders."""
    from vgpu_compiler.errors import SourceError
    text = str(err)
    assert isinstance(text, str) and err.message
    if isinstance(err, SourceError):
        assert err.line is not None and err.column is not None, err.message
        lines = src.split("\n")
        assert 1 <= err.line <= len(lines), (err.line, len(lines), err.message)
        assert 1 <= err.column <= len(lines[err.line - 1]) + 1, \
            (err.line, err.column, lines[err.line - 1], err.message)
        if err.source is not None:          # the caret display shows the error's own line
            shown = text.split("\n")
            assert len(shown) >= 3 and shown[1] == "    " + lines[err.line - 1].rstrip("\r"), \
                (err.line, shown[:3], lines[err.line - 1])


# --- a small call for any field ------------------------------------------------------------------
MAX_ITEMS = 4096


def call_arguments(fld, n: int = 3):
    """(h0, params, inputs, dims) for ``fld`` with every dim symbol ``n``; None when its
    literal extents would make the call too large to be cheap."""
    dims = {d: n for d in fld.dims}

    def extent(e):
        return dims[e] if isinstance(e, str) else int(e)

    grid = tuple(extent(a.extent) for a in fld.grid)
    sizes = [math.prod(grid)] + [math.prod(extent(e) for e in a.dims)
                                 for a in fld.inputs + fld.outputs]
    if max(sizes) > MAX_ITEMS:
        return None
    rng = np.random.default_rng(0)
    inputs = {a.name: rng.uniform(-1, 1, tuple(extent(e) for e in a.dims)) for a in fld.inputs}
    params = {p.name: 0.5 for p in fld.params if p.default is None}
    n_free = len(fld.free_states)
    h0 = rng.uniform(-1, 1, grid + (n_free,)) if n_free else None
    return h0, params, inputs, dims


def run_both(src: str, compiled, steps: int = 2, gpu: str = "glsl") -> str | None:
    """Run every field of a compiled program on numpy and the GPU backend ``gpu`` (tiny
    grid, ``steps`` steps). None when they agree (same numbers, or the same kind of
    VgpuError), else what differs."""
    import warnings

    import vgpu
    from vgpu_compiler import backends
    from vgpu_compiler.errors import VgpuError
    for fld in compiled.program.fields:
        args = call_arguments(fld)
        if args is None:
            continue
        h0, params, inputs, dims = args
        outcomes = []
        for backend in ("numpy", gpu):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    sol = vgpu.solve(src, h0, params=params, inputs=inputs, dims=dims,
                                     field=fld.name, backend=backend, steps=steps)
                outcomes.append(("ok", sol))
            except VgpuError as err:
                if "rejected the shader" in err.message or "rejected the WGSL" in err.message:
                    return f"{backend}: {err.message}"
                outcomes.append((type(err).__name__, err))
            except Exception as exc:        # noqa: BLE001 - an internal error
                return f"{backend}: internal error {type(exc).__name__}: {exc}"
        (k1, a), (k2, b) = outcomes
        if fld.events and "events" not in backends.get(gpu).features:
            # a backend without events must refuse them clearly, whatever numpy did
            if k2 != "BackendError" or "no events" not in b.message:
                return f"field {fld.name}: {gpu} has no events but gave {k2} ({b})"
            continue
        feats = backends.get(gpu).features
        if fld.jacobian is not None and ("stiff" not in feats or (
                fld.events and "stiff_events" not in feats)) and k1 != k2:
            # rodas4 not printed (or not with events): a clear refusal that names it
            if k2 != "BackendError" or "rodas4" not in b.message:
                return f"field {fld.name}: {gpu} has no rodas4 but gave {k2} ({b})"
            continue
        if k1 != k2:
            return (f"field {fld.name}: numpy {k1} ({a if k1 != 'ok' else ''}), "
                    f"{gpu} {k2} ({b if k2 != 'ok' else ''})")
        if k1 == "ok":
            try:
                np.testing.assert_allclose(b.states, a.states, rtol=1e-3, atol=1e-3)
                np.testing.assert_array_equal(b.steps_taken, a.steps_taken)
                for name in a.outputs:
                    np.testing.assert_allclose(b.outputs[name], a.outputs[name],
                                               rtol=1e-3, atol=1e-3)
            except AssertionError as exc:
                return f"field {fld.name}: results differ: {exc}"
    return None


def front_end(src: str):
    """The Compiled program, or None after a well-formed VgpuError; anything else raises
    (a non-VgpuError, or an AssertionError about the error's position)."""
    from vgpu_compiler.frontend.compile import compile_program
    from vgpu_compiler.errors import VgpuError
    try:
        return compile_program(src, "fuzz.field")
    except VgpuError as err:
        check_source_error(err, src)
        return None
