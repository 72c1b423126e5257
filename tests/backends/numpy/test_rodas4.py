"""rodas4 (ir/rosenbrock.py, ir/jacobian.py, backends/numpy/rosenbrock.py) on the reference.

The truth is scipy's ``solve_ivp(method="Radau", rtol=1e-12, atol=1e-14)`` in float64;
scipy's Radau and BDF at rodas4's own tolerance are the yardsticks for step counts.
The derived Jacobian is checked against central finite differences, the batched LU
against ``np.linalg.solve``.
"""
from __future__ import annotations

import re
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import vgpu
from vgpu_compiler.backends.numpy.rosenbrock import lu_factor, lu_solve
from vgpu_compiler.errors import DeclarationError, SourceError
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir import controller as C
from vgpu_compiler.ir.evaluate import INT, Context, evaluate
from vgpu_compiler.ir.jacobian import jacobian
from vgpu_compiler.ir.nodes import interning
from vgpu_compiler.ir.ops import SymKind
from vgpu_compiler.ir.rosenbrock import RODAS4
from vgpu_compiler.ir.step import step_program

from strategies import cases

scipy_ivp = pytest.importorskip("scipy.integrate")
solve_ivp = scipy_ivp.solve_ivp

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
ROBERTSON = (EXAMPLES / "robertson.field").read_text()
VDP = (EXAMPLES / "vanderpol_stiff.field").read_text()


def robertson_rhs(t, y, k1=0.04, k2=3e7, k3=1e4):
    return [-k1 * y[0] + k3 * y[1] * y[2], k1 * y[0] - k3 * y[1] * y[2] - k2 * y[1] ** 2,
            k2 * y[1] ** 2]


def vdp_rhs(t, y, mu=1000.0):
    return [y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]]


@pytest.fixture(scope="module")
def robertson_truth():
    return solve_ivp(robertson_rhs, (0, 1e5), [1, 0, 0], method="Radau", rtol=1e-12,
                     atol=1e-14, dense_output=True)


@pytest.fixture(scope="module")
def vdp_truth():
    return solve_ivp(vdp_rhs, (0, 2000), [2, 0], method="Radau", rtol=1e-12, atol=1e-14)


