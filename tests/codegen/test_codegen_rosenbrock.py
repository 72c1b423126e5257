"""codegen/build/rosenbrock.py: the Rosenbrock step's LU and stage solves, built once.

The IR printed as C gives the numpy reference's factorisation and solves
(backends/numpy/rosenbrock.py: lu_factor, lu_solve, block_solve) bit for bit, pivots
included, for plain fields and for fields joined with sensitivity columns; the loop
iterations the kernel reports to llvmpipe's limiter (PrintedRosenbrock.trips) are the
IR's own; the three targets spell the loops and the flag the same IR's way.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from vgpu_compiler.backends.cpu.dialect import C_FLOAT64
from vgpu_compiler.backends.numpy.rosenbrock import block_solve, lu_factor, lu_solve
from vgpu_compiler.backends.shader.dialect import GLSL_FLOAT32
from vgpu_compiler.backends.wgpu.dialect import WGSL
from vgpu_compiler.codegen import ir, lanes
from vgpu_compiler.codegen.build import rosenbrock as R
from vgpu_compiler.codegen.targets import printer
from vgpu_compiler.ir.ops import Op


def test_each_target_spells_the_loops_and_the_flag():
    lu = {d.language: printer(d).text(R.lu(3, 3)) for d in (GLSL_FLOAT32, WGSL)}
    lu["c"] = printer(C_FLOAT64).text(lanes.lane_arrays(R.lu(3, 3), (R.SING,)))
    assert "vg_sing = vg_sing || vg_best == 0.0;" in lu["glsl"]
    assert "vg_sing = vg_sing || vg_best == 0.0;" in lu["wgsl"]
    assert "vg_sing[l] |= vg_best == 0.0;" in lu["c"]
    assert "precise float vg_l = vg_W[vg_i * 3 + vg_c] / vg_W[vg_c * 3 + vg_c];" in lu["glsl"]
    assert "const double vg_l = vg_W[vg_i * 3 + vg_c] / vg_W[vg_c * 3 + vg_c];" in lu["c"]
    assert "for (var vg_i: i32 = vg_c + 1; vg_i < 3; vg_i++) {  // the first largest |a_ic|" \
        in lu["wgsl"]
    sv = {d.language: printer(d).text(R.solve(1, 6, 3, ("a", "b", "c", "d", "e", "f")))
          for d in (GLSL_FLOAT32, WGSL, C_FLOAT64)}
    assert "for (int vg_c = 2; vg_c >= 0; vg_c--) {" in sv["glsl"]
    assert "for (var vg_c: i32 = 2; vg_c >= 0; vg_c--) {" in sv["wgsl"]
    assert "for (int vg_b = 3; vg_b < 6; vg_b += 3) {" in sv["c"]
    assert "for (var vg_b: i32 = 3; vg_b < 6; vg_b += 3) {" in sv["wgsl"]
    assert "vg_x[vg_b + vg_i] = vg_x[vg_b + vg_i] - vg_W[(vg_b + vg_i) * 6 + vg_j] * vg_x[vg_j];" \
        in sv["glsl"]
    assert sv["glsl"].startswith("{  // K_1: W K = F")
    assert sv["c"].rstrip().endswith("f = vg_x[5];\n}")
    # the same IR: the skeletons (lines, nesting) are one
    shape = {k: [len(x) - len(x.lstrip()) for x in v.splitlines()] for k, v in sv.items()}
    assert shape["glsl"] == shape["wgsl"] == shape["c"]


def _trips(stmts, env=None) -> int:
    """Loop iterations the statements run (their bounds are the loop variables')."""
    env = dict(env or {})

    def val(e):
        if isinstance(e, ir.Lit):
            return e.value
        if isinstance(e, ir.Var):
            return env[e.name]
        ops = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b,
               Op.MUL: lambda a, b: a * b}
        return ops[e.op](val(e.a), val(e.b))

    n = 0
    for s in stmts:
        if isinstance(s, ir.Loop):
            v, stop = val(s.start), val(s.stop)
            while (v < stop) if s.step > 0 else (v >= stop):
                n += 1 + _trips(s.body, {**env, s.var: v})
                v += s.step
        elif isinstance(s, ir.Block):
            n += _trips(s.body, env)
    return n


@pytest.mark.parametrize("n, m", [(1, 1), (2, 2), (3, 3), (7, 7), (6, 3), (8, 2), (4, 1)])
def test_the_trips_are_the_irs_iterations(n, m):
    """The factorisation's exactly; a solve's at most (each substitution's forward loop
    counted over m columns, where its last has nothing to do: one more a block)."""
    assert _trips(R.lu(n, m)) == R.lu_trips(m)
    assert _trips(R.solve(0, n, m, ["k"] * n)) == R.solve_trips(n, m) - n // m


C_PROGRAM = """
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
static double vg_fabs(double x) {{ return fabs(x); }}
int main(void) {{
    int cases;
    if (scanf("%d", &cases) != 1) return 1;
    for (int t = 0; t < cases; t++) {{
        double vg_W[{nn}], vg_in[{n}], vg_x[{n}];
        int vg_piv[{n}], vg_sing[1] = {{0}};
        const int l = 0;
        for (int q = 0; q < {nn}; q++) if (scanf("%lf", &vg_W[q]) != 1) return 1;
        for (int q = 0; q < {n}; q++) if (scanf("%lf", &vg_in[q]) != 1) return 1;
{decl}
{lu}
{solve}
        printf("%d", vg_sing[0]);
        for (int q = 0; q < {m}; q++) printf(" %d", vg_piv[q]);
        for (int q = 0; q < {nn}; q++) printf(" %a", vg_W[q]);
{out}
        printf("\\n");
    }}
    return 0;
}}
"""


