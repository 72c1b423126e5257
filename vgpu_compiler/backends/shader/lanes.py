"""Several trajectories per invocation: an adaptive kernel whose invocations each carry
``lanes`` trajectories side by side (templates/adaptive_lanes.glsl.j2).

Why: a software renderer (Mesa llvmpipe) runs one SIMD vector of invocations through
the shader at a time, so an invocation's step is one chain of dependent operations (a
stage needs the one before it) and the core waits on each operation's latency. Two
independent chains in one invocation run in about the time of one (measured on
llvmpipe: a chain of multiply-adds, 1, 2, 4 and 8 chains per invocation gave 13.6,
27.6, 48.6 and 63.5 Gflop/s; the adaptive Lorenz sweep: see docs/performance.md).

How: the template writes each per-trajectory piece of the kernel once and renames its
locals for copy ``j`` (``rename``: ``s_x`` -> ``s_x_1``); the stages of the copies are
interleaved, so the shader compiler sees the chains side by side. Each copy's
arithmetic is the one-trajectory kernel's, operation for operation, so the numbers do
not change (tests/codegen/test_lanes.py compares them bit for bit). A copy whose trajectory has
stopped still computes an attempt the other copy needs, and keeps none of it: so only
kernels whose step has no effect but its numbers take this path (``lanes_for``).
"""
from __future__ import annotations

import re

# the locals of the template's per-trajectory pieces (besides the kernel's own names)
TEMPLATE_LOCALS = frozenset({
    "lane", "vg_active", "vg_flat", "vg_t", "vg_h", "vg_taken", "vg_rej", "vg_status",
    "vg_again", "vg_next", "vg_paused", "vg_go", "vg_use", "vg_cut", "u_dt", "t_n", "nstep",
    "tt", "vg_e", "e", "sc", "vg_e2", "e2", "vg_err", "vg_fin", "vg_ok", "vg_fac", "vg_prop", "vg_tn",
    "vg_span", "vg_d0", "vg_d1", "vg_d2", "vg_h0", "vg_big", "vg_h1"})
_PER_STATE = ("vg_n{}", "vg_sc{}", "vg_q{}")
_DECLARED = re.compile(r"^\s*(?:precise\s+)?\w+\s+([A-Za-z_]\w*)\s*=")
_TOKEN = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def lanes_for(printed, dialect) -> int:
    """Trajectories per invocation for this printed adaptive kernel: the dialect's
    ``adaptive_lanes`` for an explicit adaptive method whose step only computes (no
    events, basin, collapse, flux, init block, noise, input arrays or run-time error
    sites: a copy's wasted attempt then has no effect) and that writes no save_at
    states (AdaptiveParts.saves: a call with save_at, a Simulation), else 1."""
    k = printed
    ad = getattr(printed, "ad", None)
    if dialect.adaptive_lanes <= 1 or ad is None or ad.saves:
        return 1        # (a kernel writing save_at states, a fixed-step method's too, keeps
        #                  one: llvmpipe's loop limiter would allow each copy half as many
        #                  save times)
    plain = not (k.rosenbrock is not None or k.events is not None or k.has_basin
                 or k.collapse is not None or k.flux is not None or k.init or k.uses_init
                 or k.observe is not None
                 or k.n_deposits or k.noise or k.loaders or k.fluxers or k.reports_errors
                 or printed.errors)
    return dialect.adaptive_lanes if plain else 1


def lane_names(printed) -> frozenset[str]:
    """Every local a copy renames: the template's, the kernel's registers (states, stage
    values, k names, per-trajectory params, grid indices) and the blocks' temporaries."""
    k = printed
    names = set(TEMPLATE_LOCALS)
    for s in k.states:
        names.update(s[:2])
    for ks in k.stage_k:
        names.update(ks)
    names.update(k.pt_params)
    names.update(a.index for a in k.axes)
    names.update(f.format(i) for f in _PER_STATE for i in range(len(k.states)))
    for st in k.stages:
        for t in st.block.temps:
            m = _DECLARED.match(t)
            if m:
                names.add(m.group(1))
    return frozenset(names)


def rename(text: str, j: int, names: frozenset[str]) -> str:
    """``text`` with each of ``names`` (a whole identifier, not a member after a dot) made
    copy ``j``'s: ``name_j``; comments (after ``//``) are left as they are."""
    out = []
    for line in text.split("\n"):
        code, sep, comment = line.partition("//")
        code = _TOKEN.sub(lambda m: f"{m[0]}_{j}" if m[0] in names else m[0], code)
        out.append(code + sep + comment)
    return "\n".join(out)