def solve(src, **kw):
    kw.setdefault("backend", "numpy")
    kw.setdefault("dtype", "float64")
    kw.setdefault("dims", {"N": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vgpu.solve(src, **kw)


# --- the method as data ---------------------------------------------------------------------
def _standard_form():
    """RODAS4 in HW's untransformed form (alpha_ij, gamma_ij, b_i), from the W form: Gamma^-1 =
    I / gamma - C, A = alpha Gamma^-1, m = b Gamma^-1 (HW II, VI.4 (4.7)-(4.9))."""
    s, g = 6, float(RODAS4.gamma)
    cm = np.zeros((s, s))
    a = np.zeros((s, s))
    for i in range(s):
        cm[i, :i] = [float(x) for x in RODAS4.cmat[i]]
        a[i, :i] = [float(x) for x in RODAS4.a[i]]
    gamma = np.linalg.inv(np.eye(s) / g - cm)
    alpha = a @ gamma
    b = np.array([float(x) for x in RODAS4.b]) @ gamma
    return alpha, gamma, b, g


def test_the_tableau_is_rodas_f_in_the_w_form():
    t = RODAS4
    assert t.name == "rodas4" and t.q == 3 and not t.fsal and t.gamma == Fraction(1, 4)
    assert len(t.a) == len(t.cmat) == len(t.c) == len(t.d) == 6
    assert t.a[5] == t.a[4] + (1,) and t.b == t.a[4] + (1, 1)        # stiffly accurate
    assert t.err == (0, 0, 0, 0, 0, 1)                                # e = dt * K_6
    assert t.a[1] == (Fraction("1.544"),) and t.cmat[1] == (Fraction("-5.6688"),)
    p = step_program(t)
    assert p.implicit is not None and p.implicit.reads_time_derivative and p.q == 3
    assert [st.c for st in p.stages] == list(t.c)


def test_the_standard_form_meets_the_order_conditions():
    """alpha_i = c_i, gamma_i = d_i, and the order-4 conditions of HW II, VI.4 Table 4.1
    (beta = alpha + gamma): the decimals of rodas.f to their printed digits."""
    alpha, gamma, b, g = _standard_form()
    np.testing.assert_allclose(alpha.sum(1), [float(c) for c in RODAS4.c], atol=1e-12)
    np.testing.assert_allclose(gamma.sum(1), [float(d) for d in RODAS4.d], atol=1e-12)
    beta = alpha + gamma - np.diag(np.diag(gamma))
    bp = beta.sum(1)                      # beta_i' (no diagonal)
    a = alpha.sum(1)
    conditions = [
        (b.sum(), 1),
        (b @ bp, 0.5 - g),
        (b @ a ** 2, 1 / 3),
        (b @ beta @ bp, 1 / 6 - g + g * g),
        (b @ a ** 3, 1 / 4),
        (b @ (a * (alpha @ bp)), 1 / 8 - g / 3),
        (b @ beta @ a ** 2, 1 / 12 - g / 3),
        (b @ beta @ beta @ bp, 1 / 24 - g / 2 + 1.5 * g * g - g ** 3),
    ]
    for got, want in conditions:
        assert abs(got - want) < 1e-12, (got, want)


def test_the_dense_output_is_rodas_f_contro():
    """y0 (1 - s) + s (y1 + (1 - s)(D2 + s D3)) as y0 + dt * sum_p s^p * (...)."""
    rng = np.random.default_rng(0)
    k = rng.normal(size=6)
    dt, y0 = 0.3, 0.7
    d2 = [10.12623508344586, -7.487995877610167, -34.80091861555747, -7.992771707568823,
          1.025137723295662, 0]
    d3 = [-0.6762803392801253, 6.087714651680015, 16.43084320892478, 24.76722511418386,
          -6.594389125716872, 0]
    b = np.array([float(x) for x in RODAS4.b])
    y1 = y0 + dt * b @ k
    D2, D3 = dt * np.dot(d2, k), dt * np.dot(d3, k)
    for s in (0.0, 0.25, 0.6, 1.0):
        want = y0 * (1 - s) + s * (y1 + (1 - s) * (D2 + s * D3))
        got = y0 + dt * sum(k[j] * sum(float(w) * s ** (p + 1)
                                       for p, w in enumerate(RODAS4.dense[j])) for j in range(6))
        assert got == pytest.approx(want, rel=1e-13, abs=1e-13)


SMOOTH = """
field smooth {
    state x = 1, y = 0
    dx/dt = y
    dy/dt = -sin(x) + 0.5 * cos(2 * t) * y
    solve rodas4(t1 = 2)
}
"""


def test_fixed_steps_converge_with_order_four_and_read_dF_dt():
    """Every step accepted (huge rtol, dt0 = dtmax = h): the error falls like h^4 on a
    nonlinear field that reads t (so dF/dt's terms count)."""
    truth = solve_ivp(lambda t, u: [u[1], -np.sin(u[0]) + 0.5 * np.cos(2 * t) * u[1]],
                      (0, 2), [1, 0], method="DOP853", rtol=1e-13, atol=1e-15).y[:, -1]
    errs = []
    for h in (1 / 8, 1 / 16, 1 / 32, 1 / 64):         # exact: the steps end at t1
        sol = solve(SMOOTH, rtol=1e9, atol=1e9, dt0=h, dtmax=h)
        assert sol.steps_taken[0] == round(2 / h) and sol.status[0] == 0
        errs.append(np.abs(sol.states[0] - truth).max())
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert orders.min() > 3.0 and orders[-1] > 3.8, (errs, orders)     # 3.2, 3.7, 3.87


# --- against scipy ---------------------------------------------------------------------------
@pytest.mark.parametrize("rtol", [1e-8, 1e-10])
def test_robertson_to_1e5_against_radau(rtol, robertson_truth):
    atol = rtol * 1e-4
    sol = solve(ROBERTSON, rtol=rtol, atol=atol)
    want = robertson_truth.y[:, -1]
    assert sol.status[0] == 0 and sol.t[0] == 1e5
    err = np.abs(sol.states[0] - want) / (atol + rtol * np.abs(want))
    assert err.max() < 5, err                # measured 0.02 (1e-8), 0.07 (1e-10)
    assert abs(sol.states[0].sum() - 1) < 10 * rtol        # mass is conserved
    radau = solve_ivp(robertson_rhs, (0, 1e5), [1, 0, 0], method="Radau", rtol=rtol, atol=atol)
    bdf = solve_ivp(robertson_rhs, (0, 1e5), [1, 0, 0], method="BDF", rtol=rtol, atol=atol)
    scipy_steps = max(len(radau.t), len(bdf.t)) - 1
    # measured: 547 (Radau 573, BDF 664) at 1e-8; 3722 (Radau 1776, BDF 1333) at 1e-10
    assert sol.steps_taken[0] < 4 * scipy_steps, (sol.steps_taken, scipy_steps)
    assert sol.steps_taken[0] > (min(len(radau.t), len(bdf.t)) - 1) / 4


@pytest.mark.parametrize("rtol", [1e-8, 1e-10])
def test_vanderpol_mu_1000_over_a_period_against_radau(rtol, vdp_truth):
    sol = solve(VDP, rtol=rtol, atol=rtol)
    want = vdp_truth.y[:, -1]
    assert sol.status[0] == 0
    err = np.abs(sol.states[0] - want) / (rtol + rtol * np.abs(want))
    assert err.max() < 10, err               # measured 2.0 (1e-8), 1.6 (1e-10)
    radau = solve_ivp(vdp_rhs, (0, 2000), [2, 0], method="Radau", rtol=rtol, atol=rtol)
    # measured: 1937 (Radau 1853) at 1e-8; 7355 (Radau 5789) at 1e-10
    assert len(radau.t) / 4 < sol.steps_taken[0] < 4 * len(radau.t)


def test_dopri5_needs_far_more_steps_on_robertson():
    """The same field with dopri5: stability, not accuracy, holds its step near 1e-3, so
    3,000 steps reach only t ~ 1 of 1e5 (status 2), where rodas4 needs ~ 200 in all."""
    explicit = ROBERTSON.replace("rodas4", "dopri5")
    capped = solve(explicit, rtol=1e-6, atol=1e-10, max_steps=3_000)
    assert capped.status[0] == C.MAX_STEPS and capped.t[0] < 100
    stiff = solve(ROBERTSON, rtol=1e-6, atol=1e-10)
    assert stiff.status[0] == 0 and stiff.steps_taken[0] < 400


def test_a_swept_ensemble_steps_per_trajectory():
    sol = solve(ROBERTSON, dims={"N": 5}, rtol=1e-7, atol=1e-11)
    assert (sol.status == 0).all() and len(set(sol.steps_taken.tolist())) > 1
    for i in (0, 4):
        k1 = 0.04 * 10.0 ** (2.0 * i / 4)
        ref = solve_ivp(lambda t, y: robertson_rhs(t, y, k1=k1), (0, 1e5), [1, 0, 0],
                        method="Radau", rtol=1e-11, atol=1e-14).y[:, -1]
        np.testing.assert_allclose(sol.states[i], ref, rtol=1e-5, atol=1e-10)


def test_save_at_values_come_from_the_continuous_extension(robertson_truth):
    times = np.concatenate([[0.0], np.logspace(-4, 5, 37)])
    rtol, atol = 1e-8, 1e-12
    plain = solve(ROBERTSON, rtol=rtol, atol=atol)
    saved = solve(ROBERTSON, rtol=rtol, atol=atol, save_at=times)
    # saving never changes the steps
    assert saved.steps_taken[0] == plain.steps_taken[0]
    np.testing.assert_array_equal(saved.states, plain.states)
    np.testing.assert_array_equal(saved.times, times)
    want = robertson_truth.sol(times).T
    got = saved.history[:, 0, :]
    np.testing.assert_array_equal(got[0], [1, 0, 0])
    np.testing.assert_array_equal(got[-1], plain.states[0])
    err = np.abs(got - want) / (atol + rtol * np.abs(want))
    assert err.max() < 50, err.max()       # the extension is of order 3: a few tolerances


def test_a_basin_shares_one_step_size():
    src = ROBERTSON.replace("grid i < N", "grid i < N\n    basin l < 4")
    sol = solve(src, dims={"N": 8}, rtol=1e-6, atol=1e-10)
    assert (sol.status == 0).all()
    steps = sol.steps_taken.reshape(2, 4)
    assert (steps == steps[:, :1]).all()
    alone = solve(ROBERTSON, dims={"N": 8}, rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(sol.states, alone.states, rtol=1e-4, atol=1e-9)


def test_float32_runs_and_underflow_is_status_3():
    sol = solve(ROBERTSON, dims={"N": 3}, dtype="float32")
    assert (sol.status == 0).all() and sol.states.dtype == np.float32
    np.testing.assert_allclose(sol.states[0], [0.017866, 7.27e-8, 0.98213], rtol=1e-3)
    # float32's step floor (1e-6 |t|) is above the jumps' time scale 1/mu at t ~ 800
    vdp = solve(VDP, dtype="float32", rtol=1e-3, atol=1e-3)
    assert vdp.status[0] == C.STEP_UNDERFLOW and 700 < vdp.t[0] < 900


BALL = """
field ball {
    param g = 9.81
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -g
    when y < 0 and v < 0 { v = -0.9 * v }
    solve %s(t1 = 2, rtol = 1e-9, atol = 1e-9)
}
"""


def test_events_locate_on_the_rodas4_extension():
    a = solve(BALL % "rodas4")
    b = solve(BALL % "dopri5")
    assert a.event_counts[0, 0] == b.event_counts[0, 0] >= 2
    np.testing.assert_allclose(a.states, b.states, rtol=1e-6, atol=1e-6)


# --- the Jacobian -----------------------------------------------------------------------------
class _Point(Context):
    """Random values for every symbol a derivative may read, one per lane."""

    def __init__(self, field, rng, lanes):
        self.v: dict = {}
        self.rng, self.lanes, self.field = rng, lanes, field
        self.arrays = {a.name: rng.uniform(-1, 1, tuple(3 if isinstance(d, str) else int(d)
                                                         for d in a.dims))
                       for a in field.inputs}

    def symbol(self, node):
        key = (node.kind, node.name)
        if key not in self.v:
            k, r, n = node.kind, self.rng, self.lanes
            if k in (SymKind.DIM,):
                self.v[key] = INT.type(3)
            elif k in (SymKind.GRID, SymKind.STEP, SymKind.BASIN):
                self.v[key] = r.integers(0, 3, n).astype(INT)
            elif k is SymKind.DT:
                self.v[key] = np.full(n, 0.05)
            else:                               # states, params, t, init
                self.v[key] = r.uniform(0.3, 1.3, n)
        return self.v[key]

    def array(self, name):
        return self.arrays[name]


def _value(e, ctx):
    with np.errstate(all="ignore"):
        return np.broadcast_to(np.asarray(evaluate(e, ctx, np.float64, mask=False), float),
                               (ctx.lanes,)).copy()


def _check_jacobian(field, jac, seed=0, lanes=48):
    """Every entry against a central difference, on lanes away from kinks."""
    rng = np.random.default_rng(seed)
    ctx = _Point(field, rng, lanes)
    names = list(jac.states)
    for nm in names:
        ctx.symbol(type("S", (), {"kind": SymKind.STATE, "name": nm})())
    ctx.symbol(type("S", (), {"kind": SymKind.TIME, "name": "t"})())
    wrt = [(SymKind.STATE, nm, j) for j, nm in enumerate(names)]
    if jac.time is not None:
        wrt.append((SymKind.TIME, "t", None))
    checked = 0
    for kind, nm, j in wrt:
        x = ctx.v[(kind, nm)]
        h = 1e-6 * (1 + np.abs(x))
        vals = {}
        for sgn in (1, 0, -1):
            ctx.v[(kind, nm)] = x + sgn * h
            vals[sgn] = [_value(f, ctx) for f in field.derivs]
        ctx.v[(kind, nm)] = x
        for i in range(len(names)):
            entry = jac.matrix[i][j] if j is not None else jac.time[i]
            d = _value(entry, ctx)
            fd = (vals[1][i] - vals[-1][i]) / (2 * h)
            fwd, bwd = (vals[1][i] - vals[0][i]) / h, (vals[0][i] - vals[-1][i]) / h
            smooth = np.abs(fwd - bwd) < 1e-3 * (1 + np.abs(fd))
            ok = np.isfinite(d) & np.isfinite(fd) & smooth & (np.abs(fd) < 1e8)
            scale = 1 + np.abs(fd) + np.abs(vals[0][i])
            bad = ok & (np.abs(d - fd) > 1e-5 * scale)
            assert not bad.any(), (field.name, i, nm, d[bad][:3], fd[bad][:3])
            checked += int(ok.sum())
    return checked


def _example_fields():
    out = []
    for path in sorted(EXAMPLES.glob("*.field")):
        field = compile_program(path.read_text(), path.name).select(None)
        if not field.coupled:                    # (rodas4 refuses coupled values)
            out.append(pytest.param(field, id=path.stem))
    return out


@pytest.mark.parametrize("field", _example_fields())
def test_the_jacobian_of_every_example_is_the_finite_difference(field):
    if field.jacobian is not None:
        jac = field.jacobian
    else:
        with interning():
            jac = jacobian(field.state_names, field.derivs)
    assert _check_jacobian(field, jac) > 0 or all(
        getattr(e, "value", None) == 0 for e in jac.roots())


_SOLVE = re.compile(r"solve \w+\([^)]*\)")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases(features=()))
def test_the_jacobian_of_generated_programs_is_the_finite_difference(case):
    src = _SOLVE.sub("solve rodas4(t1 = 1)", case.src)
    field = compile_program(src, "gen.field").select(None)
    assert field.jacobian is not None and field.jacobian.n == len(field.states)
    _check_jacobian(field, field.jacobian, seed=len(src))


def test_the_jacobian_is_sparse_simplified_and_shares_nodes():
    field = compile_program(ROBERTSON, "robertson.field").select(None)
    jac = field.jacobian
    assert jac.time is None                       # no derivative reads t
    assert (2, 0) not in jac.nonzero() and (2, 2) not in jac.nonzero()
    assert jac.matrix[2][0].value == 0 and len(jac.nonzero()) == 7
    # dF3/dy2 = k2 * (2 * y2) and dF2/dy2 reads the same node: one object
    d32 = jac.matrix[2][1]
    assert any(n is d32 for n in _nodes(jac.matrix[1][1]))
    # dF1/dy1 is -k1: the very node of F1's own -k1
    assert any(n is jac.matrix[0][0] for n in _nodes(field.derivs[0]))


def _nodes(e):
    from vgpu_compiler.ir.walk import walk
    return list(walk(e))


def test_vgpuc_ir_prints_the_jacobian(capsys):
    from vgpu_compiler.cli.main import main
    assert main(["ir", "--jacobian", str(EXAMPLES / "robertson.field")]) == 0
    out = capsys.readouterr().out
    assert "jacobian dF/dh (7 of 9 entries nonzero" in out
    assert "d(dy3/dt)/dy2 = " in out and "dF/dt: not needed" in out
    assert main(["ir", str(EXAMPLES / "robertson.field")]) == 0
    assert "jacobian dF/dh" not in capsys.readouterr().out
    assert main(["ir", "--jacobian", str(EXAMPLES / "lorenz.field")]) == 0
    assert "jacobian: none" in capsys.readouterr().out


# --- the LU ----------------------------------------------------------------------------------
def test_lu_against_numpy_on_well_conditioned_matrices():
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 32):
        a = rng.normal(size=(n, n, 5, 3)) + 3 * np.sqrt(n) * np.eye(n)[:, :, None, None]
        b = rng.normal(size=(n, 5, 3))
        lu, piv = lu_factor(a)
        x = lu_solve(lu, piv, b)
        want = np.linalg.solve(np.moveaxis(a, (0, 1), (-2, -1)),
                               np.moveaxis(b, 0, -1)[..., None])[..., 0]
        np.testing.assert_allclose(np.moveaxis(x, 0, -1), want, rtol=1e-10, atol=1e-12)


def test_lu_pivots_where_it_must():
    """A zero or tiny leading entry: without row swaps these fail or lose every digit."""
    cases_ = [np.array([[0.0, 1.0], [1.0, 0.0]]),
              np.array([[1e-20, 1.0], [1.0, 1.0]]),
              np.array([[0.0, 2.0, 1.0], [0.0, 1.0, 3.0], [4.0, 1.0, 1.0]]),
              np.eye(4)[[2, 0, 3, 1]] * [1.0, 2.0, 3.0, 4.0]]
    rng = np.random.default_rng(2)
    for a in cases_:
        n = a.shape[0]
        b = rng.normal(size=n)
        lu, piv = lu_factor(a[:, :, None])
        x = lu_solve(lu, piv, b[:, None])[:, 0]
        np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-12, atol=1e-14)
        assert (piv[:, 0] != np.arange(n)).any()
    # random permutations of well-conditioned matrices, batched: each system its own pivots
    n, batch = 6, 40
    base = rng.normal(size=(batch, n, n)) + 4 * np.eye(n)
    perms = np.array([rng.permutation(n) for _ in range(batch)])
    a = np.stack([base[k][perms[k]] for k in range(batch)])
    b = rng.normal(size=(batch, n))
    lu, piv = lu_factor(np.moveaxis(a, 0, -1))
    x = lu_solve(lu, piv, b.T).T
    np.testing.assert_allclose(x, np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-10)