@pytest.mark.parametrize("n, m", [(1, 1), (3, 3), (5, 5), (6, 3), (6, 2)])
def test_the_printed_c_is_the_references_lu_and_solve(n, m, cpu, tmp_path):
    """float64 bit for bit: the factorisation (multipliers, U, pivots; ties take the first
    row), the zero-pivot flag, and the solve (block_solve with sensitivity columns)."""
    from vgpu_compiler.backends.cpu import toolchain
    p = printer(C_FLOAT64, {"rhs": "\n".join(f"vg_x[{j}] = vg_in[{j}];" for j in range(n))})
    ks = [f"vg_k{j}" for j in range(n)]
    ind = lambda s: "\n".join(" " * 8 + x for x in s.splitlines())      # noqa: E731
    src = tmp_path / "lu.c"
    src.write_text(C_PROGRAM.format(
        n=n, m=m, nn=n * n, decl=ind("\n".join(f"double {k};" for k in ks)),
        lu=ind(p.text(lanes.lane_arrays(R.lu(n, m), (R.SING,)))),
        solve=ind(p.text(R.solve(0, n, m, ks))),
        out=ind("\n".join(f'printf(" %a", {k});' for k in ks))))
    exe = tmp_path / "lu"
    build = subprocess.run([toolchain.compiler(), "-O2", "-ffp-contract=off", "-Wall",
                            "-Werror", "-o", str(exe), str(src), "-lm"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    rng = np.random.default_rng(n * 10 + m)
    cases = []
    for c in range(40):
        w = np.zeros((n, n))
        a = rng.normal(size=(m, m)) * 10.0 ** rng.integers(-3, 4)
        if c % 5 == 0:
            a = np.round(a)                          # ties among |a_ic|
        if c == 1:
            a[:, 0] = 0.0                            # a zero pivot: singular
        for b in range(n // m):                      # block lower triangular (joined W)
            w[b * m:(b + 1) * m, b * m:(b + 1) * m] = a
            if b:
                w[b * m:(b + 1) * m, :m] = rng.normal(size=(m, m))
        cases.append((w, rng.normal(size=n)))
    text = f"{len(cases)}\n" + "\n".join(
        " ".join(repr(float(v)) for v in np.concatenate([w.ravel(), b])) for w, b in cases)
    run = subprocess.run([str(exe)], input=text, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == len(cases)
    for (w, b), line in zip(cases, lines):
        got = line.split()
        with np.errstate(invalid="ignore", divide="ignore"):     # (the singular case)
            lu, piv = lu_factor(w[:m, :m])
        assert int(got[0]) == int((np.diag(lu) == 0).any())
        assert [int(x) for x in got[1:1 + m]] == piv.tolist()
        gw = np.array([float.fromhex(x) for x in got[1 + m:1 + m + n * n]]).reshape(n, n)
        assert gw[:m, :m].tobytes() == lu.tobytes()
        if (np.diag(lu) == 0).any():
            continue                                 # (the kernel halves the step)
        want = lu_solve(lu, piv, b) if m == n else block_solve(w, lu, piv, b, m)
        x = np.array([float.fromhex(v) for v in got[1 + m + n * n:]])
        assert x.tobytes() == want.tobytes(), (x, want)


def test_the_setup_zeroes_w_and_scales_only_js_nonzero_entries():
    """GLSL's and WGSL's W setup: every entry zeroed each attempt (WGSL says why: naga
    does not zero a var declared in a loop again), the diagonal and J's nonzero entries
    scaled, the same skeleton in both."""
    args = (2, 2, ((1, 0),), 4.0, True, ("k0", "k1"), (("y_x", "s_x"),), True)
    text = {d.language: printer(d, {"jac": "vg_W[0] = 1.0;"}).text(R.setup(d, *args))
            for d in (GLSL_FLOAT32, WGSL)}
    g, w = text["glsl"], text["wgsl"]
    assert "precise float vg_W[4];" in g and "var vg_W: array<f32, 4>;" in w
    assert all(f"vg_W[{j}] = 0.0;\n" in g for j in range(4))
    assert w.count("= 0.0;  // (explicitly: a var in a loop need not start at 0 again)") == 4
    assert "vg_W[1] = vg_W[1] * vg_mdt" not in g        # J_01 = 0: left 0, not -0
    assert "vg_W[2] = vg_W[2] * vg_mdt;" in g
    assert "vg_W[3] = vg_W[3] * vg_mdt + 4.0;" in w
    assert "{  // J and dF/dt at the step's start\n    float tt = t_n;\n" \
           "    precise float y_x = s_x;\n    vg_W[0] = 1.0;\n}" in g
    assert "var vg_sing: bool = false;  // a zero pivot" in w
    shape = {k: [len(x) - len(x.lstrip()) for x in v.splitlines()] for k, v in text.items()}
    assert shape["glsl"] == shape["wgsl"]
