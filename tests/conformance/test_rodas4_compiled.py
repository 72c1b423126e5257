"""rodas4 on the compiled backends (shader/rosenbrock.py and the adaptive templates),
against the numpy reference (backends/numpy/rosenbrock.py) and scipy's Radau.

The kernels print the reference's step in the reference's order of operations (the
Jacobian's entries, W = I / gamma - dt * J, the LU with its pivoting rule, the
substitutions by columns), so float64 runs take the same steps and end within a few
ulps; float32 runs follow the same controller with float32 rounding (different
roundings of the error norm move an accept or a reject now and then: step counts
within a few percent, states within float32's accuracy at the tolerance).
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import BackendError
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir import controller as C

from once import once

scipy_ivp = pytest.importorskip("scipy.integrate")
solve_ivp = scipy_ivp.solve_ivp

ROOT = Path(__file__).resolve().parents[2]
ROBERTSON = (ROOT / "examples" / "robertson.field").read_text()
VDP = (ROOT / "examples" / "vanderpol_stiff.field").read_text()
# the sweep of k1 as a per-trajectory param: GLSL has no float64 pow for the example's
# 10 ^ (...), so the float64 runs take k1 from the caller
SWEEP_LET = "let k1 = k1_base * 10.0 ^ (decades * float(i) / float(max(N - 1, 1)))"
ROBERTSON_K1 = ROBERTSON.replace(SWEEP_LET, "param k1 = 0.04")
assert ROBERTSON_K1 != ROBERTSON

COMPILED = ["glsl", "cpu", "wgpu"]     # every compiled backend runs rodas4
F64 = [b for b in COMPILED if b != "wgpu"]     # wgpu: float32 only


def solve(src, backend, **kw):
    kw.setdefault("dtype", "float64")
    kw.setdefault("dims", {"N": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vgpu.solve(src, backend=backend, **kw)


def both(src, backend, **kw):
    """The numpy reference (computed once for every backend that compares with it:
    tests/once.py) and the backend's run of the same call."""
    return once(solve, src, "numpy", **kw), solve(src, backend, **kw)


def same_run(ref, sol, rtol=1e-12, atol=1e-16):
    """float64: the same steps, states to a few ulps of the step's rounding (atol: far
    below the runs' own absolute tolerance, where a component's relative digits mean
    nothing)."""
    np.testing.assert_array_equal(sol.status, ref.status)
    np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(sol.t, ref.t)
    np.testing.assert_allclose(sol.states, ref.states, rtol=rtol, atol=atol)


def robertson_rhs(k1, k2=3e7, k3=1e4):
    def f(t, y):
        return [-k1 * y[0] + k3 * y[1] * y[2], k1 * y[0] - k3 * y[1] * y[2] - k2 * y[1] ** 2,
                k2 * y[1] ** 2]
    return f


K1 = 0.04 * 10.0 ** np.linspace(0, 4, 8)


@pytest.mark.parametrize("backend", F64)
def test_robertson_swept_float64_is_the_reference(backend):
    ref, sol = both(ROBERTSON_K1, backend, dims={"N": len(K1)}, params={"k1": K1},
                    rtol=1e-8, atol=1e-12)
    assert (ref.status == 0).all() and len(set(ref.steps_taken.tolist())) > 1
    same_run(ref, sol)
    # k2, k3 swept too (per trajectory)
    k2 = 3e7 * 10.0 ** np.linspace(-2, 1, 8)
    k3 = 1e4 * 10.0 ** np.linspace(1, -1, 8)
    ref, sol = both(ROBERTSON_K1, backend, dims={"N": 8},
                    params={"k1": K1[::-1].copy(), "k2": k2, "k3": k3})
    same_run(ref, sol)


@pytest.mark.parametrize("backend", F64)
def test_vanderpol_float64_is_the_reference(backend):
    mu = np.array([10.0, 100.0, 300.0, 1000.0])
    ref, sol = both(VDP, backend, dims={"N": 4}, params={"mu": mu})
    assert (ref.status == 0).all()
    same_run(ref, sol, rtol=1e-10)         # measured: 1.6e-12 (mu = 10, ~3000 steps)
    # mu = 1 is not stiff: 40,000 steps to t = 2000 on a limit cycle, where a last-bit
    # difference of the controller's root (vg_root vs numpy's power) grows with the
    # phase error (measured: 3e-16 at t = 1, 2e-13 at 10, 1e-9 at 100); to t = 10
    ref, sol = both(VDP, backend, dims={"N": 1}, params={"mu": np.array([1.0])}, t1=10.0)
    same_run(ref, sol, rtol=1e-11)


