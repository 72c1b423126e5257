"""Noise in the shader kernel: what lowering adds for a stochastic field, and how it prints.

The increments are those of the reference (backends/numpy/noise.py and
docs/language.md, Noise): after the drift update, noise ``k`` adds
``G * dW_k`` (``milstein``: plus ``((0.5 * G) * G_x) * (dW_k * dW_k - dt)``) to
each state it drives, with ``G`` and ``G_x`` evaluated in stage 0 (the state at
the step's start, ``t = t_n``) and ``dW_k = sqrt(dt) * Z``; ``Z`` is the
float32 normal of the dialect's ``normal`` (``vg_normal``, built once in
codegen/build/noise.py: Philox4x32-10, GLSL's with ``umulExtended``, its first round's
constant word multiplied with 16-bit halves, which Mesa folds right; the same words
as ``vgpu.philox``) of the counter
``(i, n, k, 0)``: ``i`` the trajectory's flat row-major index in the grid,
computed from the grid indices the kernel gives the program (so every
chunk, dispatch and offset keeps it), ``n`` the global step number. The key is
two uniforms (role ``key``): a new seed is a new uniform value, never a
recompile.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.nodes import Field
from .dialect import mangle
from .kernel import Assign, Let, Term, Uniform, flat, spell


@dataclass(frozen=True)
class NoiseTerm:
    k: int              # the noise's index (counter word 2)
    state: int          # the state it drives
    g: str              # the local holding G (set in stage 0)
    gx: str             # milstein: the local holding dG/dx; "" for Euler–Maruyama
    comment: str = ""


def terms(f: Field) -> tuple[NoiseTerm, ...]:
    out = []
    for n in f.noises:
        for i, g in enumerate(n.diffusion):
            if g is None:
                continue
            name = f"{n.index}_{f.states[i].name}"
            gx = mangle("vg_gx", name) if n.slope else ""
            out.append(NoiseTerm(n.index, i, mangle("vg_g", name), gx, f"noise {n.name}"))
    return tuple(out)


def stage_lets(f: Field, where) -> list[Let]:
    """The coefficients (and slopes) of stage 0, read by the noise update."""
    lets = []
    for t in terms(f):
        noise = next(n for n in f.noises if n.index == t.k)
        lets.append(Let(t.g, noise.diffusion[t.state], where(noise.span)))
        if t.gx:
            lets.append(Let(t.gx, noise.slope[t.state], where(noise.span)))
    return lets


def uniforms(f: Field) -> list[Uniform]:
    if not f.noises:
        return []
    return [Uniform("uint", "u_key0", "noise key: seed mod 2^32", "key", "0"),
            Uniform("uint", "u_key1", "noise key: seed div 2^32", "key", "1")]


def traj(axes) -> Term:
    """The trajectory's flat row-major index in the grid (the counter's word 0), an index
    term over the grid indices the program sees: in int, whose wrap-around keeps the
    bits that the uint of the counter takes (the index mod 2^32, as in numpy)."""
    return flat([a.index for a in axes], [f"u_grid{k}" for k in range(len(axes))])


def functions(kernel, dialect) -> str:
    """The generator's functions (codegen/build/noise.py) in the dialect, for its helpers
    template; "" without noise."""
    from ...codegen.build import noise
    return noise.printed(dialect.language) if kernel.noise else ""


def printed_traj(kernel, dialect) -> str:
    return dialect.to_uint.format(spell(kernel.traj, dialect)) if kernel.noise else ""


def printed(kernel, dialect, step: str = "n", target=None) -> tuple[tuple, tuple]:
    """(draws, updates): ``F vg_dwk = ...`` per noise used, then ``s = ...`` per term
    (``step``: the step number's variable; ``target(i)``: the variable the update of
    state i adds to, the state itself unless given: events add to the step's end)."""
    F, lit = dialect.F, dialect.float_literal
    draws, updates, seen = [], [], set()
    for t in kernel.noise:
        if t.k not in seen:
            seen.add(t.k)
            z = dialect.normal.format(traj="vg_traj", step=step, k=dialect.uint(t.k))
            z = z if F == dialect.normal_type else dialect.cast.format(z, F=F)
            draws.append(Assign(f"vg_dw{t.k}", f"vg_sqdt * {z}", t.comment))
        s = kernel.states[t.state][0] if target is None else target(t.state)
        text = f"{s} + {t.g} * vg_dw{t.k}"
        if t.gx:
            text = (f"({text}) + (({lit(0.5)} * {t.g}) * {t.gx}) * "
                    f"(vg_dw{t.k} * vg_dw{t.k} - u_dt)")
        updates.append(Assign(s, text, t.comment))
    return tuple(draws), tuple(updates)
