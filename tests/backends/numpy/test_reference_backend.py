"""The numpy reference backend against closed forms and independent numpy code."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import vgpu
from field_examples import MATMUL, zero_shift


def run(src, h0=None, **kw):
    kw.setdefault("backend", "numpy")
    kw.setdefault("dtype", "float64")
    return vgpu.run_field(src, h0, **kw)


def solve(src, h0=None, **kw):
    kw.setdefault("backend", "numpy")
    kw.setdefault("dtype", "float64")
    return vgpu.solve(src, h0, **kw)


def rk4(f, h, dt, steps, t0=0.0):
    """Classic RK4, written out by hand (independent of the tableau data)."""
    t = t0
    for n in range(steps):
        t = t0 + n * dt
        k1 = f(t, h)
        k2 = f(t + dt / 2, h + dt / 2 * k1)
        k3 = f(t + dt / 2, h + dt / 2 * k2)
        k4 = f(t + dt, h + dt * k3)
        h = h + dt * (k1 / 6 + k2 / 3 + k3 / 3 + k4 / 6)
    return h


DECAY = """
field decay {
    param k
    state x
    dx/dt = -k * x
    solve rk4(dt = 0.01, steps = 100)
}
"""


def test_exponential_decay_per_trajectory_rate():
    k = np.linspace(0.1, 3.0, 37)
    x = run(DECAY, np.ones(37), params={"k": k})
    assert x.shape == (37,)
    z = -k * 0.01
    amplification = 1 + z + z ** 2 / 2 + z ** 3 / 6 + z ** 4 / 24    # RK4 on x' = -k x
    np.testing.assert_allclose(x, amplification ** 100, rtol=1e-12)
    np.testing.assert_allclose(x, np.exp(-k), rtol=1e-7)


def test_harmonic_oscillator_closed_form_and_energy():
    src = """field osc {
        state x, v
        dx/dt = v
        dv/dt = -x
        solve rk4(dt = 0.01, steps = 628)
    }"""
    phase = np.linspace(0, 2 * np.pi, 11)
    h0 = np.stack([np.cos(phase), -np.sin(phase)], axis=1)
    h = run(src, h0)
    assert h.shape == (11, 2)
    np.testing.assert_allclose(h[:, 0], np.cos(phase + 6.28), atol=1e-9)
    np.testing.assert_allclose(h[:, 1], -np.sin(phase + 6.28), atol=1e-9)
    np.testing.assert_allclose((h ** 2).sum(axis=1), 1.0, atol=1e-9)




def test_matmul_odd_shapes():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(5, 7)), rng.normal(size=(7, 3))
    C = run(MATMUL, inputs={"A": A, "B": B})
    assert C.shape == (5, 3)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


def test_matmul_float32_int_and_fortran_inputs():
    A = np.asfortranarray(np.arange(15).reshape(5, 3))
    B = np.arange(12.0)[::2].reshape(3, 2)           # a strided view
    C = run(MATMUL, inputs={"A": A, "B": B}, dtype="float32")
    assert C.dtype == np.float32
    np.testing.assert_array_equal(C, (A @ B).astype(np.float32))


KURAMOTO = """
field kuramoto {
    param K = 2.0
    input omega[N]
    grid i < N
    basin l < 64
    state theta
    coupled s = sin(theta), c = cos(theta)
    dtheta/dt = omega[i] + K * (mean(s) * cos(theta) - mean(c) * sin(theta))
    solve rk4(dt = 0.01, steps = 300)
}
"""


def test_kuramoto_basin_mean_with_a_partial_basin():
    rng = np.random.default_rng(2)
    n = 64 * 2 + 23
    theta0, omega = rng.uniform(-np.pi, np.pi, n), rng.normal(size=n)
    groups = [slice(0, 64), slice(64, 128), slice(128, n)]

    def f(t, th):
        out = np.empty_like(th)
        for g in groups:
            s, c = np.sin(th[g]).mean(), np.cos(th[g]).mean()
            out[g] = omega[g] + 2.0 * (s * np.cos(th[g]) - c * np.sin(th[g]))
        return out

    got = run(KURAMOTO, theta0, inputs={"omega": omega})
    np.testing.assert_allclose(got, rk4(f, theta0, 0.01, 300), atol=1e-10)


HEAT = """
field heat {
    grid i < N
    basin l < 16
    state u
    coupled v = u edge EDGE
    du/dt = 0.5 * (v[l - 1] - 2 * u + v[l + 1]) + 0.01 * sum(v)
    solve rk4(dt = 0.05, steps = 40)
}
"""


def _neighbours(u, edge):
    left, right = np.roll(u, 1), np.roll(u, -1)
    if edge == "clamp":
        left[0], right[-1] = u[0], u[-1]
    elif edge == "zero":
        left[0], right[-1] = 0.0, 0.0
    return left, right


@pytest.mark.parametrize("edge", ["clamp", "wrap", "zero"])
def test_heat_stencil_edge_rules_partial_basin(edge):
    n = 16 * 3 + 5
    u0 = np.random.default_rng(3).uniform(size=n)
    rods = [slice(0, 16), slice(16, 32), slice(32, 48), slice(48, n)]

    def f(t, u):
        out = np.empty_like(u)
        for r in rods:
            left, right = _neighbours(u[r], edge)
            out[r] = 0.5 * (left - 2 * u[r] + right) + 0.01 * u[r].sum()
        return out

    got = run(HEAT.replace("EDGE", edge), u0)
    np.testing.assert_allclose(got, rk4(f, u0, 0.05, 40), atol=1e-12)


def test_two_dimensional_basin():
    src = """field plate {
        grid i < M, j < N
        basin a < 4, b < 8
        state u
        coupled v = u edge wrap, w = u * u edge zero
        du/dt = v[a - 1, b] - v[a, b + 2] + w[a + 1, b - 1] + max(v) - min(w) + float(a * 10 + b)
        solve heun(dt = 0.01, steps = 20)
    }"""
    m, n = 10, 13
    u0 = np.random.default_rng(4).uniform(size=(m, n))
    boxes = [(slice(r, min(r + 4, m)), slice(c, min(c + 8, n)))
             for r in range(0, m, 4) for c in range(0, n, 8)]
    ab = np.add.outer(np.arange(m) % 4 * 10.0, np.arange(n) % 8)

    def f(t, u):
        out = np.empty_like(u)
        for box in boxes:
            v = u[box]
            w = v * v
            left = np.roll(v, 1, axis=0)
            right = np.roll(v, -2, axis=1)
            out[box] = left - right + zero_shift(w, 1, -1) + v.max() - w.min() + ab[box]
        return out

    def heun(u, dt, steps):
        for _ in range(steps):
            k1 = f(0, u)
            k2 = f(0, u + dt * k1)
            u = u + dt * (k1 / 2 + k2 / 2)
        return u

    got = run(src, u0)
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, heun(u0, 0.01, 20), atol=1e-12)


COLLAPSE = """
field arrive {
    state x
    basin l < 4
    dx/dt = 1
    collapse when x >= 10
    solve euler(dt = 1, steps = 50)
}
"""


def test_collapse_step_counts_closed_form():
    x0 = np.array([0, 9.5, 3, 5, 8, 8, 8, 8.5, 20, 1.5, 30])   # 3 basins, the last partial
    sol = solve(COLLAPSE, x0)
    own = np.maximum(1, np.ceil(10 - x0))                        # steps each lane needs
    basin = np.array([own[i:i + 4].max() for i in range(0, 11, 4)])
    expected = np.repeat(basin, 4)[:11]
    np.testing.assert_array_equal(sol.steps_taken, expected)
    assert sol.steps_taken.dtype == np.int32
    np.testing.assert_allclose(sol.states, x0 + expected)


def test_collapse_uses_time_after_the_step_and_history_repeats():
    src = COLLAPSE.replace("x >= 10", "t >= 3.5")
    sol = solve(src, np.zeros(6), save_every=2)
    np.testing.assert_array_equal(sol.steps_taken, 4)
    np.testing.assert_allclose(sol.history[:, 0], [0, 2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                                   4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    np.testing.assert_allclose(sol.times, np.arange(0, 51, 2))


HISTOGRAM = """
field histogram {
    output counts[32]
    state x
    dx/dt = -x + 1
    solve rk4(dt = 0.1, steps = 50)
    flux counts[clamp(int(x * 16), 0, 31)] += 1
}
"""


def test_flux_histogram_matches_bincount():
    x0 = np.random.default_rng(5).uniform(-20, 20, 5000)
    sol = solve(HISTOGRAM, x0)
    final = rk4(lambda t, x: 1 - x, x0, 0.1, 50)
    expected = np.bincount(np.clip(np.floor(final * 16), 0, 31).astype(int), minlength=32)
    np.testing.assert_array_equal(sol.outputs["counts"], expected)
    np.testing.assert_allclose(sol.states, final, rtol=1e-12)


def test_flux_weights_two_dim_output_and_step():
    src = """field deposit {
        output H[3, R]
        state x
        dx/dt = 0
        solve euler(dt = 0.5, steps = 4)
        flux H[i % 3, i % R] += x + float(step) + t
    }"""
    x0 = np.arange(10.0)
    sol = solve(src, x0, dims={"R": 2})
    expected = np.zeros((3, 2))
    np.add.at(expected, (np.arange(10) % 3, np.arange(10) % 2), x0 + 4 + 2.0)
    np.testing.assert_allclose(sol.outputs["H"], expected)


def test_history_save_every_first_and_last_included():
    sol = solve(DECAY, np.ones(3), params={"k": 1.0}, steps=10, save_every=3)
    assert sol.history.shape == (5, 3)
    np.testing.assert_allclose(sol.times, [0, 0.03, 0.06, 0.09, 0.1])
    np.testing.assert_array_equal(sol.history[0], 1.0)
    np.testing.assert_array_equal(sol.history[-1], sol.states)
    np.testing.assert_allclose(sol.history[2], np.exp(-0.06), rtol=1e-9)
    multi = solve(MATMUL, inputs={"A": np.ones((2, 4)), "B": np.ones((4, 2))}, save_every=2)
    assert multi.history.shape == (3, 2, 2)
    np.testing.assert_array_equal(multi.history[:, 0, 0], [0, 2, 4])


def test_float32_stays_float32_bit_for_bit():
    src = """field slow {
        state x
        dx/dt = -0.1 * x + sin(t)
        solve heun(dt = 0.1, steps = 10)
    }"""
    x0 = np.linspace(-1, 1, 5, dtype=np.float32)
    got = run(src, x0, dtype="float32")
    f32 = np.float32
    dt, half = f32(0.1), f32(0.5)

    def f(t, x):
        return f32(-0.1) * x + np.sin(t)

    x = x0.copy()
    for n in range(10):
        t = f32(0) + f32(n) * dt
        k1 = f(t, x)
        k2 = f(t + f32(1) * dt, x + dt * (f32(1) * k1))
        x = x + dt * (half * k1 + half * k2)
    assert got.dtype == np.float32 and x.dtype == np.float32
    np.testing.assert_array_equal(got, x)
    assert run(src, x0, dtype="float64").dtype == np.float64


ORDER = """
field growth {
    state x
    dx/dt = x * cos(t)
    solve METHOD(dt = 0.1, steps = 10)
}
"""


@pytest.mark.parametrize("method,order", [("euler", 1), ("midpoint", 2), ("heun", 2),
                                          ("rk4", 4)])
def test_order_of_convergence(method, order):
    src = ORDER.replace("METHOD", method)
    exact = np.exp(np.sin(1.0))
    err = [abs(run(src, np.ones(1), dt=1.0 / n, steps=n)[0] - exact) for n in (20, 40)]
    assert np.log2(err[0] / err[1]) == pytest.approx(order, abs=0.15)


def test_a_new_method_is_one_tableau_entry(monkeypatch):
    """The reference evaluates the step program built from the tableau: a method it
    has never seen (Ralston's, 3 stages) runs as the documented recurrence, bit for bit."""
    from fractions import Fraction as Fr
    from vgpu_compiler.ir.tableau import TABLEAUX, Tableau
    ralston = Tableau("ralston3", a=((), (Fr(1, 2),), (Fr(0), Fr(3, 4))),
                      b=(Fr(2, 9), Fr(1, 3), Fr(4, 9)), c=(Fr(0), Fr(1, 2), Fr(3, 4)))
    monkeypatch.setitem(TABLEAUX, "ralston3", ralston)
    src = ORDER.replace("METHOD", "ralston3").replace("growth", "growth_ralston3")
    x0 = np.linspace(0.5, 2.0, 5)
    got = run(src, x0, dt=0.1, steps=10)

    def f(t, x):
        return x * np.cos(t)

    x, dt = x0.copy(), 0.1
    w = [float(v) for v in ralston.b]
    for n in range(10):
        t = 0.0 + float(n) * dt
        k1 = f(t + 0.0 * dt, x)
        k2 = f(t + 0.5 * dt, x + dt * (0.5 * k1))
        k3 = f(t + 0.75 * dt, x + dt * (0.75 * k2))
        x = x + dt * (w[0] * k1 + w[1] * k2 + w[2] * k3)
    np.testing.assert_array_equal(got, x)
    exact = np.exp(np.sin(1.0))
    err = [abs(run(src, np.ones(1), dt=1.0 / n, steps=n)[0] - exact) for n in (20, 40)]
    assert np.log2(err[0] / err[1]) == pytest.approx(3, abs=0.2)


def test_call_time_overrides_and_t0():
    src = """field ramp {
        state x
        dx/dt = t
        solve rk4(dt = 0.1, steps = 10, t0 = 1.0)
    }"""
    assert run(src, np.zeros(1))[0] == pytest.approx((2.0 ** 2 - 1.0) / 2)
    got = run(src, np.zeros(1), dt=0.5, steps=4, t0=-1.0)[0]
    assert got == pytest.approx((1.0 ** 2 - 1.0) / 2)
    sol = solve(src, np.zeros(2), steps=3, save_every=1, t0=2.0, dt=0.25)
    np.testing.assert_allclose(sol.times, [2.0, 2.25, 2.5, 2.75])
    np.testing.assert_array_equal(sol.steps_taken, [3, 3])


def test_param_defaults_follow_per_trajectory_params():
    src = """field scaled {
        param k
        param k2 = 2 * k + one
        param one = 1.0
        state x
        dx/dt = k2
        solve euler(dt = 1, steps = 1)
    }"""
    k = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(run(src, np.zeros(3), params={"k": k}), 2 * k + 1)
    np.testing.assert_allclose(run(src, np.zeros(3), params={"k": 1}), 3.0)


def test_init_and_start_expressions():
    src = """field starts {
        param p = 3.0
        state x, y = 2 * x + p, z = float(i)
        dx/dt = 0
        dy/dt = init(x) - x
        dz/dt = init(y)
        solve euler(dt = 1, steps = 2)
    }"""
    x0 = np.array([1.0, 5.0])
    h = run(src, x0)
    np.testing.assert_allclose(h, np.stack([x0, 2 * x0 + 3, [0 + 2 * 5, 1 + 2 * 13]], axis=1))


def test_step_and_steps_taken_without_collapse():
    src = """field counter {
        state n = 0
        dn/dt = float(step)
        solve euler(dt = 1, steps = 7)
    }"""
    sol = solve(src, dims={"N": 3})
    np.testing.assert_array_equal(sol.states, 21.0)
    np.testing.assert_array_equal(sol.steps_taken, 7)
    zero = solve(src, dims={"N": 3}, steps=0, save_every=5)
    np.testing.assert_array_equal(zero.states, 0.0)
    assert zero.history.shape == (1, 3)


def test_progress_is_reported():
    seen = []
    solve(DECAY, np.ones(2), params={"k": 1.0}, steps=250, progress=lambda d, n: seen.append(d))
    assert seen[-1] == 250 and seen == sorted(seen) and len(seen) >= 10


def test_h0_for_one_state_on_a_two_dimensional_grid():
    src = """field plane {
        grid i < M, j < N
        state u
        du/dt = float(i * 10 + j)
        solve euler(dt = 1, steps = 1)
    }"""
    u0 = np.zeros((2, 3))
    expected = np.add.outer(np.arange(2) * 10.0, np.arange(3))
    np.testing.assert_array_equal(run(src, u0), expected)
    np.testing.assert_array_equal(run(src, u0[..., None]), expected)   # (M, N, 1) is fine too


BASIN_FREE = """
field free {
    param k
    input w[M, N]
    grid i < M, j < N
    BASIN
    state x, y = 1.0
    dx/dt = -k * x + w[i, j] * sin(t) + float(i - j)
    dy/dt = where(x > 0.0, x * y, -y) / (1.0 + float(step))
    solve rk4(dt = 0.05, steps = 7)
    FLUX
}
"""


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 9), bm=st.integers(0, 4), bn=st.integers(1, 4))
def test_basin_layout_never_changes_uncoupled_results(m, n, bm, bn):
    """bm = 0: a 1-D basin along the grid's last axis."""
    rng = np.random.default_rng(m * 10 + n)
    h0 = rng.normal(size=(m, n))
    args = dict(params={"k": rng.uniform(size=(m, n))}, inputs={"w": rng.normal(size=(m, n))},
                dtype="float32")
    flux = "output H[4]\n    flux H[(i + j) % 4] += x"
    src = BASIN_FREE.replace("FLUX", flux)
    plain = solve(src.replace("BASIN", ""), h0, **args)
    basin = f"basin a < {bm}, b < {bn}" if bm else f"basin b < {bn}"
    tiled = solve(src.replace("BASIN", basin), h0, **args)
    np.testing.assert_array_equal(plain.states, tiled.states)
    np.testing.assert_allclose(plain.outputs["H"], tiled.outputs["H"], rtol=1e-5, atol=1e-5)


