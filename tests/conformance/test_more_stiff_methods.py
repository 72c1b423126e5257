"""rosenbrock23 and rodas5p (ir/rosenbrock.py): two more Rosenbrock methods as data.

Neither adds code to a backend: each is a ``RosenbrockTableau`` in the W form that rodas4
uses, read by the numpy reference (backends/numpy/rosenbrock.py) and printed by the
compiled backends (shader/rosenbrock.py, the adaptive templates). Checked here:
- the tableaux: their standard forms (alpha = a Gamma, Gamma = (I / gamma - C)^-1) have
  row sums c_i and d_i, as the order conditions need;
- rosenbrock23 against a hand loop of Shampine & Reichelt's ode23s formulas (the paper's
  W = I - h d J, k1..k3, its error estimate and the step rule of docs/language.md);
- each method's order, measured under step halving with fixed steps (dt0 = dtmax);
- the significant correct digits on Robertson and Van der Pol (mu = 1000) against
  scipy's Radau at rtol = 1e-12 (the Test Set for IVP Solvers' ROBER and VDPOL);
- save_at's dense outputs against a closed form, and their order;
- every compiled backend against numpy (float64 on cpu and glsl, float32 on wgpu too).
"""
from __future__ import annotations

import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import CallError, DeclarationError, SourceError
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.rosenbrock import RODAS4, RODAS5P, ROSENBROCK23, STIFF
from vgpu_compiler.ir.step import step_program

from once import once

scipy_ivp = pytest.importorskip("scipy.integrate")
solve_ivp = scipy_ivp.solve_ivp

ROOT = Path(__file__).resolve().parents[2]
ROBERTSON = (ROOT / "examples" / "robertson.field").read_text()
VDP = (ROOT / "examples" / "vanderpol_stiff.field").read_text()
SWEEP_LET = "let k1 = k1_base * 10.0 ^ (decades * float(i) / float(max(N - 1, 1)))"
ROBERTSON_K1 = ROBERTSON.replace(SWEEP_LET, "param k1 = 0.04")     # no float64 pow on glsl
assert ROBERTSON_K1 != ROBERTSON
NEW = ["rosenbrock23", "rodas5p"]


def method(src: str, name: str) -> str:
    assert "rodas4(" in src
    return src.replace("rodas4(", f"{name}(")


