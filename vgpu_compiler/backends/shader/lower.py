"""IR Field -> kernel description (kernel.py): the GPU mapping, decided once, in no language.

trajectory -> invocation; basin -> workgroup (local size = basin shape, the
last grid axis on x); without a basin, 64 invocations in a flat 1-D range.
State lives in registers inside the step loop and in a structure-of-arrays
storage buffer between dispatches. Everything that only sizes or places data
(grid, dims, dt, steps, t0, step offsets) is a uniform, so one kernel serves
every shape. The stages and the update are ir.step's program for the method
(no recurrence is written out here); expressions stay IR, types are neutral:
printing.py prints the description with a dialect.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from ...errors import BackendError
from ...ir.nodes import CoupledAt, Expr, Field, Reduce, Sym
from ...ir.ops import SymKind
from ...ir.ranges import Ranges, Where
from ...ir.step import Stage as StepStage
from ...ir.step import step_program
from ...ir.walk import children, walk
from . import noise as _noise
from .dialect import OBSERVE, mangle
from .kernel import (Axis, Below, Block, Buffer, Context, CoupledArray, CoupledBlock, Deposit,
                     Fluxer, Ix, Kernel, Let, Loader, Reduction, Stage, Uniform, flat, product)

VERSION = "glsl-1"
FLAT_GROUP = 64
COMPONENTS = "xyz"
# How a basin reduces (sum/mean/min/max over its active lanes):
#   tree    a shared-memory tree, one barrier per level: few steps per lane, right for a GPU
#   serial  lane 0 folds the active lanes one by one: two barriers in all, right for a
#           software renderer (llvmpipe), where every barrier switches through all lanes
REDUCTIONS = ("tree", "serial")
REDUCTION_ENV = "VGPU_REDUCTION"


def forced_reduction() -> str | None:
    """The strategy VGPU_REDUCTION=tree|serial forces on every backend (a test and
    diagnosis hook, read when a kernel is built), or None when it is not set."""
    forced = os.environ.get(REDUCTION_ENV, "").strip().lower()
    if forced and forced not in REDUCTIONS:
        raise BackendError(f"{REDUCTION_ENV} must be one of {', '.join(REDUCTIONS)}, "
                           f"not {forced!r}")
    return forced or None


def reduction_on(software: bool) -> str:
    """How a device's basins reduce, for glsl and wgpu alike: "serial" on a CPU
    (software) renderer, where a barrier switches through every invocation of the
    workgroup, else "tree"; VGPU_REDUCTION overrides it (part of the kernel key)."""
    return forced_reduction() or ("serial" if software else "tree")


def describe(field: Field, *, dtype: str = "float32", per_trajectory_params=(),
             source: str | None = None, reduction: str = "tree",
             history: bool = False) -> Kernel:
    """The kernel description of ``field`` for one dtype and set of per-trajectory params
    (``source``: the program text, for comments).

    ``reduction``: how basins reduce, "tree" (a GPU) or "serial" (a software renderer).
    ``history``: the step loop also writes every saved step of a ``save_every`` history
    into a buffer (``b_hist``), so a history costs no dispatch per saved state.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, not {reduction!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, not {dtype!r}")
    kernel = _Lowering(field, dtype, frozenset(per_trajectory_params), source,
                       reduction).kernel()
    if not history:
        return kernel
    return dataclasses.replace(kernel, history=True, buffers=kernel.buffers + (
        Buffer(len(kernel.buffers), "history", "b_hist", "float",
               comment="the saved steps of this dispatch, in order: slot, state, lane"),), uniforms=(
        kernel.uniforms + (Uniform("int", "u_every", "steps between saved steps", "every"),)))


class _Lowering:
    def __init__(self, field: Field, dtype: str, pt: frozenset, source: str | None,
                 reduction: str = "tree"):
        self.f, self.dtype, self.pt, self.reduction = field, dtype, pt, reduction
        # which coupled names are read as s[e] / reduced anywhere: they decide the shared
        # arrays and whether a coupled exchange must first wait for the last one's readers
        _, rs, self.read_at = _coupled_uses(_roots(field))
        self.reduced = reduced = {r.name for r in rs}
        self.shared = self.read_at | (reduced if reduction == "serial" else set())
        # tree: every lane reads the scratch array after the last barrier; serial: only
        # s[e] reads come after it (lane 0's fold is fenced by the exchange's two barriers)
        self.fence = bool(self.read_at) or (reduction == "tree" and bool(reduced))
        # the text as the lexer counts it: a leading byte-order mark is not on line 1
        self.lines = source.removeprefix("\ufeff").splitlines() if source else None
        self.reduces: dict[Reduce, str] = {}

    def _reduce_var(self, r: Reduce) -> str:
        if r not in self.reduces:
            self.reduces[r] = f"vg_r{len(self.reduces)}"
        return self.reduces[r]

    # --- the pieces ------------------------------------------------------------
    def kernel(self) -> Kernel:
        f = self.f
        self._results = 0           # serial: the most reductions of one exchange
        axes = self._axes()
        init = self._init()
        program = step_program(f.solver.tableau)
        stages = tuple(self._stage(st) for st in program.stages)
        collapse = self._collapse()
        observe = self._observe("s")
        flux, fluxers = self._flux()
        size = int(np.prod([a.size for a in axes])) if f.basin else FLAT_GROUP
        local = tuple(next((a.size for a in axes if a.comp == c), 1) for c in COMPONENTS)
        if not f.basin:
            local = (FLAT_GROUP, 1, 1)
        return Kernel(
            name=f.name, version=VERSION, dtype=self.dtype,
            source_name=f.name, local_size=local, has_basin=f.basin is not None,
            basin_size=size, pow2=1 << (size - 1).bit_length(), axes=axes,
            nactive=product(f"vg_ext{k}" for k in range(len(axes))),
            active=Below(tuple((a.basin, f"vg_ext{k}") for k, a in enumerate(axes))),
            lane=flat([Ix("sub", axes[0].index, "u_origin")] + [a.index for a in axes[1:]],
                      [f"u_grid{k}" for k in range(len(axes))]),
            buffers=self._buffers(fluxers), uniforms=self._uniforms(),
            loaders=self._loaders(), fluxers=fluxers, coupled_arrays=self._coupled_arrays(),
            reductions=(tuple(f"vg_red{i}" for i in range(len(self.reduces)))
                        if self.reduction == "tree" else ()),
            reduction=self.reduction,
            results=self._results if self.reduction == "serial" else 0,
            box=_box(axes),
            reduce_trips_per_step=sum(self._trips(b) for b in
                                      [st.block for st in stages] + [collapse]),
            reduce_trips_once=self._trips(flux),
            # every input's loader reports out-of-range reads, also when never read
            reports_errors=bool(f.inputs),
            states=tuple((mangle("s", s.name), mangle("y", s.name), self._where(s.span))
                         for s in f.states),
            stage_k=tuple(tuple(mangle(f"k{i}", s.name) for s in f.states)
                          for i in range(len(stages))),
            pt_params=tuple(mangle("p", p.name) for p in f.params if p.name in self.pt),
            init=init, uses_init=bool(self._init_used()),
            init_names=tuple(mangle("s0", s.name) for s in f.states),
            stages=stages, update=program.update, collapse=collapse, flux=flux,
            n_deposits=sum(1 for x in fluxers if x.deposit >= 0), ranges=Ranges(f),
            noise=_noise.terms(f), traj=_noise.traj(axes) if f.noises else 0,
            observe=observe, observe_q=self._observe("q") if f.events else None,
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

    # --- contexts ------------------------------------------------------------------
    def _block(self, roots: list[Expr], ctx: Context, body, prefix: str) -> Block:
        return Block(ctx=ctx, coupled=self._coupled_block(roots, ctx), body=tuple(body),
                     prefix=prefix)

    def _coupled_block(self, roots: list[Expr], ctx: Context) -> CoupledBlock | None:
        used, reduces, _ = _coupled_uses(roots)
        if not used:
            return None
        decl = [c for c in self.f.coupled if c.name in used]
        values = tuple(Let(mangle("c", c.name), c.expr, self._where(c.span)) for c in decl)
        # only what some lane reads back: s[e] reads, and (serial) the reduced values
        shared = tuple((mangle("sh", c.name), mangle("c", c.name)) for c in decl
                       if c.name in self.shared)
        self._results = max(self._results, len(reduces))
        reds = []
        for i, r in enumerate(reduces):
            var = self._reduce_var(r)
            reds.append(Reduction(node=r, var=var, scratch=var.replace("vg_r", "vg_red"),
                                  source=mangle("c", r.name), op=r.op,
                                  shared=mangle("sh", r.name), acc=f"vg_acc{i}", slot=i))
        return CoupledBlock(values=values, shared=shared, reductions=tuple(reds),
                            fence=self.fence and bool(shared or reds))

    def _init(self) -> tuple[Let, ...]:
        return tuple(Let(mangle("s", s.name), s.init, self._where(s.span))
                     for s in self.f.states if s.init is not None)

    def _init_used(self) -> set[str]:
        roots = list(self.f.derivs) + [c.expr for c in self.f.coupled]
        roots += [self.f.collapse] if self.f.collapse is not None else []
        roots += [r.expr for r in self.f.observer_rules]
        roots += [x for fl in self.f.flux for x in (*fl.index, fl.value)]
        for ev in self.f.events:        # `when` / `stop when`: conditions, values, flux
            roots += [ev.cond, *(value for _, value in ev.assigns)]
            roots += [x for fl in ev.flux for x in (*fl.index, fl.value)]
        return {s.name for s in _walk(roots) if isinstance(s, Sym) and s.kind is SymKind.INIT}

    def _stage(self, stage: StepStage) -> Stage:
        f, s = self.f, stage.index
        body = [Let(mangle(f"k{s}", st.name), e, self._where(_span_of(e) or st.span))
                for st, e in zip(f.states, f.derivs)]
        if s == 0 and f.noises:         # the noise's coefficients, on the step's start
            body += _noise.stage_lets(f, self._where)
        roots = [x.expr for x in body]
        block = self._block(roots, Context(state="y"), body, f"vg_t{s}_")
        return Stage(index=s, c=stage.c, state=stage.state, block=block)

    def _collapse(self) -> Block | None:
        cond = self.f.collapse
        if cond is None:
            return None
        ctx = Context(state="s", time="tt", step="nstep")
        return self._block([cond], ctx, [Let("vg_hold", cond, self._where(_span_of(cond)))],
                           "vg_tc")

    def _observe(self, state: str) -> Block | None:
        """The step-end observers (peak, trough: ir/observers.py's rules) as one block
        over the state variables ``state``_* at time ``tt``, step ``nstep``: per rule
        ``m = e``, which printing makes ``m = fmax(m, e)`` (``fmin``)."""
        rules = [r for r in self.f.observer_rules if r.kind in OBSERVE]
        if not rules:
            return None
        ctx = Context(state=state, time="tt", step="nstep", where=Where.AFTER)
        body = [Let(mangle(state, self.f.states[r.index].name), r.expr, r.kind)
                for r in rules]
        return self._block([r.expr for r in rules], ctx, body, f"vg_to{state}")

    def _flux(self) -> tuple[Block | None, tuple[Fluxer, ...]]:
        f = self.f
        if not f.flux:
            return None, ()
        deposit = self.dtype == "float64"       # no float64 atomics: the host sums
        fluxers, body, roots = [], [], []
        decls = {o.name: o for o in f.outputs}
        for n, fl in enumerate(f.flux):
            func = mangle(f"fx{n}", fl.output)
            dims = tuple(_extent(x) for x in decls[fl.output].dims)
            fluxers.append(Fluxer(func=func, buffer=mangle("b_out", fl.output), dims=dims,
                                  array=fl.output, flat=_index_flat(dims),
                                  deposit=n if deposit else -1))
            args = (*fl.index, fl.value)
            roots += args
            body.append(Deposit(func, args, fl.output, fl.span, self._where(fl.span)))
        ctx = Context(state="s", time="tt", step="nstep")
        return self._block(roots, ctx, body, "vg_tf"), tuple(fluxers)

    # --- declarations ----------------------------------------------------------------
    def _buffers(self, fluxers) -> tuple[Buffer, ...]:
        f, F = self.f, "float"
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
                              F, atomic=self.dtype == "float32", array=o.name,
                              comment=f"output {o.name}"))
        if any(x.deposit >= 0 for x in fluxers):
            out.append(Buffer(len(out), "deposits", "b_dep", F,
                              comment="flux deposits (index, value), summed on the host"))
        return tuple(out)

    def _uniforms(self) -> tuple[Uniform, ...]:
        f, F = self.f, "float"
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
        return tuple(out + _noise.uniforms(f))

    def _loaders(self) -> tuple[Loader, ...]:
        out = []
        for a in self.f.inputs:
            dims = tuple(_extent(x) for x in a.dims)
            out.append(Loader(func=mangle("ld", a.name), buffer=mangle("b_in", a.name),
                              dims=dims, array=a.name, flat=_index_flat(dims)))
        return tuple(out)

    def _coupled_arrays(self) -> tuple[CoupledArray, ...]:
        sizes = [str(int(a.extent)) for a in self.f.basin or ()]
        if not sizes:
            return ()
        offset = flat([f"e{k}" for k in range(len(sizes))], sizes)
        return tuple(CoupledArray(name=mangle("sh", c.name), func=mangle("ca", c.name),
                                  edge=c.edge.value, flat=offset, accessor=c.name in self.read_at)
                     for c in self.f.coupled if c.name in self.shared)