# --- a run-time error names the place that failed --------------------------------------
TWICE = ("field f {\n    input w[N]\n    state x = 0\n    dx/dt = %s\n"
         "    solve euler(dt = 1, steps = 1)\n}\n")


@pytest.mark.parametrize("body, failing, last", [
    # the same read, guarded and unguarded (one IR node: spans are not part of equality)
    ("where(i > 0, w[i - 1], 0.0) + w[i - 1]", "w[i - 1]", True),
    ("w[i - 1] + where(i > 0, w[i - 1], 0.0)", "w[i - 1]", False),
    ("where(i > 0 and w[i - 1] > 0, 1.0, 0.0) + 2 * w[i - 1]", "w[i - 1]", True),
    ("where(i > 0, float(6 // i), 0.0) + float(6 // i)", "6 // i", True),
])
def test_run_time_error_names_the_unguarded_copy(body, failing, last):
    """Equal nodes share one value, but each place in the text is checked on its own
    lanes: the error's span is the copy that is evaluated where it fails."""
    column = (body.rindex if last else body.index)(failing) + len("    dx/dt = ") + 1
    with pytest.raises((vgpu.VgpuIndexError, vgpu.VgpuZeroDivisionError)) as info:
        run(TWICE % body, inputs={"w": np.ones(3)})
    err = info.value
    assert (err.line, err.column) == (4, column)
    assert err.span.end_column == column + len(failing)


def test_glsl_reports_the_same_place(glsl):
    body = "where(i > 0, w[i - 1], 0.0) + w[i - 1]"
    with pytest.raises(vgpu.VgpuIndexError) as info:
        run(TWICE % body, inputs={"w": np.ones(3)}, backend="glsl", dtype="float32")
    assert (info.value.line, info.value.column) == (4, body.rindex("w[i - 1]") + 13)


def test_double_star_computes_powers():
    src = ("field p {\n    grid i < N\n    state a = 0, b = 0\n    da/dt = 2 ** -1 + i ** 2\n"
           "    db/dt = 2.0 ** 3 ** 2\n    solve euler(dt = 1, steps = 1)\n}\n")
    out = run(src, dims={"N": 4})
    np.testing.assert_array_equal(out[:, 0], 0.5 + np.arange(4.0) ** 2)
    np.testing.assert_array_equal(out[:, 1], 2.0 ** 9)
