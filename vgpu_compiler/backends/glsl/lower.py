"""IR Field -> Kernel description (kernel.py): the GPU mapping, decided once.

trajectory -> invocation; basin -> workgroup (local size = basin shape, the
last grid axis on x); without a basin, 64 invocations in a flat 1-D range.
State lives in registers inside the step loop and in a structure-of-arrays
storage buffer between dispatches. Everything that only sizes or places data
(grid, dims, dt, steps, t0, step offsets) is a uniform, so one kernel serves
every shape.
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from fractions import Fraction

import numpy as np

from ...ir.nodes import Apply, CoupledAt, Expr, Field, Load, Reduce, Sym
from ...ir.ops import ReduceOp, SymKind
from .kernel import (Assign, Axis, Block, Buffer, CoupledArray, CoupledBlock, Fluxer, Kernel,
                     Loader, Reduction, Stage, Uniform)
from ...ir.ranges import Ranges
from ...ir.step import Combination, StepProgram, step_program
from ...ir.step import Stage as StepStage
from .render import DIALECTS, LOOP_HELPERS, Context, Printer, mangle

VERSION = "glsl-1"
FLAT_GROUP = 64
COMPONENTS = "xyz"
REDUCE_COMBINE = {ReduceOp.SUM: "({0} + {1})", ReduceOp.MEAN: "({0} + {1})",
                  ReduceOp.MIN: "vg_min({0}, {1})", ReduceOp.MAX: "vg_max({0}, {1})"}
# How a basin reduces (sum/mean/min/max over its active lanes):
#   tree    a shared-memory tree, one barrier per level: few steps per lane, right for a GPU
#   serial  lane 0 folds the active lanes one by one: two barriers in all, right for a
#           software renderer (llvmpipe), where every barrier switches through all lanes
REDUCTIONS = ("tree", "serial")


def lower(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
          source: str | None = None, reduction: str = "tree") -> Kernel:
    """The kernel description of ``field`` for one dtype and set of per-trajectory params.

    ``reduction``: how basins reduce, "tree" (a GPU) or "serial" (a software renderer).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    return _Lowering(field, dtype, frozenset(per_trajectory_params), source, reduction).kernel()


