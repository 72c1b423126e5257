"""Every mistake a user can make with an adaptive method or save_at: a VgpuError naming it."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import CallError, DeclarationError, MissingError, NameError_

SRC = """field decay {
    param k = 1.0
    state x
    dx/dt = -k * x
    solve SOLVE
}"""


def src(solve: str) -> str:
    return SRC.replace("SOLVE", solve)


@pytest.mark.parametrize("solve, cls, words", [
    ("dopri5(t1 = 1, dt = 0.1)", DeclarationError, "`dt` is not an argument"),
    ("tsit5(t1 = 1, steps = 10)", DeclarationError, "`steps` is not an argument"),
    ("bs3(t1 = 1, tol = 1e-3)", NameError_, "unknown argument `tol`"),
    ("dopri5(t1 = 1, t1 = 2)", DeclarationError, "`t1` is given twice"),
    ("rk5(t1 = 1)", NameError_, "dopri5"),
])
def test_solve_statement_errors(solve, cls, words):
    with pytest.raises(cls, match=words) as info:
        vgpu.compile(src(solve))
    assert info.value.line == 5


def test_max_steps_must_be_an_int_in_the_program():
    with pytest.raises(vgpu.TypeError_):
        vgpu.compile(src("dopri5(t1 = 1, max_steps = 1.5)"))


@pytest.mark.parametrize("kwargs, cls, words", [
    (dict(dt=0.1), CallError, "dt was given.*adaptive method dopri5"),
    (dict(steps=10), CallError, "steps was given"),
    (dict(save_every=2), CallError, "save_every counts fixed steps"),
    (dict(rtol=0.0), CallError, "rtol must be positive"),
    (dict(atol=-1e-9), CallError, "atol must be positive"),
    (dict(dt0=0.0), CallError, "dt0 .* must be positive"),
    (dict(dtmax=-1.0), CallError, "dtmax must be positive"),
    (dict(max_steps=0), CallError, "max_steps must be an int >= 1"),
    (dict(t1=-1.0), CallError, "t1 = -1.0 is before t0"),
    (dict(t1=float("nan")), vgpu.ArgumentTypeError, "t1 must be finite"),
    (dict(rtol="tight"), vgpu.ArgumentTypeError, "rtol must be one number"),
    (dict(save_at=[0.0, 0.5, 0.2]), CallError, "save_at must be non-decreasing"),
    (dict(save_at=[0.0, 2.0]), CallError, "save_at holds 2.0, outside"),
    (dict(save_at=[[0.0]]), vgpu.ArgumentTypeError, "save_at must be a 1-D array"),
])
def test_call_errors(kwargs, cls, words):
    with pytest.raises(cls, match=words):
        vgpu.solve(src("dopri5(t1 = 1)"), np.ones(2), backend="numpy", **kwargs)


def test_t1_missing_everywhere():
    with pytest.raises(MissingError, match="t1 was not given"):
        vgpu.solve(src("dopri5(rtol = 1e-6)"), np.ones(2), backend="numpy")
    sol = vgpu.solve(src("dopri5(rtol = 1e-6)"), np.ones(2), backend="numpy", t1=0.5,
                     dtype="float64")
    assert sol.t.tolist() == [0.5, 0.5]


def test_adaptive_arguments_to_a_fixed_step_method():
    with pytest.raises(CallError, match="rtol is an argument of the adaptive methods"):
        vgpu.solve(src("rk4(dt = 0.1, steps = 10)"), np.ones(2), backend="numpy", rtol=1e-6)
    with pytest.raises(CallError, match="not both"):
        vgpu.solve(src("rk4(dt = 0.1, steps = 10)"), np.ones(2), backend="numpy",
                   save_every=2, save_at=[0.0, 1.0])


def test_params_in_the_solve_statement_and_a_zero_length_run():
    prog = src("tsit5(t1 = k, rtol = k / 1000)")
    sol = vgpu.solve(prog, np.ones(1), params={"k": 2.0}, backend="numpy", dtype="float64")
    assert sol.t[0] == 2.0 and abs(sol.states[0] - np.exp(-4.0)) < 1e-4
    with pytest.raises(CallError, match="one value per trajectory"):
        vgpu.solve(prog, np.ones(2), params={"k": np.array([1.0, 2.0])}, backend="numpy")
    same = vgpu.solve(prog, np.ones(1), params={"k": 2.0}, backend="numpy", t1=0.0,
                      dtype="float64", save_at=[0.0])
    assert same.states[0] == 1.0 and same.steps_taken[0] == 0 and same.status[0] == 0
    assert same.history.shape == (1, 1)


def test_vgpuc_ir_shows_the_adaptive_arguments():
    from vgpu_compiler.ir.dump import dump
    text = dump(vgpu.compile(src("tsit5(t1 = 2, rtol = 1e-7)")).select(None))
    assert "method tsit5" in text and "t1 = 2.0" in text and "rtol = 1e-07" in text
    assert "    dt = " not in text and "embedded pair tsit5: q = 4" in text


def test_an_empty_ensemble_with_an_adaptive_method():
    sol = vgpu.solve(src("dopri5(t1 = 1)"), np.ones(0), save_at=[0.0, 1.0])
    assert sol.states.shape == (0,) and sol.status.shape == (0,) and sol.t.shape == (0,)
    assert sol.history.shape == (2, 0) and sol.steps_rejected.shape == (0,)
