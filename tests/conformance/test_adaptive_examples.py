"""examples/vanderpol_adaptive.field and examples/lorenz_tsit5.field: what their comments
claim, on numpy, GLSL, wgpu (float32 only there) and cpu, against scipy; and ``vgpuc run``
on them."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import vgpu

solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
BACKENDS = ["numpy", "glsl", "wgpu", "cpu"]


def backend_fixture(backend, request):
    if backend != "numpy":
        request.getfixturevalue(backend)
    return backend


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_vanderpol_step_counts_differ_a_hundredfold(backend, dtype, request):
    backend_fixture(backend, request)
    mu = np.array([0.1, 1.0, 300.0])
    h0 = np.tile([2.0, 0.0], (3, 1))
    sol = vgpu.solve(vgpu.load(EXAMPLES / "vanderpol_adaptive.field"), h0, params={"mu": mu},
                     dtype=dtype, backend=backend, save_at=np.linspace(0, 20, 21))
    assert (sol.status == 0).all()
    assert sol.steps_taken[2] > 50 * sol.steps_taken[0]
    for i in range(2):
        r = solve_ivp(lambda t, y, m=mu[i]: [y[1], m * (1 - y[0] ** 2) * y[1] - y[0]],
                      (0, 20), h0[i], method="DOP853", rtol=1e-12, atol=1e-12,
                      t_eval=np.linspace(0, 20, 21))
        assert np.abs(sol.history[:, i] - r.y.T).max() < 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, tol", [("float64", 1e-4), ("float32", 1e-3)])
def test_lorenz_tsit5_sweep(backend, dtype, tol, request):
    backend_fixture(backend, request)
    rho = np.linspace(0, 21, 6)
    h0 = np.tile([1.0, 0.0, 0.0], (6, 1))
    sol = vgpu.solve(vgpu.load(EXAMPLES / "lorenz_tsit5.field"), h0, params={"rho": rho},
                     dtype=dtype, backend=backend)
    assert sol.states.dtype == np.dtype(dtype) and (sol.status == 0).all()
    for i, r in enumerate(rho):
        want = solve_ivp(lambda t, y, r=r: [10 * (y[1] - y[0]), y[0] * (r - y[2]) - y[1],
                                            y[0] * y[1] - 8 / 3 * y[2]],
                         (0, 1), h0[i], method="DOP853", rtol=1e-12, atol=1e-12).y[:, -1]
        assert np.abs(sol.states[i] - want).max() < tol * (1 + np.abs(want).max())


def test_vgpuc_run_prints_a_status_line_and_writes_the_arrays(tmp_path, capsys):
    from vgpu_compiler.cli.main import main
    h0 = tmp_path / "h0.npy"
    np.save(h0, np.tile([2.0, 0.0], (3, 1)))
    out = tmp_path / "out.npz"
    code = main(["run", str(EXAMPLES / "vanderpol_adaptive.field"), "--h0", str(h0),
                 "--param", "mu=3", "--backend", "numpy", "--dtype", "float64",
                 "--t1", "2", "--rtol", "1e-8", "--save-at", "0:2:5", "-o", str(out)])
    assert code == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("status: 3 reached the end (of 3); steps taken")
    with np.load(out) as z:
        assert z["status"].tolist() == [0, 0, 0] and z["t"].tolist() == [2.0, 2.0, 2.0]
        assert z["history"].shape == (5, 3, 2) and z["times"].tolist() == [0, 0.5, 1, 1.5, 2]
        assert z["steps_rejected"].dtype == np.int32
