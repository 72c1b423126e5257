"""GLSL lowering (backends/glsl): the kernel description and the printer, without a GPU."""
from __future__ import annotations

import importlib

import pytest

from vgpu_compiler.backends.glsl import emit_glsl, lower
from vgpu_compiler.backends.glsl.render import FLOAT32, FLOAT64, mangle
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import BackendError
from vgpu_compiler.ir.nodes import Apply, Const, Load, Sym
from vgpu_compiler.ir.ops import Op, SymKind, Type

from field_examples import COLLAPSE, HEAT, HISTOGRAM, KURAMOTO, LORENZ, MATMUL


def field(src):
    return compile_program(src).select(None)


def test_mangled_names_are_never_glsl_words():
    assert mangle("s", "main") == "s_main"
    assert "__" not in mangle("s", "a__b") and "__" not in mangle("s", "_x")
    assert mangle("s", "a__b") != mangle("s", "a_ub")
    assert mangle("s", "_x") != mangle("s", "x")


def test_literals():
    assert FLOAT32.float_literal(0.1) == "0.1"
    assert FLOAT32.float_literal(3) == "3.0"
    assert FLOAT64.float_literal(0.1) == "0.1lf"
    assert FLOAT32.float_literal(1e39) == "vg_inf()"       # beyond float32
    assert FLOAT32.float_literal(-2.5) == "(-2.5)"
    assert FLOAT32.literal(-2**31, Type.INT) == "(-2147483647 - 1)"


def test_tableau_comes_from_the_ir():
    text = emit_glsl(field(LORENZ))
    assert "0.16666667 * k0_x + 0.33333334 * k1_x" in text
    midpoint = emit_glsl(field(LORENZ.replace("rk4", "midpoint")))
    assert "k2_x" not in midpoint and "s_x + u_dt * (k1_x)" not in midpoint
    assert "s_x = s_x + u_dt * k1_x;" in midpoint            # a weight of 1: no multiply
    assert "y_x = s_x + (0.5 * u_dt) * k0_x;" in midpoint   # 2^m: scaled once per loop


def test_field_name_and_source_lines_in_comments():
    text = emit_glsl(field(LORENZ), source=LORENZ)
    assert "VGPU field `lorenz`" in text
    assert "// line 8: dy/dt = x * (rho - z) - y" in text


def test_shapes_are_uniforms():
    text = emit_glsl(field(MATMUL))
    for name in ("d_M", "d_K", "d_N", "u_grid0", "u_grid1", "u_dt", "u_steps", "u_t0"):
        assert f"uniform int {name};" in text or f"uniform float {name};" in text


def test_basin_is_the_workgroup():
    assert "layout(local_size_x = 256, local_size_y = 1" in emit_glsl(field(KURAMOTO))
    assert "layout(local_size_x = 8, local_size_y = 8" in emit_glsl(field(COLLAPSE))
    assert "layout(local_size_x = 64, local_size_y = 1" in emit_glsl(field(LORENZ))


def test_per_trajectory_params_are_buffers():
    text = emit_glsl(field(LORENZ), per_trajectory_params=("rho",))
    assert "uniform float p_rho;" not in text and "b_params.v[0 * u_count + lane]" in text


def test_barriers_are_never_skipped_by_idle_lanes():
    for src in (HEAT, KURAMOTO, COLLAPSE):
        text = emit_glsl(field(src))
        assert "return;" not in text.split("void main()")[1]
        assert "barrier();" in text


def test_flux_has_native_and_cas_paths():
    text = emit_glsl(field(HISTOGRAM))
    assert "#ifdef GL_NV_shader_atomic_float" in text
    assert "atomicCompSwap" in text and "atomicAdd(" in text


def test_float64_refuses_transcendentals_by_name():
    src = LORENZ.replace("sigma * (y - x)", "sigma * sin(y - x)")   # (exp, log: helpers)
    with pytest.raises(BackendError) as e:
        emit_glsl(field(src), dtype="float64")
    from vgpu_compiler.backends import fastest      # the fastest here with float64
    assert "`sin`" in str(e.value)
    assert f"backend='{fastest('float64', exclude=('glsl',))}' for float64" in str(e.value)
    with pytest.raises(BackendError, match=r"\^"):
        emit_glsl(field(LORENZ.replace("sigma * (y - x)", "sigma ^ y")), dtype="float64")
    text = emit_glsl(field(LORENZ.replace("sigma * (y - x)", "sqrt(abs(x)) * x^3")),
                     dtype="float64")
    assert "double s_x" in text and "vg_powi" in text


