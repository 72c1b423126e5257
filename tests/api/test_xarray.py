"""``sol.to_xarray()`` and ``vgpuc run -o out.nc`` (call/labelled.py): every array of a
Solution in the Dataset under the field's names, equal to the Solution's own arrays;
xarray and a netCDF engine optional, with a clear error without them."""
from __future__ import annotations

import builtins
import importlib.util
import pathlib

import numpy as np
import pytest

import vgpu
from vgpu_compiler.call import labelled
from vgpu_compiler.call.bound import Solution
from vgpu_compiler.cli.main import main as vgpuc
from vgpu_compiler.errors import CallError

xr = pytest.importorskip("xarray")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
LORENZ = (EXAMPLES / "lorenz.field").read_text()
H0 = np.tile(np.float32([1, 0, 0]), (6, 1))
RHO = np.linspace(0, 30, 6)


def test_one_variable_per_state_on_the_grid_with_per_trajectory_params_as_coordinates():
    sol = vgpu.solve(LORENZ, H0, params={"rho": RHO, "beta": 2.0}, steps=50,
                     backend="numpy")
    ds = sol.to_xarray()
    for k, name in enumerate("xyz"):
        assert ds[name].dims == ("i",)
        np.testing.assert_array_equal(ds[name].values, sol.states[:, k])
    np.testing.assert_array_equal(ds["rho"].values, RHO)
    assert ds["rho"].dims == ("i",) and "rho" in ds.coords
    assert "beta" not in ds and "sigma" not in ds         # scalars are not labels
    for name in ("status", "t", "steps_taken", "steps_rejected"):
        np.testing.assert_array_equal(ds[name].values, getattr(sol, name))
        assert ds[name].dims == ("i",)
    assert "event_counts" not in ds                       # lorenz has no `when`
    assert ds.attrs == {"field": "lorenz", "backend": "numpy"}
    # select by a param's value, as xarray does
    by_rho = ds.swap_dims(i="rho")
    np.testing.assert_array_equal(by_rho.x.sel(rho=RHO[3]).values, sol.states[3, 0])


def test_a_batch_of_several_axes_is_labelled_i_0_i_1():
    """A field without a grid called with a meshgrid sweep (call/batch.py): the dims are
    i_0, i_1, and a per-trajectory param is a coordinate of the batch's shape."""
    rho, beta = np.meshgrid(np.linspace(0, 30, 3), np.linspace(1, 3, 4), indexing="ij")
    sol = vgpu.solve(LORENZ, np.float32([1, 0, 0]), params={"rho": rho, "beta": beta},
                     steps=50, backend="numpy")
    ds = sol.to_xarray()
    for k, name in enumerate("xyz"):
        assert ds[name].dims == ("i_0", "i_1")
        np.testing.assert_array_equal(ds[name].values, sol.states[..., k])
    np.testing.assert_array_equal(ds["rho"].values, rho)
    np.testing.assert_array_equal(ds["beta"].values, beta)
    assert ds["status"].dims == ("i_0", "i_1")
    np.testing.assert_array_equal(ds["x"].sel(i_0=2, i_1=1).values, sol["x"][2, 1])


def test_a_history_has_time_first_and_the_final_states_beside_it():
    sol = vgpu.solve(LORENZ, H0, params={"rho": RHO}, steps=50, save_every=10,
                     backend="numpy")
    ds = sol.to_xarray()
    np.testing.assert_array_equal(ds["time"].values, sol.times)
    for k, name in enumerate("xyz"):
        assert ds[name].dims == ("time", "i")
        np.testing.assert_array_equal(ds[name].values, sol.history[:, :, k])
        np.testing.assert_array_equal(ds[f"{name}_final"].values, sol.states[:, k])
    np.testing.assert_array_equal(ds.x.sel(time=sol.times[2]).values, sol.history[2, :, 0])


def test_save_at_on_an_adaptive_method():
    src = (EXAMPLES / "vanderpol_adaptive.field").read_text()
    sol = vgpu.solve(src, np.tile([2.0, 0.0], (4, 1)), dims={"N": 4}, backend="numpy",
                     save_at=np.linspace(0, 1, 5))
    ds = sol.to_xarray()
    np.testing.assert_array_equal(ds["time"].values, sol.times)
    np.testing.assert_array_equal(ds["x"].values, sol.history[..., 0])
    np.testing.assert_array_equal(ds["t"].values, sol.t)


MATMUL = (EXAMPLES / "matmul.field").read_text()


def test_a_two_dimensional_grid_is_named_by_its_indices_and_one_state_has_no_state_axis():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    sol = vgpu.solve(MATMUL, inputs={"A": A, "B": B}, backend="numpy", dtype="float64")
    ds = sol.to_xarray()
    assert ds["c"].dims == ("i", "j") and ds.sizes == {"i": 3, "j": 5}
    np.testing.assert_allclose(ds["c"].values, A @ B)