def test_lu_pivoting_rule_and_factors():
    """The pivot is the first row of largest |a_ik|; P A = L U."""
    a = np.array([[1.0, 2.0, 0.0], [-3.0, 1.0, 1.0], [3.0, 0.0, 2.0]])
    lu, piv = lu_factor(a[:, :, None])
    assert piv[0, 0] == 1                   # |-3| ties |3|: the first of them
    lu = lu[:, :, 0]
    low, up = np.tril(lu, -1) + np.eye(3), np.triu(lu)
    pa = a.copy()
    for k, p in enumerate(piv[:, 0]):
        pa[[k, p]] = pa[[p, k]]
    np.testing.assert_allclose(low @ up, pa, atol=1e-15)
    assert np.abs(np.tril(lu, -1)).max() <= 1        # partial pivoting: |l_ik| <= 1


# --- what rodas4 refuses ----------------------------------------------------------------------
def _error(src):
    with pytest.raises(SourceError) as e:
        compile_program(src, "f.field")
    return e.value


def test_more_than_32_states_is_a_source_error():
    names = [f"x{k}" for k in range(33)]
    src = ("field big {\n    state " + ", ".join(names) + "\n"
           + "".join(f"    d{n}/dt = -{n}\n" for n in names)
           + "    solve rodas4(t1 = 1)\n}\n")
    err = _error(src)
    assert isinstance(err, DeclarationError) and "at most 32 states" in err.message
    assert (err.line, err.column) == (2, 11 + sum(len(n) + 2 for n in names[:32]))
    assert "^" in str(err) and "x32" in err.message
    ok = src.replace(", x32", "").replace("    dx32/dt = -x32\n", "")
    assert compile_program(ok, "f.field").select(None).jacobian.n == 32