def test_hoisting_keeps_guarded_reads_in_their_branch():
    src = """
field g {
    input v[N]
    grid i < N
    state x
    dx/dt = where(i > 0, v[i - 1] * v[i - 1], x * x) + x * x + (i // 2) * 0
    solve euler(dt = 1, steps = 1)
}
"""
    text = emit_glsl(field(src))
    body = next(ln for ln in text.splitlines() if "k0_x = " in ln and "// line" in ln)
    assert "?" in body and "ld_v(" in body.split("?")[1]     # the read stays in its branch
    temps = [ln for ln in text.splitlines() if ln.strip().startswith("float vg_t0_")]
    assert temps and not any("ld_v" in t or "vg_ifloordiv" in t for t in temps)


def test_byte_stable_and_independent_of_object_identity():
    a = emit_glsl(field(KURAMOTO), source=KURAMOTO)
    b = emit_glsl(field(KURAMOTO), source=KURAMOTO)
    assert a == b


def test_kernel_description_meta_is_json():
    import json
    k = lower(field(HISTOGRAM), dtype="float64")
    meta = json.loads(json.dumps(k.meta()))
    assert meta["n_deposits"] == 1 and meta["deposit_outputs"] == ["counts"]
    assert [b["role"] for b in meta["buffers"]] == ["state", "err", "output", "deposits"]


def test_hand_built_ir_prints():
    from vgpu_compiler.backends.glsl.render import Context, Printer
    p = Printer(FLOAT32, param_prefix=lambda n: "p_" + n, loader=lambda a: "ld_" + a,
                coupled_at=lambda c: "ca_" + c, reduce_name=lambda r: "r")
    x = Sym(SymKind.STATE, "x", Type.FLOAT)
    e = Apply(Op.WHERE, (Apply(Op.GT, (x, Const(0.0, Type.FLOAT)), Type.BOOL),
                         Load("A", (Sym(SymKind.GRID, "i", Type.INT),)),
                         Apply(Op.POW, (x, Const(0.5, Type.FLOAT)), Type.FLOAT)), Type.FLOAT)
    assert p.expr(e, Context()) == "(y_x > 0.0) ? ld_A(g_i, 0u) : vg_pow(y_x, 0.5)"
    assert {"vg_pow", "vg_fail"} <= p.helpers
    assert p.errors == [("index", "A", None)]


# --- the kernel's metadata is data: the runtime never re-derives it from the text ------
POWI = """
field p {
    param a = 2.0
    state x = a^2, v
    dx/dt = x^3 - x^3 + v^2
    dv/dt = -a * x
    solve rk4(dt = 0.1, steps = 1)
}
"""


def _declared_uniforms(text: str) -> set[str]:
    return {ln.split()[2].rstrip(";") for ln in text.splitlines() if ln.startswith("uniform ")}


@pytest.mark.parametrize("src", [LORENZ, MATMUL, KURAMOTO, HISTOGRAM, HEAT, POWI])
def test_meta_names_every_uniform_the_kernel_declares(src):
    k = lower(field(src), per_trajectory_params=("rho",) if src is LORENZ else ())
    text = emit_glsl(field(src), per_trajectory_params=("rho",) if src is LORENZ else ())
    named = {u["name"] for u in k.meta()["uniforms"]}
    assert named == _declared_uniforms(text) - {"vg_zero"}     # vg_zero: never set
    f = field(src)
    roles = {(u["role"], u["of"]): u["name"] for u in k.meta()["uniforms"]}
    assert {n for r, n in roles if r == "dim"} == set(f.dims)
    assert {n for r, n in roles if r == "param"} == {
        p.name for p in f.params if not (src is LORENZ and p.name == "rho")}
    assert [roles["grid", str(i)] for i in range(len(f.grid))] == [
        f"u_grid{i}" for i in range(len(f.grid))]


