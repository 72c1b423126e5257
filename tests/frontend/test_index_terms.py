"""Index arithmetic is kernel data (kernel.Ix, kernel.Below) that the dialect spells:
lower.py writes no operator, and another dialect's table prints other words."""
from __future__ import annotations

import dataclasses

from vgpu_compiler.backends.glsl import describe, print_kernel
from vgpu_compiler.backends.glsl.dialect import GLSL_FLOAT32
from vgpu_compiler.backends.glsl.kernel import Below, Ix, flat, product, spell
from vgpu_compiler.frontend.compile import compile_program

from field_examples import HEAT, KURAMOTO, LORENZ, MATMUL

BASIN3 = """
field cube {
    grid i < N, j < M, k < P
    basin a < 2, b < 3, c < 4
    state x = 1
    coupled s = x
    dx/dt = -mean(s)
    solve euler(dt = 0.1, steps = 3)
}
"""


def _terms(k):
    yield k.lane
    yield k.nactive
    yield k.box
    yield from (x.flat for x in k.loaders + k.fluxers + k.coupled_arrays)


def _leaves(term):
    if isinstance(term, Ix):
        yield from _leaves(term.a)
        yield from _leaves(term.b)
    else:
        yield term


def test_the_kernel_description_holds_no_spelled_index():
    for src in (LORENZ, HEAT, KURAMOTO, MATMUL, BASIN3):
        k = describe(compile_program(src).select(None))
        assert isinstance(k.active, Below)
        for term in _terms(k):
            for leaf in _leaves(term):      # names and sizes only: no operator, no space
                assert isinstance(leaf, int) or leaf.isidentifier() or leaf.isdigit(), leaf


def test_glsl_spells_flat_offsets_the_active_box_and_products():
    d = GLSL_FLOAT32
    assert spell(flat(["i0", "i1", "i2"], ["d_A", "d_B", "d_C"]), d) == \
        "(i0 * d_B + i1) * d_C + i2"
    assert spell(flat([Ix("sub", "g_i", "u_origin"), "g_j"], ["u_grid0", "u_grid1"]), d) == \
        "(g_i - u_origin) * u_grid1 + g_j"
    assert spell(Ix("div", Ix("div", "vg_j", "e2"), "e1"), d) == "(vg_j / e2) / e1"
    assert spell(Ix("mod", Ix("div", "vg_j", "e2"), "e1"), d) == "vg_j / e2 % e1"
    assert spell(product(["a", "b", "c"]), d) == "a * b * c"
    assert spell(Below((("l_a", "vg_ext0"), ("l_b", "vg_ext1"))), d) == \
        "l_a < vg_ext0 && l_b < vg_ext1"


def test_another_table_prints_the_same_kernel_in_its_words():
    fake = dataclasses.replace(
        GLSL_FLOAT32, index_ops={"add": "add({0}, {1})", "sub": "sub({0}, {1})",
                                 "mul": "mul({0}, {1})", "div": "div({0}, {1})",
                                 "mod": "mod({0}, {1})"},
        index_grouped=frozenset(), below="lt({0}, {1})", all_of=" and ")
    k = print_kernel(describe(compile_program(BASIN3).select(None)), fake)
    assert k.lane == "add(mul(add(mul(sub(g_i, u_origin), u_grid1), g_j), u_grid2), g_k)"
    assert k.active == "lt(l_a, vg_ext0) and lt(l_b, vg_ext1) and lt(l_c, vg_ext2)"
    assert k.nactive == "mul(mul(vg_ext0, vg_ext1), vg_ext2)"