def test_events_and_outputs():
    sol = vgpu.solve(vgpu.load(EXAMPLES / "lif.field"), dims={"N": 5},
                     params={"tau": np.full(5, 0.02)}, backend="numpy")
    ds = sol.to_xarray()
    assert ds["event_counts"].dims == ("i", "event")
    np.testing.assert_array_equal(ds["event_counts"].values, sol.event_counts)
    assert ds["raster"].dims == ("N", "raster_1") and ds["rate"].dims == ("rate_0",)
    np.testing.assert_array_equal(ds["raster"].values, sol.outputs["raster"])
    np.testing.assert_array_equal(ds["rate"].values, sol.outputs["rate"])
    np.testing.assert_array_equal(ds["tau"].values, 0.02)


def test_a_name_the_solution_uses_is_prefixed_with_its_kind():
    src = ("field f {\n    param event_counts = 1\n    state status, steps_taken = 2\n"
           "    output time[2]\n    dstatus/dt = 1\n    dsteps_taken/dt = event_counts\n"
           "    solve euler(dt = 1, steps = 3)\n}\n")
    sol = vgpu.solve(src, np.zeros(4), params={"event_counts": np.arange(4.0)},
                     backend="numpy")
    ds = sol.to_xarray()
    np.testing.assert_array_equal(ds["state_status"].values, sol.states[:, 0])
    np.testing.assert_array_equal(ds["state_steps_taken"].values, sol.states[:, 1])
    np.testing.assert_array_equal(ds["steps_taken"].values, sol.steps_taken)
    np.testing.assert_array_equal(ds["param_event_counts"].values, np.arange(4.0))
    assert "output_time" in ds


def test_a_simulation_and_a_dask_run_label_their_solutions_too():
    with vgpu.Simulation(LORENZ, H0, params={"rho": RHO}, backend="numpy") as sim:
        sim.advance(steps=20)
        ds = sim.solution().to_xarray()
    ref = vgpu.solve(LORENZ, H0, params={"rho": RHO}, steps=20, backend="numpy").to_xarray()
    xr.testing.assert_equal(ds[["x", "y", "z", "t", "steps_taken"]],
                            ref[["x", "y", "z", "t", "steps_taken"]])
    np.testing.assert_array_equal(ds["rho"].values, RHO)
    da = pytest.importorskip("dask.array")
    lazy = vgpu.solve(LORENZ, H0, params={"rho": da.from_array(RHO, chunks=3)}, steps=20,
                      backend="numpy", chunks=3)
    got = lazy.to_xarray()
    assert got["x"].chunks is not None                   # still lazy
    xr.testing.assert_equal(got.compute(), ref)


def test_a_solution_without_labels_says_so():
    sol = Solution(states=np.zeros(3), outputs={}, steps_taken=np.zeros(3, np.int32))
    with pytest.raises(CallError, match="carries no labels"):
        sol.to_xarray()


def _without(monkeypatch, *modules):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.split(".")[0] in modules:
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake)


def test_without_xarray_to_xarray_is_a_clear_error(monkeypatch):
    sol = vgpu.solve(LORENZ, H0, steps=5, backend="numpy")
    _without(monkeypatch, "xarray")
    with pytest.raises(vgpu.VgpuError, match=r"needs xarray.*pip install 'vgpu\[xarray\]'"):
        sol.to_xarray()


# --- vgpuc run -o out.nc --------------------------------------------------------------------
def test_vgpuc_run_writes_netcdf_for_a_nc_name(tmp_path, capsys):
    out = tmp_path / "vdp.nc"
    assert vgpuc(["run", str(EXAMPLES / "vanderpol.field"), "--dim", "N=4", "--save-every",
                  "500", "--backend", "numpy", "-o", str(out)]) == 0
    with xr.open_dataset(out) as ds:
        ds = ds.load()
    h0 = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    want = vgpu.solve(vgpu.load(EXAMPLES / "vanderpol.field"), h0, save_every=500,
                      backend="numpy").to_xarray()
    xr.testing.assert_identical(ds, want)
    npz = tmp_path / "vdp.npz"                             # other names: as before
    assert vgpuc(["run", str(EXAMPLES / "vanderpol.field"), "--dim", "N=4", "--backend",
                  "numpy", "-o", str(npz)]) == 0
    assert "states" in np.load(npz)


def test_vgpuc_run_says_before_the_run_when_nc_cannot_be_written(tmp_path, monkeypatch,
                                                               capsys):
    out = tmp_path / "x.nc"
    args = ["run", str(EXAMPLES / "lorenz.field"), "--dim", "N=2", "-o", str(out)]
    _without(monkeypatch, "xarray")
    assert vgpuc(args) == 2
    assert "needs xarray" in capsys.readouterr().err and not out.exists()
    monkeypatch.undo()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("netCDF4", "h5netcdf", "scipy")
                        else real(name, *a))
    assert vgpuc(args) == 2
    err = capsys.readouterr().err
    assert "writing netCDF needs netCDF4, h5netcdf or scipy" in err and not out.exists()


def test_the_engine_is_the_best_one_installed(monkeypatch):
    have = {"scipy"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name in have else None)
    assert labelled.netcdf_engine() == ("scipy", "NETCDF3_64BIT")
    have.add("h5netcdf")
    assert labelled.netcdf_engine() == ("h5netcdf", None)