def test_a_renamed_uniform_reaches_the_plan_through_meta():
    from vgpu_compiler.backends.glsl import plan
    import ast
    tree = ast.parse(open(plan.__file__).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "mangle" not in imported and "render" not in imported
    assert not any(isinstance(n, ast.Attribute) and n.attr == "source" for n in ast.walk(tree))
    meta = {"uniforms": [{"name": "UNI_7", "role": "param", "of": "sigma"}]}
    assert plan.uniforms_of(meta, "param") == {"sigma": "UNI_7"}


def test_helper_loops_are_counted_per_step_and_once():
    meta = lower(field(POWI)).meta()
    text = emit_glsl(field(POWI))
    calls = text.count("vg_powi(") - 1                      # less the definition
    loops = meta["helper_loops"]["vg_powi"]
    assert loops["trips"] == 32 and loops["once"] == 1          # x = a^2
    assert loops["per_step"] + loops["once"] == calls
    assert loops["per_step"] == 4 * 2       # rk4: x^3 (one temporary) and v^2 in each stage
    assert meta["loop_trips_per_step"] == 1 + 32 * loops["per_step"]
    assert meta["loop_trips_once"] == 32
    assert "helper_loops" in lower(field(LORENZ)).meta() and not lower(
        field(LORENZ)).meta()["helper_loops"]


def test_loop_cap_reads_meta_only():
    from vgpu_compiler.backends.shader.plan import LOOP_LIMIT, loop_cap
    meta = lower(field(POWI)).meta()          # (a dict: no text to count loops in)
    assert loop_cap(meta) == (LOOP_LIMIT - 1 - 32) // 257


# --- the step is data: lowering prints ir.step's program, it keeps no recurrence -------
def test_stages_and_update_are_printed_from_the_step_program(monkeypatch):
    from fractions import Fraction
    lowering = importlib.import_module("vgpu_compiler.backends.glsl.lower")
    from vgpu_compiler.ir.step import Combination, Stage, StepProgram
    f = field(LORENZ)
    made = StepProgram("made-up", (
        Stage(0, Fraction(0), Combination(())),
        Stage(1, Fraction(3, 4), Combination(((0, Fraction(3, 4)),)))),
        Combination(((0, Fraction(1, 4)), (1, Fraction(3, 4)))))
    monkeypatch.setattr(lowering, "step_program", lambda tableau: made)
    text = emit_glsl(f)
    assert "k2_x" not in text and "// stage 1, c = 3/4" in text
    assert "y_x = s_x + u_dt * (0.75 * k0_x);" in text
    assert "s_x = s_x + u_dt * (0.25 * k0_x + 0.75 * k1_x);" in text


def test_lowering_reads_no_tableau_entries():
    import ast
    lowering = importlib.import_module("vgpu_compiler.backends.glsl.lower")
    tree = ast.parse(open(lowering.__file__).read())
    reads = {n.value.attr + "." + n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)}
    assert not {"tableau.a", "tableau.b", "tableau.c", "tableau.stages"} & reads


def test_only_power_of_two_weights_are_folded_into_the_step_size():
    from fractions import Fraction as Fr
    from vgpu_compiler.backends.glsl import printing as lowering
    assert all(lowering._power_of_two(Fr(w)) for w in (1, 2, 8, Fr(1, 2), Fr(1, 1024)))
    assert not any(lowering._power_of_two(Fr(w)) for w in (3, Fr(3, 4), Fr(1, 3), Fr(-1, 2)))
    # (a weight such as 3/4 keeps its own rounding: see the made-up program above)


def test_a_byte_order_mark_stays_out_of_the_shader():
    """The lexer skips a leading BOM; the shader's line comments quote the same lines."""
    from vgpu_compiler.backends.glsl import emit_glsl
    src = "\ufefffield f { state x; dx/dt = -x\n solve euler(dt = 1, steps = 1) }\n"
    import vgpu
    text = emit_glsl(vgpu.compile(src).select(None), source=src)
    assert "\ufeff" not in text
    assert "// line 1: field f { state x; dx/dt = -x" in text