class _Lowering:
    def __init__(self, field: Field, dtype: str, pt: frozenset, source: str | None,
                 reduction: str = "tree"):
        self.f, self.d, self.pt, self.reduction = field, DIALECTS[dtype], pt, reduction
        # which coupled names are read as s[e] / reduced anywhere: they decide the shared
        # arrays and whether a coupled exchange must first wait for the last one's readers
        _, rs, self.read_at = _coupled_uses(_roots(field))
        self.reduced = reduced = {r.name for r in rs}
        self.shared = self.read_at | (reduced if reduction == "serial" else set())
        # tree: every lane reads the scratch array after the last barrier; serial: only
        # s[e] reads come after it (lane 0's fold is fenced by the exchange's two barriers)
        self.fence = bool(self.read_at) or (reduction == "tree" and bool(reduced))
        self.lines = source.splitlines() if source else None
        self.reduces: dict[Reduce, str] = {}
        self.p = Printer(self.d, param_prefix=lambda n: mangle("p", n),
                         loader=lambda a: mangle("ld", a),
                         coupled_at=lambda c: mangle("ca", c), reduce_name=self._reduce_var,
                         ranges=Ranges(field))

    def _reduce_var(self, r: Reduce) -> str:
        if r not in self.reduces:
            self.reduces[r] = f"vg_r{len(self.reduces)}"
        return self.reduces[r]

    # --- the pieces ------------------------------------------------------------
    def kernel(self) -> Kernel:
        f, d = self.f, self.d
        self._results = 0           # serial: the most reductions of one exchange
        axes = self._axes()
        init = self._init()
        program = step_program(f.solver.tableau)
        stages = tuple(self._stage(st) for st in program.stages)
        collapse = self._collapse()
        flux, fluxers = self._flux()
        if f.inputs:                # every input's loader reports out-of-range reads,
            self.p.helpers.add("vg_fail")       # also when the field never reads it
        buffers = self._buffers(fluxers)
        size = int(np.prod([a.size for a in axes])) if f.basin else FLAT_GROUP
        per_step, once = _helper_calls(stages, collapse, init, flux)
        local = tuple(next((a.size for a in axes if a.comp == c), 1) for c in COMPONENTS)
        if not f.basin:
            local = (FLAT_GROUP, 1, 1)
        pt_regs = tuple(mangle("p", p.name) for p in f.params if p.name in self.pt)
        return Kernel(
            name=f.name, version=VERSION, dtype=d.dtype, F=d.F, zero=d.float_literal(0.0),
            source_name=f.name, local_size=local, has_basin=f.basin is not None,
            basin_size=size, pow2=1 << (size - 1).bit_length(), axes=axes,
            nactive=" * ".join(f"vg_ext{k}" for k in range(len(axes))),
            active=" && ".join(f"{a.basin} < vg_ext{k}" for k, a in enumerate(axes)),
            lane=_flat(["(" + axes[0].index + " - u_origin)"] + [a.index for a in axes[1:]],
                       [f"u_grid{k}" for k in range(len(axes))]),
            buffers=buffers, uniforms=self._uniforms(), helpers=tuple(sorted(self.p.helpers)),
            loaders=self._loaders(), fluxers=fluxers, coupled_arrays=self._coupled_arrays(),
            reductions=(tuple(f"vg_red{i}" for i in range(len(self.reduces)))
                        if self.reduction == "tree" else ()),
            reduction=self.reduction,
            results=self._results if self.reduction == "serial" else 0,
            box=_box(axes),
            loop_trips_per_step=1 + _helper_trips(per_step) + sum(
                self._trips(b) for b in [st.block for st in stages] + [collapse]),
            loop_trips_once=self._trips(flux) + _helper_trips(once),
            helper_loops=tuple((h, LOOP_HELPERS[h], per_step.get(h, 0), once.get(h, 0))
                               for h in sorted(set(per_step) | set(once))),
            states=tuple((mangle("s", s.name), mangle("y", s.name), self._where(s.span))
                         for s in f.states),
            stage_k=tuple(tuple(mangle(f"k{i}", s.name) for s in f.states)
                          for i in range(len(stages))),
            pt_params=pt_regs, init=init, uses_init=bool(self._init_used()),
            init_names=tuple(mangle("s0", s.name) for s in f.states),
            stages=stages, update=self._update(program), collapse=collapse, flux=flux,
            n_deposits=sum(1 for x in fluxers if x.deposit >= 0),
            errors=tuple((k, w, s.line if s else 0, s.column if s else 0)
                         for k, w, s in self.p.errors),
            guard=" && ".join(self.p.guards),
            guard_note=", ".join(r for why in self.p.guards.values() for r in why),
        )

    def _trips(self, block: Block | None) -> int:
        """Loop iterations of a block's reduction (its fold or its tree), at most."""
        if block is None or block.coupled is None or not block.coupled.reductions:
            return 0
        size = int(np.prod([a.size for a in self._axes()]))
        return size + 1 if self.reduction == "serial" else (size - 1).bit_length() + 1

    def _axes(self) -> tuple[Axis, ...]:
        f = self.f
        rank = len(f.grid)
        out = []
        for k, g in enumerate(f.grid):
            b = f.basin[k] if f.basin else None
            out.append(Axis(index=mangle("g", g.index),
                            basin=mangle("l", b.index) if b else "",
                            size=int(b.extent) if b else 1, comp=COMPONENTS[rank - 1 - k]))
        return tuple(out)

    def _where(self, span) -> str:
        if span is None:
            return ""
        text = f"line {span.line}"
        if self.lines and 1 <= span.line <= len(self.lines):
            text += ": " + self.lines[span.line - 1].strip()
        return text

    def _coefficient(self, x: Fraction) -> str:
        return self.d.float_literal(float(x))

    # --- contexts ------------------------------------------------------------------
    def _block(self, roots: list[Expr], ctx: Context, targets: list[tuple[str, Expr, str]],
               prefix: str) -> Block:
        coupled = self._coupled_block(roots, ctx)
        temps, names = self.p.hoist(roots, ctx, prefix)
        body = tuple(Assign(t, self.p.expr(e, ctx, names), c) for t, e, c in targets)
        return _with_words(Block(coupled=coupled, temps=tuple(temps), body=body))

    def _coupled_block(self, roots: list[Expr], ctx: Context) -> CoupledBlock | None:
        used, reduces, _ = _coupled_uses(roots)
        if not used:
            return None
        decl = [c for c in self.f.coupled if c.name in used]
        values = tuple(Assign(mangle("c", c.name), self.p.expr(c.expr, ctx), self._where(c.span))
                       for c in decl)
        # only what some lane reads back: s[e] reads, and (serial) the reduced values
        shared = tuple((mangle("sh", c.name), mangle("c", c.name)) for c in decl
                       if c.name in self.shared)
        self._results = max(self._results, len(reduces))
        reds = []
        for i, r in enumerate(reduces):
            var = self._reduce_var(r)
            self.p.need(REDUCE_COMBINE[r.op])
            neutral = {ReduceOp.MIN: "vg_inf()", ReduceOp.MAX: "(-vg_inf())"}.get(
                r.op, self.d.float_literal(0.0))
            self.p.need(neutral)
            scratch = var.replace("vg_r", "vg_red")
            step = f"{scratch}[i] = " + _strip(REDUCE_COMBINE[r.op].format(
                f"{scratch}[i]", f"{scratch}[i + w]"))
            acc = f"vg_acc{i}"
            fold = f"{acc} = " + _strip(REDUCE_COMBINE[r.op].format(
                acc, f"{mangle('sh', r.name)}[vg_at]"))
            reds.append(Reduction(var=var, scratch=scratch, source=mangle("c", r.name),
                                  combine=REDUCE_COMBINE[r.op], neutral=neutral,
                                  mean=r.op is ReduceOp.MEAN, step=step, acc=acc, fold=fold,
                                  slot=i))
        return CoupledBlock(values=values, shared=shared, reductions=tuple(reds),
                            fence=self.fence and bool(shared or reds))

    def _init(self) -> tuple[Assign, ...]:
        ctx = Context(state="s", time="u_t0", step="0")
        return tuple(Assign(mangle("s", s.name), self.p.expr(s.init, ctx), self._where(s.span))
                     for s in self.f.states if s.init is not None)

    def _init_used(self) -> set[str]:
        roots = list(self.f.derivs) + [c.expr for c in self.f.coupled]
        roots += [self.f.collapse] if self.f.collapse is not None else []
        roots += [x for fl in self.f.flux for x in (*fl.index, fl.value)]
        return {s.name for s in _walk(roots) if isinstance(s, Sym) and s.kind is SymKind.INIT}

    def _stage(self, stage: StepStage) -> Stage:
        f, s, c = self.f, stage.index, stage.c
        time = "t_n" if c == 0 else f"t_n + {self._coefficient(c)} * u_dt"
        combos = [Assign(mangle("y", st.name), self._combination(stage.state, st.name))
                  for st in f.states]
        targets = [(mangle(f"k{s}", st.name), e, self._where(_span_of(e) or st.span))
                   for st, e in zip(f.states, f.derivs)]
        block = self._block(list(f.derivs), Context(state="y"), targets, f"vg_t{s}_")
        self.p.fast, used = True, len(self.p.guards_used)
        try:        # the same block, with the reads proven under Printer.guards unchecked
            fast = self._block(list(f.derivs), Context(state="y"), targets, f"vg_t{s}_")
        finally:
            self.p.fast = False
        fast = fast if len(self.p.guards_used) > used else None
        read = block.words | (fast.words if fast else frozenset())
        return Stage(index=s, comment=f"c = {c}", time=time, block=block, fast=fast,
                     combos=tuple(a for a in combos if a.target in read))

    def _update(self, program: StepProgram) -> tuple[Assign, ...]:
        return tuple(Assign(mangle("s", st.name), self._combination(program.update, st.name))
                     for st in self.f.states)

    def _combination(self, comb: Combination, state: str) -> str:
        """``s + u_dt * (w0 * kj_x + ...)`` of one state (ir.step.Combination).

        One term whose weight is a power of two is ``s + (w * u_dt) * k``: the same
        number (scaling by 2^m is exact; subnormal operands aside) with one multiply
        fewer in the loop, since ``w * u_dt`` is loop-invariant (the Lorenz RK4 sweep:
        0.91x -> 1.0x the hand-written kernel; a weight of 1 is ``u_dt * k``)."""
        s = mangle("s", state)
        if len(comb.terms) == 1 and _power_of_two(comb.terms[0][1]):
            (j, w), = comb.terms
            scale = "u_dt" if w == 1 else f"({self._coefficient(w)} * u_dt)"
            return f"{s} + {scale} * {mangle(f'k{j}', state)}"
        terms = [f"{self._coefficient(w)} * {mangle(f'k{j}', state)}" for j, w in comb.terms]
        return f"{s} + u_dt * ({' + '.join(terms)})" if terms else s

    def _collapse(self) -> Block | None:
        cond = self.f.collapse
        if cond is None:
            return None
        ctx = Context(state="s", time="tt", step="nstep")
        return self._block([cond], ctx, [("vg_hold", cond, self._where(_span_of(cond)))],
                           "vg_tc")

    def _flux(self) -> tuple[Block | None, tuple[Fluxer, ...]]:
        f = self.f
        if not f.flux:
            return None, ()
        deposit = self.d.dtype == "float64"
        fluxers, targets, roots = [], [], []
        decls = {o.name: o for o in f.outputs}
        for n, fl in enumerate(f.flux):
            func = mangle(f"fx{n}", fl.output)
            dims = tuple(_extent(x) for x in decls[fl.output].dims)
            fluxers.append(Fluxer(func=func, buffer=mangle("b_out", fl.output), dims=dims,
                                  array=fl.output, flat=_index_flat(dims), at=_at(len(dims)),
                                  deposit=n if deposit else -1))
            args = [*fl.index, fl.value]
            roots += args
            eid = self.p.error_id("index", fl.output, fl.span)
            targets.append((func, (args, eid), self._where(fl.span)))
        ctx = Context(state="s", time="tt", step="nstep")
        coupled = self._coupled_block(roots, ctx)
        temps, names = self.p.hoist(roots, ctx, "vg_tf")
        body = []
        for func, (args, eid), comment in targets:
            text = ", ".join(self.p.expr(a, ctx, names) for a in args)
            body.append(Assign(func, f"{text}, {eid}u", comment))
        return (_with_words(Block(coupled=coupled, temps=tuple(temps), body=tuple(body))),
                tuple(fluxers))

    # --- declarations ----------------------------------------------------------------
    def _buffers(self, fluxers) -> tuple[Buffer, ...]:
        f, F = self.f, self.d.F
        out = [Buffer(0, "state", "b_state", F, comment="states, structure of arrays"),
               Buffer(1, "err", "b_err", "uint", comment="first run-time error id (atomicMin)")]
        if self._init_used():
            out.append(Buffer(len(out), "init", "b_init", F, comment="init(x) values"))
        if f.collapse is not None:
            out.append(Buffer(len(out), "steps", "b_steps", "int",
                              comment="steps taken, then collapsed flags"))
        if any(p.name in self.pt for p in f.params):
            out.append(Buffer(len(out), "params", "b_params", F, readonly=True,
                              comment="per-trajectory params, structure of arrays"))
        for a in f.inputs:
            out.append(Buffer(len(out), "input", mangle("b_in", a.name), F, readonly=True,
                              array=a.name, comment=f"input {a.name}"))
        for o in f.outputs:
            out.append(Buffer(len(out), "output", mangle("b_out", o.name),
                              F, atomic=self.d.dtype == "float32", array=o.name,
                              comment=f"output {o.name}"))
        if any(x.deposit >= 0 for x in fluxers):
            out.append(Buffer(len(out), "deposits", "b_dep", F,
                              comment="flux deposits (index, value), summed on the host"))
        return tuple(out)

    def _uniforms(self) -> tuple[Uniform, ...]:
        f, F = self.f, self.d.F
        out = [Uniform(F, "u_dt", "step size", "dt"), Uniform(F, "u_t0", "start time", "t0"),
               Uniform("int", "u_steps", "steps in the whole integration", "steps"),
               Uniform("int", "u_step0", "first step of this dispatch", "step0"),
               Uniform("int", "u_nsteps", "steps in this dispatch", "nsteps"),
               Uniform("int", "u_final", "1 in the dispatch that ends the integration", "final"),
               Uniform("int", "u_count", "trajectories in this dispatch (array stride)", "count"),
               Uniform("int", "u_origin", "first trajectory (row with a basin) of this dispatch",
                       "origin")]
        out += [Uniform("int", f"u_grid{k}", f"grid extent of {a.index}", "grid", str(k))
                for k, a in enumerate(f.grid)]
        out += [Uniform("int", mangle("d", n), f"dim {n}", "dim", n) for n in f.dims]
        out += [Uniform(F, mangle("p", p.name), f"param {p.name}", "param", p.name)
                for p in f.params if p.name not in self.pt]
        return tuple(out)

    def _loaders(self) -> tuple[Loader, ...]:
        out = []
        for a in self.f.inputs:
            dims = tuple(_extent(x) for x in a.dims)
            out.append(Loader(func=mangle("ld", a.name), buffer=mangle("b_in", a.name),
                              dims=dims, array=a.name, flat=_index_flat(dims),
                              at=_at(len(dims))))
        return tuple(out)

    def _coupled_arrays(self) -> tuple[CoupledArray, ...]:
        sizes = [str(int(a.extent)) for a in self.f.basin or ()]
        if not sizes:
            return ()
        flat = _flat([f"e{k}" for k in range(len(sizes))], sizes)
        return tuple(CoupledArray(name=mangle("sh", c.name), func=mangle("ca", c.name),
                                  edge=c.edge.value, flat=flat, accessor=c.name in self.read_at)
                     for c in self.f.coupled if c.name in self.shared)