def test_noise_is_a_source_error():
    src = ("field ou {\n    noise xi\n    state x\n    dx/dt = -x + 0.3 * xi\n"
           "    solve rodas4(t1 = 1)\n}\n")
    err = _error(src)
    assert "noise" in err.message and "rodas4" in err.message
    assert (err.line, err.column) == (2, 11)
    assert str(err).split("\n")[1] == "        noise xi"


def test_coupled_names_are_a_source_error():
    src = ("field k {\n    basin l < 4\n    state x\n    coupled s = sin(x)\n"
           "    dx/dt = mean(s) - x\n    solve rodas4(t1 = 1)\n}\n")
    err = _error(src)
    assert "coupled" in err.message and "rodas4" in err.message
    assert (err.line, err.column) == (4, 13)
    assert "^" in str(err)


def test_an_unknown_method_lists_rodas4():
    err = _error("field f {\n    state x\n    dx/dt = -x\n    solve rodas5(t1 = 1)\n}\n")
    assert "rodas4" in err.message


# the compiled backends run rodas4 too: tests/conformance/test_rodas4_compiled.py


def test_auto_runs_rodas4_on_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = vgpu.solve(ROBERTSON, dims={"N": 2}, dtype="float64")
    assert (sol.status == 0).all()
    np.testing.assert_allclose(sol.states[0], [0.017866, 7.27e-8, 0.98213], rtol=1e-3)


