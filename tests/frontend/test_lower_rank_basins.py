"""A basin with fewer dims than the grid covers the grid's last dims.

``grid i < M, j < N`` with ``basin l < 8`` groups along ``j``: each row ``i``
is its own set of basins, and coupled reads use the basin's rank
(``v[l - 1]``). The reference backend is checked against numpy written by
hand (per row, per chunk of the row), the GLSL backend against the reference.
"""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from field_examples import zero_shift
from vgpu_compiler.backends.glsl import build
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import DeclarationError, NameError_, TypeError_
from vgpu_compiler.ir.nodes import Axis
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.backends.glsl.plan import limits

RNG = np.random.default_rng(19)


def ref(src, h0=None, **kw):
    return vgpu.solve(src, h0, backend="numpy", dtype="float64", **kw)


def both(src, h0=None, **kw):
    """The GLSL backend against the reference (float32); returns the reference."""
    want = vgpu.solve(src, h0, backend="numpy", dtype="float32", **kw)
    got = vgpu.solve(src, h0, backend="glsl", dtype="float32", **kw)
    np.testing.assert_allclose(got.states, want.states, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(got.steps_taken, want.steps_taken)
    for name in want.outputs:
        np.testing.assert_allclose(got.outputs[name], want.outputs[name], rtol=2e-5, atol=1e-4)
    return want


def rk4(f, h, dt, steps):
    """Classic RK4 by hand (the fields below do not read t)."""
    for _ in range(steps):
        k1 = f(h)
        k2 = f(h + dt / 2 * k1)
        k3 = f(h + dt / 2 * k2)
        k4 = f(h + dt * k3)
        h = h + dt * (k1 / 6 + k2 / 3 + k3 / 3 + k4 / 6)
    return h


def chunks(n: int, size: int) -> list[slice]:
    """The basins along one axis: whole ones, then a partial one."""
    return [slice(a, min(a + size, n)) for a in range(0, n, size)]


def neighbours(u, edge):
    """Left and right neighbours of a 1-D rod under an edge rule."""
    left, right = np.roll(u, 1), np.roll(u, -1)
    if edge == "clamp":
        left[0], right[-1] = u[0], u[-1]
    elif edge == "zero":
        left[0], right[-1] = 0.0, 0.0
    return left, right


# --- a 1-D stencil on every row of a 2-D grid ------------------------------------------
ROWS = """
field rows {
    grid i < M, j < N
    basin l < 8
    state u
    coupled v = u edge EDGE
    du/dt = (0.5 * (v[l - 1] - 2 * v + v[l + 1]) + 0.01 * sum(v) - 0.02 * mean(v)
             + 0.03 * max(v) - 0.04 * min(v) + 0.001 * float(i * 100 + j * 10 + l))
    solve rk4(dt = 0.05, steps = 30)
}
"""


def rows_by_hand(u0, edge):
    m, n = u0.shape
    pos = np.add.outer(np.arange(m) * 100.0, np.arange(n) * 10.0 + np.arange(n) % 8)

    def f(u):
        out = np.empty_like(u)
        for i in range(m):
            for rod in chunks(n, 8):
                w = u[i, rod]
                left, right = neighbours(w, edge)
                out[i, rod] = (0.5 * (left - 2 * w + right) + 0.01 * w.sum() - 0.02 * w.mean()
                               + 0.03 * w.max() - 0.04 * w.min() + 0.001 * pos[i, rod])
        return out
    return rk4(f, u0, 0.05, 30)


@pytest.mark.parametrize("edge", ["clamp", "wrap", "zero"])
@pytest.mark.parametrize("n", [16, 21, 5])          # whole basins, a partial one, one partial
def test_one_dim_basin_on_rows_matches_numpy_by_hand(edge, n):
    u0 = RNG.uniform(size=(3, n))
    got = ref(ROWS.replace("EDGE", edge), u0)
    assert got.states.shape == (3, n)
    np.testing.assert_allclose(got.states, rows_by_hand(u0, edge), atol=1e-12)


@pytest.mark.parametrize("edge", ["clamp", "wrap", "zero"])
def test_one_dim_basin_on_rows_glsl(glsl, edge):
    both(ROWS.replace("EDGE", edge), RNG.uniform(size=(5, 21)).astype(np.float32))


def test_the_old_full_rank_spelling_is_the_same_field():
    """`basin l < 8` on a 2-D grid is `basin i_in_basin < 1, l < 8` with `v[0, ...]`."""
    short = ROWS.replace("EDGE", "wrap")
    full = short.replace("basin l < 8", "basin i_in_basin < 1, l < 8") \
                .replace("v[l - 1]", "v[0, l - 1]").replace("v[l + 1]", "v[0, l + 1]")
    (a,), (b,) = compile_program(short).program.fields, compile_program(full).program.fields
    assert a.basin == (Axis("i_in_basin", 1), Axis("l", 8))
    assert a == b
    u0 = RNG.uniform(size=(4, 11))
    np.testing.assert_array_equal(ref(short, u0).states, ref(full, u0).states)


# --- collapse and flux per row ---------------------------------------------------------
ARRIVE = """
field arrive {
    grid i < M, j < N
    basin l < 4
    output H[M]
    state x
    dx/dt = 1
    collapse when x >= 10
    flux H[i] += x
    solve euler(dt = 1, steps = 50)
}
"""


def test_collapse_and_flux_per_row_closed_form():
    x0 = RNG.choice([0.0, 1.5, 3.0, 8.0, 9.5, 20.0], size=(3, 10))
    got = ref(ARRIVE, x0)
    own = np.maximum(1, np.ceil(10 - x0))                   # steps each lane needs
    expected = np.empty_like(x0)
    for i in range(3):
        for rod in chunks(10, 4):
            expected[i, rod] = own[i, rod].max()
    np.testing.assert_array_equal(got.steps_taken, expected)
    np.testing.assert_allclose(got.states, x0 + expected)
    np.testing.assert_allclose(got.outputs["H"], (x0 + expected).sum(axis=1))


def test_collapse_and_flux_per_row_glsl(glsl):
    x0 = RNG.choice([0.0, 1.5, 3.0, 8.0, 9.5, 20.0], size=(6, 13)).astype(np.float32)
    sol = both(ARRIVE, x0)
    assert len(np.unique(sol.steps_taken)) > 1           # basins stopped at different steps


# --- fewer dims on a 3-D grid ------------------------------------------------------------
PLANES = """
field planes {
    grid i < P, j < M, k < N
    basin a < 4, b < 8
    state u
    coupled v = u edge wrap, w = u * u edge zero
    du/dt = v[a - 1, b] - v[a, b + 2] + w[a + 1, b - 1] + max(v) - min(w) + float(a * 10 + b)
    solve rk4(dt = 0.01, steps = 10)
}
"""


def planes_by_hand(u0):
    p, m, n = u0.shape
    ab = np.add.outer(np.arange(m) % 4 * 10.0, np.arange(n) % 8)

    def f(u):
        out = np.empty_like(u)
        for i in range(p):
            for r in chunks(m, 4):
                for c in chunks(n, 8):
                    v = u[i, r, c]
                    w = v * v
                    out[i, r, c] = (np.roll(v, 1, axis=0) - np.roll(v, -2, axis=1)
                                    + zero_shift(w, 1, -1) + v.max() - w.min() + ab[r, c])
        return out
    return rk4(f, u0, 0.01, 10)


def test_two_dim_basin_on_a_three_dim_grid_matches_numpy_by_hand():
    u0 = RNG.uniform(size=(3, 6, 11))
    np.testing.assert_allclose(ref(PLANES, u0).states, planes_by_hand(u0), atol=1e-12)


def test_two_dim_basin_on_a_three_dim_grid_glsl(glsl):
    both(PLANES, RNG.uniform(size=(3, 6, 11)).astype(np.float32))


LINES = """
field lines {
    grid i < P, j < M, k < N
    basin l < 5
    state u
    coupled v = u edge clamp
    du/dt = v[l + 1] - v[l - 2] + mean(v) + float(i - j)
    solve euler(dt = 0.1, steps = 8)
}
"""


def test_one_dim_basin_on_a_three_dim_grid(glsl):
    u0 = RNG.uniform(size=(2, 3, 12))
    p, m, n = u0.shape
    u = u0.copy()
    for _ in range(8):
        du = np.empty_like(u)
        for i in range(p):
            for j in range(m):
                for rod in chunks(n, 5):
                    v = u[i, j, rod]
                    at = np.arange(len(v))
                    ahead, behind = v[np.minimum(at + 1, len(v) - 1)], v[np.maximum(at - 2, 0)]
                    du[i, j, rod] = ahead - behind + v.mean() + (i - j)
        u = u + 0.1 * du
    np.testing.assert_allclose(ref(LINES, u0).states, u, atol=1e-12)
    both(LINES, u0.astype(np.float32))


# --- the GLSL mapping ---------------------------------------------------------------------
def test_glsl_kernel_describes_the_full_rank_basin():
    """The runtime reads one basin extent per grid axis: leading axes have extent 1."""
    for src, basin, local in [(ROWS.replace("EDGE", "zero"), [1, 8], [8, 1, 1]),
                              (PLANES, [1, 4, 8], [8, 4, 1]), (LINES, [1, 1, 5], [5, 1, 1])]:
        _, kernel = build(compile_program(src).program.fields[0])
        meta = kernel.meta()
        assert meta["basin"] == basin and meta["local_size"] == local


@pytest.mark.parametrize("strategy", ["tree", "serial"])
def test_both_reduction_strategies(fresh_cache, monkeypatch, strategy):
    """The runner picks serial on llvmpipe; a GPU gets the tree: run both here."""
    monkeypatch.setenv("VGPU_REDUCTION", strategy)
    both(ROWS.replace("EDGE", "zero"), RNG.uniform(size=(4, 19)).astype(np.float32))
    both(PLANES, RNG.uniform(size=(2, 5, 9)).astype(np.float32))
    from vgpu_compiler.backends.glsl import runner as glsl_runner
    mark = {"tree": "tree reduction over", "serial": "serial reduction:"}[strategy]
    built = [k.source for k in glsl_runner.MEMORY.values()]
    assert len(built) == 2 and all(mark in source for source in built)


def test_rows_split_over_chunks_glsl(glsl):
    """Chunks are rows of basins along the first grid axis: here a few rows each."""
    src = ROWS.replace("EDGE", "wrap")
    u0 = RNG.uniform(size=(9, 21)).astype(np.float32)
    want = vgpu.solve(src, u0, backend="numpy", dtype="float32")
    before = COUNTERS.snapshot()["dispatches"]
    with limits(max_block=2 * 24 * 4, max_steps=7):      # two rows of 24 lanes of state
        got = vgpu.solve(src, u0, backend="glsl", dtype="float32")
    np.testing.assert_allclose(got.states, want.states, rtol=2e-5, atol=2e-5)
    assert COUNTERS.snapshot()["dispatches"] - before >= 5 * 5     # 5 chunks, 5 dispatches


# --- what is still an error -------------------------------------------------------------
def test_a_basin_with_more_dims_than_the_grid_is_an_error():
    src = ("field f {\n  grid i < N\n  basin a < 4, b < 4\n  state x\n  dx/dt = -x\n"
           "  solve euler(dt = 1, steps = 1)\n}")
    with pytest.raises(DeclarationError) as info:
        compile_program(src, "bad.field")
    assert (info.value.line, info.value.column) == (3, 3)
    assert "at most the grid's rank" in info.value.message


def test_coupled_reads_take_the_basins_rank():
    src = ("field f {\n  grid i < M, j < N\n  basin l < 8\n  state x\n  coupled v = x\n"
           "  dx/dt = v[0, l]\n  solve euler(dt = 1, steps = 1)\n}")
    with pytest.raises(TypeError_) as info:
        compile_program(src, "bad.field")
    assert (info.value.line, info.value.column) == (6, 11)
    assert "takes 1 index, not 2" in info.value.message


def test_the_leading_basin_axes_are_not_names_of_the_program():
    src = ("field f {\n  grid i < M, j < N\n  basin l < 8\n  state x\n"
           "  dx/dt = float(i_in_basin)\n  solve euler(dt = 1, steps = 1)\n}")
    with pytest.raises(NameError_) as info:
        compile_program(src, "bad.field")
    assert (info.value.line, info.value.column) == (5, 17)
    # a program's own `i_in_basin` keeps its meaning; the hidden axis takes another name
    src = src.replace("  state x", "  param i_in_basin = 2\n  state x")
    (field,) = compile_program(src).program.fields
    assert field.basin == (Axis("i_in_basin_", 1), Axis("l", 8))
    np.testing.assert_array_equal(ref(src, np.zeros((2, 3))).states, np.full((2, 3), 2.0))