def _power_of_two(w: Fraction) -> bool:
    """Is ``w`` 2^m for an integer m (positive, either way of 1)?"""
    n, d = w.numerator, w.denominator
    return n > 0 and n & (n - 1) == 0 and d & (d - 1) == 0 and (n == 1 or d == 1)


def _flat(index: list[str], dims: list[str]) -> str:
    """Row-major offset of ``index`` in an array of extents ``dims`` (Horner form)."""
    text = index[0]
    for i, d in zip(index[1:], dims[1:]):
        text = f"({text}) * {d} + {i}" if " + " in text else f"{text} * {d} + {i}"
    return text


def _box(axes: tuple[Axis, ...]) -> str:
    """Basin offset of the ``vg_j``-th active lane (row-major over the active box)."""
    if len(axes) <= 1:
        return "vg_j"
    idx, rest = [], "vg_j"
    for k in range(len(axes) - 1, 0, -1):
        idx.append(f"{rest} % vg_ext{k}")
        rest = f"{rest} / vg_ext{k}" if rest == "vg_j" else f"({rest}) / vg_ext{k}"
    idx.append(rest)
    return _flat(list(reversed(idx)), [str(a.size) for a in axes])


def _roots(f: Field) -> list[Expr]:
    """Every expression a kernel evaluates per lane (the coupled ones through their uses)."""
    roots = list(f.derivs) + ([f.collapse] if f.collapse is not None else [])
    return roots + [x for fl in f.flux for x in (*fl.index, fl.value)]


