"""The dialect tables (backends/glsl/dialect.py) and the language-neutral kernel description.

A dialect is a table with a few overrides; the kernel description holds IR and
neutral types; printing with another dialect prints another language.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from vgpu_compiler.backends.glsl import describe, emit_glsl, print_kernel
from vgpu_compiler.backends.glsl.dialect import (DIALECTS, GLSL_FLOAT32, GLSL_FLOAT64, RULES,
                                                 Dialect)
from vgpu_compiler.backends.glsl.kernel import Deposit, Let
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.nodes import Expr
from vgpu_compiler.ir.ops import Op, ReduceOp
from vgpu_compiler.resources import templates_dir

from field_examples import HEAT, HISTOGRAM, KURAMOTO, LORENZ, MATMUL


def field(src):
    return compile_program(src).select(None)


EVERY_OP = """
field every {
    input v[N]
    grid i < N
    param a = 0.5
    state x
    let q = i // 2 + i % 3 + abs(i) + min(i, 1) + max(i, 2) + clamp(i, 0, 4) + sign(i)
    let u = sin(x) + cos(x) + tan(x) + asin(a) + acos(a) + atan(x) + atan2(x, a) + sinh(x)
    let w = cosh(x) + tanh(x) + exp(x) + log(a) + log2(a) + sqrt(a) + floor(x) + ceil(x)
    let z = abs(x) + min(x, a) + max(x, a) + clamp(x, 0, 1) + sign(x) + x // a + x % a
    dx/dt = where(x < a and not (x >= 1 or x <= -1) and x != a and x == x and x > -a,
                  u + w + z + float(q) + float(int(x)) + x ^ 2 + x ^ a + x ^ float(i) - x / a,
                  -(x * a)) + v[i] + x * a
    solve rk4(dt = 0.1, steps = 1)
}
"""


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=list(DIALECTS))
def test_every_op_has_a_spelling_or_a_rule(dialect):
    tables = (dialect.binary, dialect.unary, dialect.float_ops, dialect.int_ops)
    for op in Op:
        spelled = any(op in t for t in tables) or op in RULES
        assert spelled or op in dialect.forbidden, op


def test_float64_is_the_float32_table_with_a_few_overrides():
    differ = {f.name for f in dataclasses.fields(Dialect)
              if getattr(GLSL_FLOAT32, f.name) != getattr(GLSL_FLOAT64, f.name)}
    assert differ == {"dtype", "F", "suffix", "float_ops", "forbidden"}
    changed = {op for op in Op if GLSL_FLOAT32.float_ops.get(op) != GLSL_FLOAT64.float_ops.get(op)}
    # vg_ceil; pow only through powi and sqrt; exp, log and log2 are the double helpers
    assert changed == {Op.CEIL, Op.POW, Op.EXP, Op.LOG, Op.LOG2}
    assert GLSL_FLOAT64.type("float") == "double" and GLSL_FLOAT32.type("float") == "float"


def test_every_helper_a_table_names_is_in_the_helpers_template():
    text = (templates_dir() / "helpers.glsl.j2").read_text()
    from vgpu_compiler.codegen.build import helpers as built
    # the prologue's by name, the built ones through k.built (in helpers.ORDER)
    emitted = set(re.findall(r'"(vg_\w+)" in helpers', text)) | set(built.ORDER)
    d = GLSL_FLOAT32
    named = set(d.helper_deps) | {x for deps in d.helper_deps.values() for x in deps}
    for table in (d.float_ops, d.int_ops, d.reduce_combine, GLSL_FLOAT64.float_ops):
        named |= {h for fmt in table.values() for h in d.helper_names(fmt)}
    named |= set(d.helper_names(d.powi + d.sqrt + d.nan + d.inf + d.fail))
    named.discard("vg_zero")            # a uniform, declared by the helpers template too
    assert named <= emitted, named - emitted
    assert set(d.loop_helpers) <= set(d.helper_deps)


def test_the_kernel_description_holds_ir_and_neutral_types():
    for src in (LORENZ, HEAT, KURAMOTO, HISTOGRAM, MATMUL):
        for dtype in ("float32", "float64"):
            k = describe(field(src), dtype=dtype)
            assert {b.type for b in k.buffers} <= {"float", "int", "uint"}
            assert {u.type for u in k.uniforms} <= {"float", "int"}
            blocks = [st.block for st in k.stages] + [k.collapse, k.flux]
            statements = list(k.init) + [s for b in blocks if b for s in b.body]
            assert all(isinstance(s, (Let, Deposit)) for s in statements)
            assert all(isinstance(e, Expr) for s in statements for e in
                       (s.args if isinstance(s, Deposit) else (s.expr,)))
    a, b = describe(field(LORENZ), dtype="float32"), describe(field(LORENZ), dtype="float64")
    assert dataclasses.replace(a, dtype="float64") == b      # the dtype is a dialect matter


def _fake() -> Dialect:
    """A made-up language: every word differs from GLSL's."""
    def call(prefix, ops, n):
        return {op: f"{prefix}{op.name.lower()}(" + ", ".join(f"{{{i}}}" for i in range(n(op)))
                + ")" for op in ops}
    arity = {Op.CLAMP: 3, Op.ATAN2: 2, Op.MIN: 2, Op.MAX: 2, Op.FLOORDIV: 2, Op.MOD: 2,
             Op.POW: 2}
    n = lambda op: arity.get(op, 1)          # noqa: E731
    int_ops = {op: f.replace("{1})", "{1}, {e}#)") if op in (Op.FLOORDIV, Op.MOD) else f
               for op, f in call("I_", GLSL_FLOAT32.int_ops, n).items()}
    return Dialect(
        "fake", "float32", "real32", "r", binary=call("B_", GLSL_FLOAT32.binary, lambda o: 2),
        unary=call("U_", GLSL_FLOAT32.unary, lambda o: 1),
        float_ops={op: f.replace("F_", "h_") for op, f in
                   call("F_", GLSL_FLOAT32.float_ops, n).items()},
        int_ops=int_ops, types={"int": "i32", "uint": "u32", "bool": "boolean"},
        select="pick({0}, {1}, {2})", cast="to_real32({0})", powi="h_powi({0}, {1})",
        sqrt="h_sqrt({0})", zero="h_zero", nan="h_nan", inf="h_inf", true="T", false="F",
        uint_literal="{0}#", index3="at3({0}, {1}, {2})", fail="h_fail", helper_prefix="h_",
        helper_deps={}, loop_helpers={"h_powi": 64},
        reduce_combine={op: f"R_{op.name.lower()}({{0}}, {{1}})" for op in ReduceOp},
        declare="let {name}: {T} = {value};", buffer_read="read({buffer}, {index})")


