"""The noise generator, once: Philox4x32-10 and Box-Muller (the numpy oracle is
noise/philox.py and noise/normal.py, whose constants and order of operations this keeps),
as functions of the kernel printed in every dialect (always with the dialect's float32
target: the normals are float32 on every backend).

- ``rounds``: the ten rounds on the word locals ``vg_c0..3`` under the key ``vg_k0, vg_k1``
  (the key bumped by the Weyl increments before every round but the first); a round's two
  32 x 32-bit products are the target's (codegen/mathlib.mulhilo: GLSL's umulExtended, its
  first round's constant product from 16-bit halves; WGSL's halves; C's 64-bit multiply);
- ``vg_normal(i, n, k, zero, key0, key1)``: Z of the counter (i, n, k, zero), u = (float(w >>
  9) + 0.5) * 2^-23 of the first two words, Z = sqrt(-2 log u1) cos(2 pi u2);
- the C kernel's lane loops (templates/helpers.c.j2, vg_normals) have it in two phases:
  ``vg_uniforms`` (u1 returned, u2 through a pointer) and ``vg_box_muller``;
- ``vg_philox_word``: word j of the counter's Philox words (the tests' generator).
"""
from __future__ import annotations

from ...noise import normal as N
from ...noise import philox as P
from .. import ir
from .. import mathlib as M
from ..ir import FLOAT, INT, WORD, Assign, Let, Return, Var

C = tuple(Var(f"vg_c{j}") for j in range(4))
K = (Var("vg_k0"), Var("vg_k1"))
COUNTER = (("uint", "i"), ("uint", "n"), ("uint", "k"), ("uint", "zero"),
           ("uint", "key0"), ("uint", "key1"))
NOTE = ("The standard normal of the noise counter (i, n, k, zero) under the key (key0, "
        "key1), in float32\non every backend (codegen/build/noise.py): Philox4x32-10 "
        "(Salmon, Moraes, Dror and Shaw, SC'11;\nRandom123's philox.h), then u = "
        "(float(w >> 9) + 0.5) * 2^-23 of the first two words,\nZ = sqrt(-2 log u1) "
        "cos(2 pi u2).")


def rounds(t) -> tuple:
    """The ten rounds, in place on vg_c0..3 and vg_k0, vg_k1 (the products' locals declared
    first)."""
    out = [*M.mulhilo_locals(t, "vg_m0"), *M.mulhilo_locals(t, "vg_m1")]
    for r in range(10):
        if r:
            out += [M.word_add(t, K[0], ir.hexu(P.W0)), M.word_add(t, K[1], ir.hexu(P.W1))]
        m0, hi0, lo0 = M.mulhilo(t, ir.hexu(int(P.M0)), C[0], "vg_m0")
        m1, hi1, lo1 = M.mulhilo(t, ir.hexu(int(P.M1)), C[2], "vg_m1", constant=r == 0)
        out += [ir.Comment(f"round {r + 1}"), *m0, *m1,
                Assign(C[0], ir.bxor(hi1, C[1], K[0])), Assign(C[1], lo1),
                Assign(C[2], ir.bxor(hi0, C[3], K[1])), Assign(C[3], lo0)]
    return tuple(out)


def _philox(t) -> tuple:
    """The counter's and key's words as locals, then the rounds."""
    start = [Let(c.name, WORD, Var(name), mutable=True)
             for c, (_, name) in zip(C + K, COUNTER)]
    return (*start, *rounds(t))


def _uniform(w) -> ir.Expr:
    return ir.mul(ir.add(ir.call("to_float", ir.shr(w, 9)), ir.f(N.HALF)), ir.f(N.SCALE))


def _box_muller(u1, u2) -> ir.Expr:
    return ir.mul(ir.call("sqrt32", ir.mul(ir.f(N.MINUS_TWO), ir.call("log32", u1))),
                  ir.call("cos32", ir.mul(ir.f(N.TWO_PI), u2)))


def _uniforms() -> tuple:
    return (Let("vg_u1", FLOAT, _uniform(C[0]), precise=True),
            Let("vg_u2", FLOAT, _uniform(C[1]), precise=True))


def normal(t) -> ir.Function:
    if t.lane_block:        # (C: its lane loops' two phases, vg_uniforms and vg_box_muller)
        body = (Let("vg_u2", FLOAT, None),
                Let("vg_u1", FLOAT, ir.call("vg_uniforms", *(Var(n) for _, n in COUNTER),
                                            Var("&vg_u2"))),
                Return(ir.call("vg_box_muller", Var("vg_u1"), Var("vg_u2"))))
    else:
        body = (*_philox(t), *_uniforms(), Return(_box_muller(Var("vg_u1"), Var("vg_u2"))))
    return ir.Function("vg_normal", COUNTER, FLOAT, body, NOTE)


def lane_phases(t) -> tuple:
    """The C kernel's two phases of vg_normal (its lane loops: vg_normals)."""
    uniforms = ir.Function(
        "vg_uniforms", COUNTER + (("float", "*u2"),), FLOAT,
        (*_philox(t), *_uniforms(), Assign(Var("*u2"), Var("vg_u2")), Return(Var("vg_u1"))),
        "vg_normal's u1 (returned) and u2 (through the pointer): the lane loop's first phase")
    box = ir.Function("vg_box_muller", (("float", "u1"), ("float", "u2")), FLOAT,
                      (Return(_box_muller(Var("u1"), Var("u2"))),), "... and its second")
    return uniforms, box


def philox_word(t) -> ir.Function:
    """Word j of the Philox words (a test's generator: vgpu.philox, word for word)."""
    pick = Var(C[3].name)
    for j in (2, 1, 0):
        pick = ir.Select(ir.eq(Var("j"), ir.i(j)), C[j], pick)
    return ir.Function("vg_philox_word", COUNTER + ((INT, "j"),), WORD,
                       (*_philox(t), Return(pick)),
                       "Word j of the Philox4x32-10 words of the counter under the key")


def functions(t) -> tuple:
    """The noise functions of a kernel of target ``t`` (a float32 target)."""
    head = (M.mulhi_function(),) if t.wide_mul != "u64" else ()
    return (*head, *(lane_phases(t) if t.lane_block else ()), normal(t))


def printed(language: str, tests: bool = False) -> str:
    """The noise functions printed in ``language`` (its float32 target); ``tests``:
    vg_philox_word too."""
    from ..targets import TARGETS, printer
    t = TARGETS[language]["float32"]
    fns = functions(t) + ((philox_word(t),) if tests else ())
    return "\n\n".join(printer(t).text((fn,)) for fn in fns) + "\n"