@pytest.mark.parametrize("backend", F64)
def test_robertson_float64_against_radau(backend):
    sol = solve(ROBERTSON_K1, backend, dims={"N": 3}, params={"k1": K1[[0, 3, 7]]},
                rtol=1e-10, atol=1e-14)
    assert (sol.status == 0).all()
    for lane, k1 in enumerate(K1[[0, 3, 7]]):
        truth = solve_ivp(robertson_rhs(k1), (0, 1e5), [1, 0, 0], method="Radau",
                          rtol=1e-12, atol=1e-16).y[:, -1]
        np.testing.assert_allclose(sol.states[lane], truth, rtol=1e-7, atol=1e-14)


@pytest.mark.parametrize("backend", F64)
def test_vanderpol_mu_1000_float64_against_radau(backend):
    sol = solve(VDP, backend, rtol=1e-9, atol=1e-9)
    truth = solve_ivp(lambda t, y: [y[1], 1000.0 * (1 - y[0] ** 2) * y[1] - y[0]],
                      (0, 2000), [2, 0], method="Radau", rtol=1e-12, atol=1e-14).y[:, -1]
    assert sol.status[0] == 0
    np.testing.assert_allclose(sol.states[0], truth, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("backend", F64)
def test_save_at_float64_is_the_reference(backend):
    times = np.concatenate([[0.0], np.logspace(-5, 5, 31)])
    ref, sol = both(ROBERTSON_K1, backend, dims={"N": 3}, params={"k1": K1[:3]},
                    rtol=1e-8, atol=1e-12, save_at=times)
    same_run(ref, sol)
    np.testing.assert_array_equal(sol.times, times)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-12, atol=1e-300)
    plain = solve(ROBERTSON_K1, backend, dims={"N": 3}, params={"k1": K1[:3]},
                  rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(plain.steps_taken, sol.steps_taken)   # saving is free


@pytest.mark.parametrize("backend", F64)
def test_a_basin_shares_one_step_float64(backend):
    src = ROBERTSON_K1.replace("grid i < N", "grid i < N\n    basin l < 4")
    ref, sol = both(src, backend, dims={"N": 8}, params={"k1": K1}, rtol=1e-6, atol=1e-10)
    steps = sol.steps_taken.reshape(2, 4)
    assert (steps == steps[:, :1]).all() and steps[0, 0] != steps[1, 0]
    same_run(ref, sol)


def chain(n: int) -> str:
    names = [f"u{k}" for k in range(n)]
    eqs = "".join(f"    d{u}/dt = D * ({names[k - 1] if k else '1.0'} - 2 * {u} + "
                  f"{names[k + 1] if k < n - 1 else u}) - {u}^2\n"
                  for k, u in enumerate(names))
    return ("field chain {\n    param D = 1e4\n    state " + ", ".join(names) + "\n" + eqs
            + "    solve rodas4(t1 = 1)\n}\n")


# the largest system (32 states) on cpu; on glsl 12: a software driver's compile time
# grows about as n^3 with the LU's dynamically indexed private arrays (llvmpipe, cold
# cache, float64: 15 s at 12 states, 23 s at 16, 190 s at 32)
@pytest.mark.parametrize("backend, n", [("cpu", 32), ("glsl", 12)])
def test_a_stiff_chain_float64(backend, n):
    ref, sol = both(chain(n), backend, dims={"N": 2}, params={"D": np.array([1e4, 1e3])},
                    h0=np.zeros((2, n)), rtol=1e-7, atol=1e-9)
    assert (ref.status == 0).all()
    same_run(ref, sol, rtol=1e-11)


def test_a_stiff_chain_float32_wgpu():
    ref, sol = both(chain(8), "wgpu", dims={"N": 2}, params={"D": np.array([1e4, 1e3])},
                    h0=np.zeros((2, 8)), **F32)
    assert (sol.status == 0).all()
    np.testing.assert_allclose(sol.steps_taken, ref.steps_taken, rtol=0.1)
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-3, atol=1e-6)


