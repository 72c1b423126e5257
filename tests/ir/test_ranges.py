"""ir/ranges.py: which index expressions are proven in range, and what the GLSL backend
does with the proofs (plain reads; a guarded copy of the step loop for step-indexed reads).

A proof must hold for every call: any shapes (dims may be 0), any steps= override.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import emit_glsl
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import ProgramIndexError
from vgpu_compiler.ir.nodes import Load
from vgpu_compiler.ir.ranges import STEPS, Ranges, Where, condition_text

ROOT = Path(__file__).resolve().parents[2]
MATMUL = (ROOT / "examples" / "matmul.field").read_text()
RNG = np.random.default_rng(7)


def _loads(e, out):
    if isinstance(e, Load):
        out.append(e)
    for c in getattr(e, "args", ()) + getattr(e, "index", ()):
        _loads(c, out)
    return out


def verdicts(body: str, decl: str = "input A[M], u[N], w[N]", grid: str = "i < N",
             where: Where = Where.STAGE, steps: str = "3"):
    """The verdicts on the one input read in ``dx/dt = <body>``."""
    src = (f"field f {{ {decl}\n grid {grid}\n state x = 0\n dx/dt = {body}\n"
           f" solve euler(dt = 1, steps = {steps}) }}")
    field = compile_program(src, "t.field").select(None)
    (load,) = set(_loads(field.derivs[0], []))
    return Ranges(field).load(load.array, load.index, where)


def proven(body, **kw) -> bool:
    return all(v.proven for v in verdicts(body, **kw))


# --- the analysis -------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "u[i]", "u[clamp(i + 1, 0, N - 1)]", "u[clamp(i - 1, 0, N - 1)]", "w[(i * 3 + step) % N]",
    "u[(N - 1) - i]", "u[min(i + 1, N - 1)]", "u[max(i - 1, 0)]", "u[i % N]", "u[i // 2]",
    "u[where(x > 0, i, 0)]", "u[abs(i)]", "u[clamp(int(x), 0, N - 1)]", "u[(i + 5) % N]",
    "u[min(i, 3) % N]", "u[0 * i]",
])
def test_proven(body):
    assert proven(body)


@pytest.mark.parametrize("body, why", [
    ("A[i]", "A's extent M is another dim than i's N"),
    ("u[i + 1]", "i + 1 = N on the last trajectory"),
    ("u[i - 1]", "negative on the first"),
    ("u[-1 + i * 0]", "negative offset"),
    ("u[0]", "N may be 0 ... but then there is no trajectory: see test_literal_zero"),
    ("A[clamp(i, 0, M - 1)]", "M may be 0: clamp(i, 0, -1) = -1"),
    ("A[i % M]", "M may be 0"),
    ("u[min(i + 2147483647, N - 1)]", "i + 2^31-1 wraps negative"),
    ("u[(i * 2) % N - 1]", "-1 when the mod is 0"),
    ("u[where(x > 0, i, N)]", "one branch is N"),
    ("u[step]", "steps is the call's"),
    ("u[abs(i - N)]", "N - i can be N"),
])
def test_not_proven(body, why):
    if body == "u[0]":      # a grid of extent N >= 1 runs: u[0] is in range
        assert proven(body)
        return
    assert not proven(body), why


def test_literal_extents():
    assert proven("A[i % 7]", decl="input A[7]")
    assert proven("A[i]", decl="input A[7]", grid="i < 7")
    assert not proven("A[i]", decl="input A[7]", grid="i < 8")
    assert proven("A[2, i]", decl="input A[3, N]")
    assert [v.proven for v in verdicts("A[3, i]", decl="input A[3, N]")] == [False, True]


def test_basin_index():
    src = """field f { input A[8], B[N]
        grid i < N
        basin l < 8
        coupled s = x
        state x = 0
        dx/dt = A[l] + B[i] + A[(l + 1) % 8] + s[l + 1]
        solve euler(dt = 1, steps = 2) }"""
    field = compile_program(src, "t.field").select(None)
    r = Ranges(field)
    for load in set(_loads(field.derivs[0], [])):
        assert all(v.proven for v in r.load(load.array, load.index, Where.STAGE)), load


def test_step_is_a_condition_on_the_calls_steps():
    (a,) = verdicts("A[step]")
    assert not a.proven and a.conditional
    assert a.condition.value({STEPS: 5, "M": 5, "N": 1}) <= 0       # steps <= M: in range
    assert a.condition.value({STEPS: 6, "M": 5, "N": 1}) > 0
    assert condition_text(a.condition, lambda s: "u_steps" if s == STEPS else f"d_{s}") == \
        "u_steps <= d_M"
    # step + 1 needs steps + 1 <= M; in the collapse vote step is 1 .. steps
    (b,) = verdicts("A[step + 1]")
    assert condition_text(b.condition, str) == f"{STEPS} <= M - 1"
    (c,) = verdicts("A[step]", where=Where.COLLAPSE)
    assert condition_text(c.condition, str) == f"{STEPS} <= M - 1"
    assert not verdicts("A[step - 1]")[0].conditional      # -1 at step 0
    assert proven("A[step]", where=Where.INIT, grid="i < M")
    assert not proven("A[step]", where=Where.INIT)       # M may be 0
    assert proven("A[step % M]", grid="i < M")
    assert not verdicts("A[step * 2]")[0].proven


def test_matmul_reads():
    field = compile_program(MATMUL, "matmul.field").select(None)
    r = Ranges(field)
    got = {}
    for load in set(_loads(field.derivs[0], [])):
        got[load.array] = r.load(load.array, load.index, Where.STAGE)
    assert [v.proven for v in got["A"]] == [True, False]      # i < M; step < K given steps
    assert [v.proven for v in got["B"]] == [False, True]
    assert got["A"][1].conditional and got["B"][0].conditional


def test_flux_index():
    src = """field h { output counts[32], H[N]
        grid i < N
        state x
        dx/dt = 0
        flux counts[clamp(int(x * 16), 0, 31)] += 1
        flux counts[int(x)] += 1
        flux H[i] += 1
        flux H[step] += 1
        solve euler(dt = 1, steps = 2) }"""
    field = compile_program(src, "t.field").select(None)
    r = Ranges(field)
    got = [r.check(fl.index, r.arrays[fl.output], Where.FLUX) for fl in field.flux]
    assert [v[0].proven for v in got] == [True, False, True, False]
    assert got[3][0].conditional        # step <= steps in flux: needs steps <= N - 1


# --- the GLSL printer ---------------------------------------------------------------------------
def test_matmul_glsl_has_plain_reads_under_the_guard():
    field = compile_program(MATMUL, "matmul.field").select(None)
    text = emit_glsl(field, source=MATMUL)
    assert "if (u_steps <= d_K) {" in text
    assert "b_in_A.v[g_i * d_K + nstep] * b_in_B.v[nstep * d_N + g_j]" in text
    assert "ld_A(g_i, nstep, 0u) * ld_B(nstep, g_j, 1u)" in text      # the checked copy


def test_unproven_reads_stay_checked():
    src = """field f { input u[N]
        grid i < N
        state x = 0
        dx/dt = u[i + 1] + u[i]
        solve euler(dt = 1, steps = 3) }"""
    text = emit_glsl(compile_program(src, "t").select(None), source=src)
    assert "ld_u((g_i + 1), 0u) + b_in_u.v[g_i]" in text
    assert "u_steps <=" not in text


# --- end to end: GLSL against numpy, and the errors ---------------------------------------------
def both(src, **kw):
    ref = vgpu.solve(src, backend="numpy", **kw)
    gpu = vgpu.solve(src, backend="glsl", **kw)
    np.testing.assert_allclose(gpu.states, ref.states, rtol=1e-5, atol=1e-5)
    return ref, gpu


def test_matmul_matches(glsl):
    A = RNG.normal(size=(5, 7)).astype(np.float32)
    B = RNG.normal(size=(7, 3)).astype(np.float32)
    ref, gpu = both(MATMUL, inputs={"A": A, "B": B})
    np.testing.assert_allclose(gpu.states, A @ B, rtol=1e-5, atol=1e-5)
    _, gpu = both(MATMUL, inputs={"A": A, "B": B}, steps=4)      # fewer steps: still fast path
    np.testing.assert_allclose(gpu.states, A[:, :4] @ B[:4], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "glsl"])
def test_matmul_with_more_steps_than_k_is_an_index_error(backend, glsl):
    A = np.ones((4, 6), np.float32)
    B = np.ones((6, 5), np.float32)
    with pytest.raises(ProgramIndexError) as e:
        vgpu.solve(MATMUL, inputs={"A": A, "B": B}, steps=7, backend=backend)
    assert e.value.line == 15
    assert "[" in str(e.value) and "6" in str(e.value)


@pytest.mark.parametrize("backend", ["numpy", "glsl"])
def test_matmul_empty_dims(backend, glsl):
    # K = 0: no steps, no reads; M = 0: no trajectories; K = 0 with steps=1: an error
    out = vgpu.solve(MATMUL, inputs={"A": np.ones((3, 0)), "B": np.ones((0, 2))},
                     backend=backend)
    np.testing.assert_array_equal(out.states, np.zeros((3, 2)))
    out = vgpu.solve(MATMUL, inputs={"A": np.ones((0, 4)), "B": np.ones((4, 2))},
                     backend=backend, steps=9)
    assert out.states.shape == (0, 2)
    with pytest.raises(ProgramIndexError):
        vgpu.solve(MATMUL, inputs={"A": np.ones((3, 0)), "B": np.ones((0, 2))},
                   backend=backend, steps=1)


STENCIL = """field stencil {
    input u[N], w[N], A[M]
    grid i < N
    state x = 0
    dx/dt = u[clamp(i + 1, 0, N - 1)] + w[(i * 3 + step) % N] + READ
    solve euler(dt = 1, steps = 4)
}"""


def test_stencil_matches(glsl):
    u = RNG.normal(size=11).astype(np.float32)
    w = RNG.normal(size=11).astype(np.float32)
    both(STENCIL.replace("READ", "A[i % M]"),
         inputs={"u": u, "w": w, "A": np.arange(3.0)})
    both(STENCIL.replace("READ", "A[step]"), inputs={"u": u, "w": w, "A": np.arange(6.0)})


@pytest.mark.parametrize("read, a, kw", [
    ("A[i + 1]", 11, {}),                  # i + 1 = 11 on the last trajectory
    ("A[i - 1]", 11, {}),
    ("A[i]", 5, {}),                       # A's extent is another dim
    ("A[step]", 3, {}),                    # steps = 4 > M = 3: the checked loop
    ("A[step]", 6, {"steps": 7}),          # the call's steps override
    ("A[clamp(i, 0, M - 1)]", 0, {}),      # M = 0
])
@pytest.mark.parametrize("backend", ["numpy", "glsl"])
def test_unproven_reads_raise_with_the_line(read, a, kw, backend, glsl):
    u = np.ones(11, np.float32)
    with pytest.raises(ProgramIndexError) as e:
        vgpu.solve(STENCIL.replace("READ", read), backend=backend,
                   inputs={"u": u, "w": u, "A": np.ones(a, np.float32)}, **kw)
    assert e.value.line == 5
    assert "A[" in str(e.value)
