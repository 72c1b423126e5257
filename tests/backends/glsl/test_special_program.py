"""Specialised programs (glsl special.py): a short one-dispatch run whose steps the solve
statement fixes runs the kernel's text with its int uniforms as constants. It must give
the generic program's answer bit for bit, report run-time errors as the generic one does,
and never be made for a call-time ``steps``."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from field_examples import MATMUL
from vgpu_compiler.backends.glsl import runner as glsl_runner
from vgpu_compiler.backends.glsl import special
from vgpu_compiler.backends.glsl.dialect import FLOAT32
from vgpu_compiler.errors import ProgramIndexError

RNG = np.random.default_rng(11)
DAMPED = """
field damped {
    param k = 1.0
    param g = 0.5
    state x, v = 0.25
    dx/dt = v
    dv/dt = -k * x - g * v
    solve rk4(dt = 0.01, steps = 20)
}
"""
OOB = """
field oob {
    input A[N]
    param at = 0
    grid i < N
    state s = 0
    ds/dt = A[int(at) + i]
    solve euler(dt = 1, steps = 2)
}
"""


def _specials():
    """Every specialised program of the kernels in memory."""
    return [s for k in glsl_runner.MEMORY.values() for s in k.specials.values()
            if s is not None]


def test_fix_ints_declares_the_uniforms_as_constants():
    src = "#version 430\nuniform int d_K;  // dim K\nuniform int d_KK;\nuniform float u_dt;\n"
    out = FLOAT32.fix_ints(src, {"d_K": 16})
    assert "\nconst int d_K = 16;  // dim K\n" in out and "uniform int d_KK;" in out
    assert FLOAT32.fix_ints(src, {"d_N": 3}) is None            # not declared
    assert FLOAT32.fix_ints(src, {"u_dt": 1}) is None           # not an int uniform
    assert FLOAT32.fix_ints(src + "uniform int d_K;\n", {"d_K": 1}) is None   # twice


def test_matmul_runs_a_specialised_program_bit_equal_to_the_reference(glsl):
    vgpu.clear_cache(disk=False)
    for _ in range(4):
        A = RNG.standard_normal((16, 16)).astype(np.float32)
        B = RNG.standard_normal((16, 16)).astype(np.float32)
        got = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="glsl")
        want = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="numpy")
        np.testing.assert_array_equal(got, want)
    assert len(_specials()) == 1


def test_specialised_and_generic_programs_agree_with_new_scalars(glsl, monkeypatch):
    """Float uniforms (dt, params) stay uniforms in a specialised program: new values each
    call reach it."""
    vgpu.clear_cache(disk=False)
    cases = [(RNG.normal(size=30).astype(np.float32),
              {"k": float(RNG.uniform(0.5, 2)), "g": float(RNG.uniform(0.1, 0.9))})
             for _ in range(4)]
    fast = [vgpu.run_field(DAMPED, h0, params=p, backend="glsl") for h0, p in cases]
    assert len(_specials()) == 1
    monkeypatch.setattr(glsl_runner, "_still", lambda fast, slots: False)   # generic only
    full = [vgpu.run_field(DAMPED, h0, params=p, backend="glsl") for h0, p in cases]
    for a, b in zip(fast[1:], full[1:]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(fast[1], fast[2])


def test_a_call_time_steps_gets_no_specialised_program(glsl):
    vgpu.clear_cache(disk=False)
    A = RNG.standard_normal((8, 8)).astype(np.float32)
    for steps in (3, 3, 5, 5, 8, 8):
        vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, steps=steps, backend="glsl")
    assert _specials() == []


def test_long_runs_keep_the_generic_program(glsl, monkeypatch):
    vgpu.clear_cache(disk=False)
    monkeypatch.setattr(special, "MAX_STEPS", 8)
    A = RNG.standard_normal((16, 16)).astype(np.float32)
    for _ in range(3):
        vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="glsl")
    assert _specials() == []


def test_a_specialised_program_reports_an_out_of_range_read(glsl):
    vgpu.clear_cache(disk=False)
    A = RNG.standard_normal(6).astype(np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(
            vgpu.run_field(OOB, inputs={"A": A}, params={"at": 0.0}, backend="glsl"), 2 * A)
    assert len(_specials()) == 1
    with pytest.raises(ProgramIndexError, match="A"):       # the same signature: fast path
        vgpu.run_field(OOB, inputs={"A": A}, params={"at": 2.0}, backend="glsl")