# GLSL's words: its helpers (vg_*, but for the kernel's own temporaries vg_t...), types,
# literals, the ternary and the uint suffix of error ids
GLSL_WORDS = re.compile(r"\b(vg_(?!t\d+_|tc|tf)\w+|float|double|int|uint|bool|true|false|ivec3)\b"
                        r"|\?|\du\)|\.v\[")


def test_a_fake_dialect_prints_a_kernel_without_glsl_words():
    k = print_kernel(describe(field(EVERY_OP)), _fake())
    texts = [a.expr for a in k.init] + [a.expr for a in k.update]
    for st in k.stages:
        texts += list(st.block.temps) + [a.expr for a in st.block.body + st.combos]
    assert texts and not any(GLSL_WORDS.search(t) for t in texts), [
        t for t in texts if GLSL_WORDS.search(t)]
    body = " ".join(texts)
    for word in ("pick(", "h_sin(", "B_add(", "I_floordiv(", "h_powi(", "to_real32(", "#)",
                 "read(b_in_v, g_i)", "let vg_t0_0: real32 = "):
        assert word in body, word
    assert {"h_powi", "h_fail", "h_sin", "h_pow"} <= set(k.helpers)
    assert k.meta()["helper_loops"]["h_powi"]["trips"] == 64
    assert k.F == "real32" and {b.type for b in k.buffers} <= {"real32", "i32", "u32"}


def test_reductions_print_with_the_dialect():
    k = print_kernel(describe(field(KURAMOTO)), _fake())
    reds = [r for st in k.stages if st.block.coupled for r in st.block.coupled.reductions]
    assert reds and all(r.combine.startswith("R_") and " = R_" in r.step and " = R_" in r.fold
                        and r.neutral == "0.0r" for r in reds)


def test_the_glsl_dialect_is_the_default_and_prints_the_goldens():
    assert DIALECTS["float32"] is GLSL_FLOAT32 and DIALECTS["float64"] is GLSL_FLOAT64
    assert emit_glsl(field(LORENZ)).startswith("#version 430")


def test_templates_take_declarations_barriers_and_atomics_from_the_dialect():
    layout = "".join((templates_dir() / name).read_text()
                     for name in ("base.glsl.j2", "field.glsl.j2", "macros.glsl.j2"))
    for word in ("barrier();", "uniform {{", "shared {{", "shared int", "atomicAdd(",
                 "atomicCompSwap("):
        assert word not in layout, word
    text = emit_glsl(field(KURAMOTO))
    assert text.count(GLSL_FLOAT32.barrier) >= 3 and "uniform int d_N;" in text