# float32 at a tolerance float32 can resolve (the example's rtol = 1e-6 is ~8 ulps: there
# every rounding moves an accept or a reject, and WGSL, which has no `precise`, lets the
# driver fuse multiply-adds: more rejected steps on wgpu, the same answer)
F32 = dict(dtype="float32", rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("backend", COMPILED)
def test_float32_follows_the_reference(backend):
    ref, sol = both(ROBERTSON, backend, dims={"N": 8}, **F32)
    assert sol.states.dtype == np.float32
    np.testing.assert_array_equal(sol.status, ref.status)
    assert (sol.status == 0).all()
    np.testing.assert_allclose(sol.steps_taken, ref.steps_taken, rtol=0.05)
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-3, atol=1e-8)   # the runs: rtol 1e-4
    # float32's step floor: Van der Pol mu = 1000 ends in status 3 near t ~ 800, as numpy
    ref, sol = both(VDP, backend, dtype="float32", rtol=1e-3, atol=1e-3)
    assert ref.status[0] == sol.status[0] == C.STEP_UNDERFLOW
    assert 700 < sol.t[0] < 900 and abs(sol.t[0] - ref.t[0]) < 1.0


@pytest.mark.parametrize("backend", COMPILED)
def test_float32_the_example_at_its_own_tolerance(backend):
    ref, sol = both(ROBERTSON, backend, dims={"N": 8}, dtype="float32")
    assert (sol.status == 0).all() and (ref.status == 0).all()
    np.testing.assert_allclose(sol.states[0], [0.017866, 7.27e-8, 0.98213], rtol=1e-3)
    np.testing.assert_allclose(sol.states, ref.states, rtol=2e-3, atol=1e-9)
    # glsl, cpu: the reference's order of operations, steps within a few percent
    # (measured 1-2 %); wgpu: fused multiply-adds, up to about twice the steps (measured
    # 186-506 against 182-251)
    slack = 2.5 if backend == "wgpu" else 1.05
    assert (sol.steps_taken <= slack * ref.steps_taken).all()


@pytest.mark.parametrize("backend", COMPILED)
def test_float32_save_at_and_basin(backend):
    times = np.logspace(-4, 5, 10)
    src = ROBERTSON.replace("grid i < N", "grid i < N\n    basin l < 4")
    ref, sol = both(src, backend, dims={"N": 8}, save_at=times, **F32)
    steps = sol.steps_taken.reshape(2, 4)
    assert (steps == steps[:, :1]).all() and (sol.status == 0).all()
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-3, atol=1e-8)


# a field that reads t: the stages' dt * d_s * dF/dt terms (Prothero-Robinson-like)
TIMED = """
field pr {
    param lam = 1e4
    state x = 1, y = 0
    dx/dt = -lam * (x - t * t) + 2 * t
    dy/dt = x - y * t
    solve rodas4(t1 = 3, rtol = 1e-8, atol = 1e-10)
}
"""
LAM = np.array([1.0, 1e3, 1e6])


@pytest.mark.parametrize("backend", F64)
def test_dF_dt_float64_is_the_reference(backend):
    ref, sol = both(TIMED, backend, dims={"N": 3}, params={"lam": LAM})
    assert (ref.status == 0).all()
    same_run(ref, sol)          # measured: 4e-16 (glsl), 9e-16 (cpu)


@pytest.mark.parametrize("backend", COMPILED)
def test_dF_dt_float32(backend):
    ref, sol = both(TIMED, backend, dims={"N": 3}, params={"lam": LAM}, **F32)
    assert (sol.status == 0).all()
    np.testing.assert_allclose(sol.steps_taken, ref.steps_taken, rtol=0.1)
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-3, atol=1e-7)


def test_wgpu_float64_is_refused():
    with pytest.raises(BackendError, match="no float64"):
        solve(VDP, "wgpu", dtype="float64")


def test_glsl_float64_without_a_double_function_is_refused():
    """GLSL has no float64 pow: the example's sweep is refused in float64, naming the
    fastest backend that has float64 (cpu where it is available, else numpy)."""
    from vgpu_compiler.backends import fastest
    from vgpu_compiler.backends.glsl import emit_glsl
    field = compile_program(ROBERTSON, "robertson.field").select(None)
    instead = fastest("float64", exclude=("glsl",))
    with pytest.raises(BackendError, match=f"double-precision.*backend='{instead}'"):
        emit_glsl(field, dtype="float64")
