"""The reference backend's fast paths keep its meaning exactly.

The numpy reference evaluates each stage along a straight-line schedule and
writes into arrays kept for the run (see ``backends/numpy/interpreter.py``). None of
that may change a bit: float32 stays float32 with the documented operation
order (``h + dt * (sum of a_sj * k_j)``), and run-time errors are raised only
for the lanes that evaluate the read.
"""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from field_examples import LORENZ

f32 = np.float32



def rk4_f32(f, h, dt, steps):
    """Classic RK4 in float32, in the reference's documented order."""
    dt, half, sixth, third = f32(dt), f32(0.5), f32(1 / 6), f32(1 / 3)
    for _ in range(steps):
        k1 = f(h)
        k2 = f([hi + dt * (half * ki) for hi, ki in zip(h, k1)])
        k3 = f([hi + dt * (half * ki) for hi, ki in zip(h, k2)])
        k4 = f([hi + dt * (f32(1) * ki) for hi, ki in zip(h, k3)])
        h = [hi + dt * (sixth * a + third * b + third * c + sixth * d)
             for hi, a, b, c, d in zip(h, k1, k2, k3, k4)]
    return np.stack(h, axis=-1)


@pytest.mark.parametrize("n", [1, 37, 4096])
def test_float32_lorenz_is_a_hand_written_float32_rk4_bit_for_bit(n):
    rho = np.linspace(0, 21, n).astype(f32)
    h0 = np.tile(f32([1, 0, 0]), (n, 1))
    got = vgpu.run_field(LORENZ, h0, params={"rho": rho}, dt=0.001, steps=300,
                         backend="numpy", dtype="float32")
    sigma, beta = f32(10.0), f32(8.0 / 3.0)

    def f(h):
        x, y, z = h
        return [sigma * (y - x), x * (rho - z) - y, x * y - beta * z]

    want = rk4_f32(f, [h0[:, 0], h0[:, 1], h0[:, 2]], 0.001, 300)
    assert got.dtype == np.float32 and want.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_derivatives_that_are_states_and_shared_subexpressions_bit_for_bit():
    """dx/dt = y (a derivative that is the stage's own state), a let used twice,
    a square of one node: the arrays the reference reuses never leak."""
    src = """field osc {
        param w = 1.5
        state x, y, z
        let u = x - y
        dx/dt = y
        dy/dt = -w * x + 0.01 * u * u
        dz/dt = u * u - z * u
        solve rk4(dt = 0.05, steps = 40)
    }"""
    h0 = np.random.default_rng(1).uniform(-1, 1, (257, 3)).astype(f32)
    got = vgpu.run_field(src, h0, backend="numpy", dtype="float32")
    w = f32(1.5)

    def f(h):
        x, y, z = h
        u = x - y
        return [y, -w * x + f32(0.01) * u * u, u * u - z * u]

    want = rk4_f32(f, [h0[:, 0], h0[:, 1], h0[:, 2]], 0.05, 40)
    np.testing.assert_array_equal(got, want)


def test_history_keeps_every_saved_state():
    h0 = np.tile(f32([1, 0, 0]), (64, 1))
    rho = np.linspace(0, 21, 64).astype(f32)
    kw = dict(params={"rho": rho}, dt=0.001, backend="numpy", dtype="float32")
    sol = vgpu.solve(LORENZ, h0, steps=7, save_every=2, **kw)
    assert sol.history.shape == (5, 64, 3)
    for m, steps in enumerate([0, 2, 4, 6, 7]):
        np.testing.assert_array_equal(sol.history[m], vgpu.run_field(LORENZ, h0, steps=steps, **kw))


GUARD = """
field walk {
    input v[N]
    grid i < M
    state x
    let read = where(x < LIMIT, v[int(x)], 0.0)
    dx/dt = 1.0 + 0.5 * read * where(x >= 1.0 and x < 4.0 and v[int(x) - 1] > 0.0, 1.0, 0.0)
    solve METHOD(dt = 1, steps = 6)
}
"""


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_guarded_reads_raise_only_where_evaluated(method):
    """Every lane walks past the end of v; the guards keep the reads in range."""
    v = np.array([1.0, 2.0, -1.0, 4.0])
    src = GUARD.replace("LIMIT", "4.0").replace("METHOD", method)
    x0 = np.array([0.0, 0.5, 2.0, 3.5])
    got = vgpu.run_field(src, x0, inputs={"v": v}, backend="numpy", dtype="float32")
    assert np.all(np.isfinite(got)) and np.all(got >= x0 + 3)

    def f(x):
        i = np.floor(x).astype(int)
        read = np.where(x < 4, v[np.clip(i, 0, 3)], 0.0)
        ok = (x >= 1) & (x < 4) & (v[np.clip(i - 1, 0, 3)] > 0)
        return 1 + 0.5 * read * np.where(ok, 1.0, 0.0)

    if method == "euler":
        x = x0.copy()
        for _ in range(6):
            x = x + f(x)
        np.testing.assert_allclose(got, x, rtol=1e-6)


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_a_guard_one_past_the_end_raises_for_the_lane_that_reads(method):
    src = GUARD.replace("LIMIT", "5.0").replace("METHOD", method)
    v = np.array([1.0, 2.0, -1.0, 4.0])
    with pytest.raises(vgpu.VgpuIndexError, match=r"v\[4\]"):
        vgpu.run_field(src, np.array([0.0, 3.5]), inputs={"v": v}, backend="numpy")
    # lanes that stop short of 4 never evaluate v[4]: no error
    short = src.replace("steps = 6", "steps = 2")
    vgpu.run_field(short, np.array([0.0, 0.25]), inputs={"v": v}, backend="numpy")