def test_a_stiff_chain_of_32_states_against_radau():
    """The method's LU at its largest size: a heat chain (eigenvalues down to -4 D), with
    a nonlinear sink so that J changes along the way."""
    n, diff = 32, 1e4
    names = [f"u{k}" for k in range(n)]
    eqs = []
    for k, u in enumerate(names):
        left = names[k - 1] if k else "1.0"
        right = names[k + 1] if k < n - 1 else u
        eqs.append(f"    d{u}/dt = D * ({left} - 2 * {u} + {right}) - {u}^2\n")
    src = ("field chain {\n    param D = 1e4\n    state " + ", ".join(names) + "\n"
           + "".join(eqs) + "    solve rodas4(t1 = 1)\n}\n")

    def rhs(t, u):
        left = np.concatenate([[1.0], u[:-1]])
        right = np.concatenate([u[1:], u[-1:]])
        return diff * (left - 2 * u + right) - u ** 2

    h0 = np.zeros((1, n))
    truth = solve_ivp(rhs, (0, 1), h0[0], method="Radau", rtol=1e-12, atol=1e-14).y[:, -1]
    sol = solve(src, h0=h0, rtol=1e-7, atol=1e-9)
    assert sol.status[0] == 0 and sol.steps_taken[0] < 400
    np.testing.assert_allclose(sol.states[0], truth, rtol=1e-5, atol=1e-7)
    # at a loose tolerance the explicit method is held by stability (|lambda| ~ 4e4): it
    # needs ~12,000 steps (measured), 150 times rodas4's; capped here at 10 times
    loose = solve(src, h0=h0, rtol=1e-5, atol=1e-7)
    assert loose.status[0] == 0 and loose.steps_taken[0] < 120          # measured 76
    explicit = solve(src.replace("rodas4", "dopri5"), h0=h0, rtol=1e-5, atol=1e-7,
                     max_steps=10 * int(loose.steps_taken[0]))
    assert explicit.status[0] == C.MAX_STEPS and explicit.t[0] < 0.2