def solve(src, backend="numpy", **kw):
    kw.setdefault("dtype", "float64")
    kw.setdefault("dims", {"N": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vgpu.solve(src, backend=backend, **kw)


# --- the methods as data ---------------------------------------------------------------------
def _standard_form(t):
    s, g = len(t.c), float(t.gamma)
    cm, a = np.zeros((s, s)), np.zeros((s, s))
    for i in range(s):
        cm[i, :i] = [float(x) for x in t.cmat[i]]
        a[i, :i] = [float(x) for x in t.a[i]]
    gamma = np.linalg.inv(np.eye(s) / g - cm)
    return a @ gamma, gamma


@pytest.mark.parametrize("tab", [ROSENBROCK23, RODAS4, RODAS5P], ids=lambda t: t.name)
def test_the_standard_form_has_row_sums_c_and_d(tab):
    alpha, gamma = _standard_form(tab)
    np.testing.assert_allclose(alpha.sum(1), [float(c) for c in tab.c], atol=1e-13)
    np.testing.assert_allclose(gamma.sum(1), [float(d) for d in tab.d], atol=1e-13)
    np.testing.assert_allclose(np.diag(gamma), float(tab.gamma), rtol=1e-14)


def test_the_tableaux():
    assert list(STIFF) == ["rosenbrock23", "rodas4", "rodas5p"]
    r, p = ROSENBROCK23, RODAS5P
    assert (len(r.c), r.q, r.fsal) == (3, 2, False) and (len(p.c), p.q, p.fsal) == (8, 4, False)
    d = 1 / (2 + np.sqrt(2))
    assert float(r.gamma) == d and [float(x) for x in r.d] == [d, 0.0, -d]
    assert r.c == (0, Fraction(1, 2), 1)
    # stage 3 is at the new state: its a-row is the update's weights m
    assert r.a[2] == r.b[:2] and r.b[2] == 0
    # RODAS5P is stiffly accurate: stage 8 at the embedded solution, the error K_8
    assert p.b == p.a[7] + (1,) and p.a[7] == p.a[6] + (1,) and p.err == (0,) * 7 + (1,)
    assert p.c[5:] == (1, 1, 1) and float(p.gamma) == 0.21193756319429014
    assert len(step_program(p).dense) == 4 and len(step_program(r).dense) == 2
    # the dense outputs end at the step's end (s = 1: the update's weights)
    for t in (r, p):
        assert tuple(sum(row) for row in t.dense) == t.b


# --- rosenbrock23 is ode23s ------------------------------------------------------------------
FORCED = """
field forced {
    param lam = 50
    state x = 1, y = 0.5
    dx/dt = -lam * (x - cos(t)) - sin(t) + 0.1 * x * y
    dy/dt = x - y * y * t
    solve rosenbrock23(t1 = 3, rtol = 1e-5, atol = 1e-8, dt0 = 0.01)
}
"""


def _forced(t, u, lam=50.0):
    x, y = u
    return np.array([-lam * (x - np.cos(t)) - np.sin(t) + 0.1 * x * y, x - y * y * t])


def _forced_jac(t, u, lam=50.0):
    x, y = u
    return np.array([[-lam + 0.1 * y, 0.1 * x], [1.0, -2 * y * t]]), \
        np.array([-lam * np.sin(t) - np.cos(t), -y * y])


def ode23s(t1, y, h, rtol, atol, dtmax):
    """Shampine & Reichelt (1997), section 3.1, as written there, with the step rule of
    docs/language.md (q = 2): steps taken, rejected, and the final state."""
    d, e32 = 1 / (2 + np.sqrt(2)), 6 + np.sqrt(2)
    t, taken, rejected, grow = 0.0, 0, 0, True
    f0 = _forced(t, y)
    while t < t1:
        last = t + h >= t1 or t1 - (t + h) < 8 * np.spacing(t1)
        hh = t1 - t if last else h
        jac, dfdt = _forced_jac(t, y)
        w = np.eye(2) - hh * d * jac
        k1 = np.linalg.solve(w, f0 + hh * d * dfdt)
        f1 = _forced(t + 0.5 * hh, y + 0.5 * hh * k1)
        k2 = np.linalg.solve(w, f1 - k1) + k1
        ynew = y + hh * k2
        f2 = _forced(t + hh, ynew)
        k3 = np.linalg.solve(w, f2 - e32 * (k2 - f1) - 2 * (k1 - f0) + hh * d * dfdt)
        e = hh / 6 * (k1 - 2 * k2 + k3)
        err = np.sqrt(np.mean((e / (atol + rtol * np.maximum(abs(y), abs(ynew)))) ** 2))
        factor = min(5.0, max(0.2, 0.9 * err ** (-1 / 3)))
        if err <= 1:
            t, y, f0, taken = (t1 if last else t + hh), ynew, f2, taken + 1
            h = min(hh * factor if grow else min(hh, hh * factor), dtmax)
            grow = True
        else:
            rejected += 1
            h, grow = hh * min(1.0, factor), False
    return taken, rejected, y


def test_rosenbrock23_is_shampine_reichelts_ode23s():
    """The W form (converted exactly from the paper's, ir/rosenbrock.py) takes the paper's
    steps: the same accepted and rejected counts, the state to rounding. The field reads
    t, so the k1 and k3 terms h d T count."""
    sol = solve(FORCED)
    taken, rejected, y = ode23s(3.0, np.array([1.0, 0.5]), 0.01, 1e-5, 1e-8, 3.0)
    assert sol.status[0] == 0 and rejected > 0
    assert (sol.steps_taken[0], sol.steps_rejected[0]) == (taken, rejected)
    np.testing.assert_allclose(sol.states[0], y, rtol=1e-12)


# --- orders ----------------------------------------------------------------------------------
SMOOTH = """
field smooth {
    state x = 1, y = 0
    dx/dt = y
    dy/dt = -sin(x) + 0.5 * cos(2 * t) * y
    solve rodas4(t1 = 2)
}
"""


@pytest.mark.parametrize("name, order", [("rosenbrock23", 2), ("rodas5p", 5)])
def test_fixed_steps_converge_with_the_methods_order(name, order):
    """Every step accepted (huge rtol, dt0 = dtmax = h, steps ending at t1): the error
    falls like h^p on a nonlinear field that reads t."""
    truth = solve_ivp(lambda t, u: [u[1], -np.sin(u[0]) + 0.5 * np.cos(2 * t) * u[1]],
                      (0, 2), [1, 0], method="DOP853", rtol=1e-13, atol=1e-15).y[:, -1]
    errs = []
    for h in (1 / 8, 1 / 16, 1 / 32, 1 / 64):
        sol = solve(method(SMOOTH, name), rtol=1e9, atol=1e9, dt0=h, dtmax=h)
        assert sol.steps_taken[0] == round(2 / h) and sol.status[0] == 0
        errs.append(np.abs(sol.states[0] - truth).max())
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    # measured: rosenbrock23 1.91, 1.96, 1.98; rodas5p 5.22, 5.11, 5.05
    assert abs(orders[-1] - order) < 0.15 and orders.min() > order - 0.2, (errs, orders)


ROTATION = """
field rot {
    param lam = 1
    state x = 0, y = 1
    dx/dt = y
    dy/dt = -x
    solve rodas4(t1 = 2)
}
"""


@pytest.mark.parametrize("name, order", [("rosenbrock23", 2), ("rodas5p", 4)])
def test_save_at_dense_output_has_its_order(name, order):
    """save_at inside fixed steps against sin/cos: the error of the dense output falls
    like h^order (rosenbrock23's second-order interpolant, RODAS5P's order-4 one)."""
    errs = []
    for h in (1 / 4, 1 / 8, 1 / 16, 1 / 32):
        times = np.arange(0.3, 2.0, 0.37)           # never a step's end
        sol = solve(method(ROTATION, name), rtol=1e9, atol=1e9, dt0=h, dtmax=h, save_at=times)
        want = np.stack([np.sin(times), np.cos(times)], axis=1)
        errs.append(np.abs(sol.history[:, 0, :] - want).max())
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    # measured: see the assertion's message
    assert orders.min() > order - 0.3, (errs, orders)


# --- against Radau: significant correct digits ------------------------------------------------
def robertson_rhs(t, y, k1=0.04, k2=3e7, k3=1e4):
    return [-k1 * y[0] + k3 * y[1] * y[2], k1 * y[0] - k3 * y[1] * y[2] - k2 * y[1] ** 2,
            k2 * y[1] ** 2]


def vdp_rhs(t, y, mu=1000.0):
    return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]


PROBLEMS = {
    "rober": (ROBERTSON, robertson_rhs, (0, 1e5), [1, 0, 0], 1e-4),
    "vdpol": (VDP, vdp_rhs, (0, 2000), [2, 0], 1.0),
}


@pytest.fixture(scope="module")
def truths():
    return {k: solve_ivp(rhs, span, y0, method="Radau", rtol=1e-12, atol=1e-14).y[:, -1]
            for k, (_, rhs, span, y0, _) in PROBLEMS.items()}


def digits(got, want):
    """Significant correct digits: -log10 of the largest relative error of a component."""
    return float(-np.log10(np.max(np.abs(got - want) / np.abs(want))))


# measured (numpy, float64; atol = rtol * 1e-4 on rober, rtol on vdpol):
#   rosenbrock23 rober 2.37 3.03 3.69, vdpol 1.42 2.01 2.89 at rtol 1e-3, 1e-4, 1e-5
#   rodas5p rober 6.42 8.20 10.07, vdpol 5.56 7.71 10.08 at rtol 1e-6, 1e-8, 1e-10
DIGITS = {
    ("rosenbrock23", "rober"): ((1e-3, 2.1), (1e-4, 2.7), (1e-5, 3.4)),
    ("rosenbrock23", "vdpol"): ((1e-3, 1.2), (1e-4, 1.7), (1e-5, 2.6)),
    ("rodas5p", "rober"): ((1e-6, 6.1), (1e-8, 7.9), (1e-10, 9.7)),
    ("rodas5p", "vdpol"): ((1e-6, 5.2), (1e-8, 7.4), (1e-10, 9.7)),
}


@pytest.mark.parametrize("name, problem", list(DIGITS))
def test_significant_digits_against_radau(name, problem, truths):
    src, rhs, span, y0, afactor = PROBLEMS[problem]
    got = []
    for rtol, least in DIGITS[name, problem]:
        sol = solve(method(src, name), rtol=rtol, atol=rtol * afactor)
        assert sol.status[0] == 0 and sol.t[0] == span[1]
        got.append(digits(sol.states[0], truths[problem]))
        assert got[-1] > least, (rtol, got)
    assert got == sorted(got)            # tighter tolerances, more digits


def test_rodas5p_takes_fewer_steps_than_rodas4_at_tight_tolerances():
    """What RODAS5P is for (Steinebach 2023): measured 762 against 3722 steps at 1e-10."""
    four = solve(ROBERTSON, rtol=1e-10, atol=1e-14)
    five = solve(method(ROBERTSON, "rodas5p"), rtol=1e-10, atol=1e-14)
    assert five.steps_taken[0] < four.steps_taken[0] / 2


def test_a_stiff_field_reading_t_follows_its_closed_form():
    """x' = -lam (x - sin t) + cos t from x = 0 is sin t for every lam: with lam = 1e6 a
    step far above 1/lam is exact only with the h d T terms (dF/dt = lam cos t - sin t)."""
    src = """
field pr {
    param lam = 1e6
    state x = 0
    dx/dt = -lam * (x - sin(t)) + cos(t)
    solve rodas4(t1 = 3, rtol = 1e-6, atol = 1e-9)
}
"""
    times = np.linspace(0.1, 3, 12)
    for name in NEW:
        sol = solve(method(src, name), save_at=times)
        assert sol.status[0] == 0 and sol.steps_taken[0] < 2000
        np.testing.assert_allclose(np.ravel(sol.states), [np.sin(3.0)], atol=1e-7)
    # rosenbrock23's error estimate holds its steps near (rtol)^(1/3) (measured 1946 steps,
    # the dense output within 2.3e-7); RODAS5P (as RODAS4) is exact enough at the step ends
    # to take 8 steps, and the error rule does not look inside a step: its dense output is
    # then 1e-3 off between them (rodas4: 1.5e-2)
    assert np.abs(np.ravel(sol.history) - np.sin(times)).max() < 1e-2
    sol = solve(method(src, "rosenbrock23"), save_at=times)
    np.testing.assert_allclose(np.ravel(sol.history), np.sin(times), atol=1e-6)


# --- every backend against the reference ------------------------------------------------------
COMPILED = ["glsl", "cpu", "wgpu"]
F64 = ["glsl", "cpu"]                  # wgpu: float32 only
K1 = 0.04 * 10.0 ** np.linspace(0, 4, 4)


def same_run(ref, sol, rtol=1e-12, atol=1e-16):
    np.testing.assert_array_equal(sol.status, ref.status)
    np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(sol.steps_rejected, ref.steps_rejected)
    np.testing.assert_allclose(sol.states, ref.states, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("backend", F64)
def test_float64_is_the_reference(backend, name):
    times = np.concatenate([[0.0], np.logspace(-4, 5, 10)])
    kw = dict(dims={"N": 4}, params={"k1": K1}, rtol=1e-6, atol=1e-10, save_at=times)
    src = method(ROBERTSON_K1, name)
    ref, sol = once(solve, src, **kw), solve(src, backend, **kw)
    assert (ref.status == 0).all() and len(set(ref.steps_taken.tolist())) > 1
    same_run(ref, sol)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-11, atol=1e-16)
    # a field that reads t (dF/dt), a swept stiffness
    kw = dict(dims={"N": 3}, params={"lam": np.array([1.0, 1e3, 1e6])})
    src = method(TIMED, name)
    same_run(once(solve, src, **kw), solve(src, backend, **kw))


TIMED = """
field pr {
    param lam = 1e4
    state x = 1, y = 0
    dx/dt = -lam * (x - t * t) + 2 * t
    dy/dt = x - y * t
    solve rodas4(t1 = 3, rtol = 1e-8, atol = 1e-10)
}
"""


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("backend", COMPILED)
def test_float32_follows_the_reference(backend, name):
    # dt0: a first step far above Robertson's fast scale overflows float32 (status 3),
    # as for rodas4
    kw = dict(dims={"N": 4}, params={"k1": K1}, dtype="float32", rtol=1e-4, atol=1e-8,
              dt0=1e-5, save_at=np.logspace(-3, 5, 9))
    src = method(ROBERTSON_K1, name)
    ref, sol = once(solve, src, **kw), solve(src, backend, **kw)
    assert sol.states.dtype == np.float32 and (sol.status == 0).all() and (ref.status == 0).all()
    np.testing.assert_allclose(sol.steps_taken, ref.steps_taken, rtol=0.1)
    np.testing.assert_allclose(sol.states, ref.states, rtol=2e-3, atol=1e-8)
    np.testing.assert_allclose(sol.history, ref.history, rtol=2e-3, atol=1e-8)


# --- what rodas4 refuses, they refuse ----------------------------------------------------------
BALL = """
field ball {
    param g = 9.81
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -g
    when y < 0 and v < 0 { v = -0.9 * v }
    solve rodas4(t1 = 1, rtol = 1e-9, atol = 1e-9)
}
"""


@pytest.mark.parametrize("name", NEW)
def test_events_on_numpy_equal_the_closed_form(name):
    """(The compiled backends' stiff events against numpy and a closed form:
    tests/conformance/test_events_stiff.py.)"""
    sol = solve(method(BALL, name))
    t_hit = np.sqrt(2 / 9.81)                               # the bounce, then free fall
    tau = 1 - t_hit
    v = 0.9 * 9.81 * t_hit
    np.testing.assert_allclose(sol.states[0], [v * tau - 9.81 / 2 * tau ** 2, v - 9.81 * tau],
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", NEW)
def test_the_limits_of_rodas4(name):
    names = [f"x{k}" for k in range(33)]
    big = ("field big {\n    state " + ", ".join(names) + "\n"
           + "".join(f"    d{n}/dt = -{n}\n" for n in names) + f"    solve {name}(t1 = 1)\n}}\n")
    noisy = ("field ou {\n    noise xi\n    state x\n    dx/dt = -x + 0.3 * xi\n"
             f"    solve {name}(t1 = 1)\n}}\n")
    for src, words in ((big, "at most 32 states"), (noisy, "noise")):
        with pytest.raises(SourceError) as e:
            compile_program(src, "f.field")
        assert isinstance(e.value, DeclarationError)
        assert words in e.value.message and name in e.value.message
    with pytest.raises(CallError, match=f"stiff method {name}"):
        vgpu.Simulation(method(ROBERTSON, name), dims={"N": 1}, backend="numpy")