def _box(axes: tuple[Axis, ...]):
    """Basin offset of the ``vg_j``-th active lane (row-major over the active box)."""
    if len(axes) <= 1:
        return "vg_j"
    idx, rest = [], "vg_j"
    for k in range(len(axes) - 1, 0, -1):
        idx.append(Ix("mod", rest, f"vg_ext{k}"))
        rest = Ix("div", rest, f"vg_ext{k}")
    idx.append(rest)
    return flat(reversed(idx), [a.size for a in axes])


def _roots(f: Field) -> list[Expr]:
    """Every expression a kernel evaluates per lane (the coupled ones through their uses)."""
    roots = list(f.derivs) + ([f.collapse] if f.collapse is not None else [])
    roots += [g for n in f.noises for g in (*n.diffusion, *n.slope) if g is not None]
    return roots + [x for fl in f.flux for x in (*fl.index, fl.value)]


def _index_flat(dims: tuple[str, ...]):
    return flat([f"i{k}" for k in range(len(dims))], dims)


def _extent(x) -> str:
    return str(x) if isinstance(x, int) else mangle("d", x)


def _walk(roots: list[Expr]):
    """Every node under the roots once (ir.walk), operands right to left: the order in
    which reductions have always been numbered (vg_r0, vg_r1 ...; the goldens pin it)."""
    return walk(*roots, kids=lambda node: tuple(reversed(children(node))))


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