def _index_flat(dims: tuple[str, ...]) -> str:
    return _flat([f"i{k}" for k in range(len(dims))], list(dims))


def _at(rank: int) -> str:
    return "ivec3(" + ", ".join([f"i{k}" for k in range(rank)] + ["0"] * (3 - rank)) + ")"


def _strip(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _extent(x) -> str:
    return str(x) if isinstance(x, int) else mangle("d", x)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _with_words(block: Block) -> Block:
    """``block`` with the identifiers its printed code names (see Block.words)."""
    texts = list(block.temps) + [a.expr for a in block.body]
    if block.coupled is not None:
        texts += [v.expr for v in block.coupled.values]
    return dataclasses.replace(block, words=frozenset(
        w for t in texts for w in _IDENTIFIER.findall(t)), calls=_calls(texts))


def _calls(texts) -> tuple[tuple[str, int], ...]:
    """(helper, calls) for each helper with a loop that the texts call."""
    n = Counter(w for t in texts for w in _IDENTIFIER.findall(t) if w in LOOP_HELPERS)
    return tuple(sorted(n.items()))


def _helper_calls(stages, collapse, init, flux) -> tuple[dict, dict]:
    """Calls of helpers with loops, per step (a stage runs its block or its fast block:
    the larger count) and once (init, flux), as {helper: calls}."""
    per_step: Counter = Counter()
    for st in stages:
        a, b = dict(st.block.calls), dict(st.fast.calls if st.fast else ())
        per_step.update({h: max(a.get(h, 0), b.get(h, 0)) for h in a.keys() | b.keys()})
    per_step.update(dict(collapse.calls if collapse else ()))
    once: Counter = Counter(dict(_calls([a.expr for a in init])))
    once.update(dict(flux.calls if flux else ()))
    return +per_step, +once


def _helper_trips(calls: dict) -> int:
    return sum(LOOP_HELPERS[h] * n for h, n in calls.items())


def _walk(roots: list[Expr]):
    """Every node under the roots, once: a subtree shared by many roots (a let used by
    every derivative) is walked once, not once per root (that was quadratic)."""
    seen = set()
    for root in roots:
        stack = [root]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            yield x
            if isinstance(x, Apply):
                stack.extend(x.args)
            elif isinstance(x, (Load, CoupledAt)):
                stack.extend(x.index)


def _coupled_uses(roots: list[Expr]) -> tuple[set[str], list[Reduce], set[str]]:
    """Coupled names used, the reductions (in order), and the names read as s[e]."""
    names, reduces, at = set(), [], set()
    for x in _walk(roots):
        if isinstance(x, Sym) and x.kind is SymKind.COUPLED:
            names.add(x.name)
        elif isinstance(x, CoupledAt):
            names.add(x.name)
            at.add(x.name)
        elif isinstance(x, Reduce):
            names.add(x.name)
            if x not in reduces:
                reduces.append(x)
    return names, reduces, at


def _span_of(e: Expr):
    return getattr(e, "span", None)
