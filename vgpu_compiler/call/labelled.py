"""Labelled results: ``Solution.to_xarray()``, a solution as an ``xarray.Dataset``.

A Solution's arrays are bare: which axis is which grid index, which column which
state, which param value each trajectory had, is in the field and the call. The
call layer keeps those names in ``Solution.labels`` (``of``: set where a Solution
is made for a call), and ``to_xarray`` builds the Dataset from them:

- one variable per state, dims the grid's index names (``i``, ``j``, ... as in
  the field; a field without a ``grid`` statement has ``grid i < N``, so ``i``);
  with a history (``save_every``, ``save_at``) the state's variable is its
  history, dims ``("time",) + grid``, ``time`` the coordinate of the saved times,
  and the final states are the variables ``<state>_final`` (grid dims);
- every param given per trajectory at the call: a coordinate on the grid dims;
- ``status``, ``t``, ``steps_taken``, ``steps_rejected`` (grid dims) and
  ``event_counts`` (grid dims + ``event``, the `when` blocks in written order;
  left out for a field without one), those the solution has;
- every output: a variable of its declared shape, each axis named after its dim
  symbol (``N``), or ``<output>_<k>`` for a literal size on axis k;
- attrs: ``field`` (its name) and ``backend`` (the one that ran it).

A state, param or output whose name is one of the solution's own (``status``,
``steps_taken``, ``steps_rejected``, ``event_counts``, ``time``) is prefixed
with its kind (``state_status``). xarray is an optional dependency, imported
only here (``pip install 'vgpu[xarray]'``). ``write_netcdf`` is ``vgpuc run -o
x.nc``.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field as dc_field

import numpy as np

from ..errors import CallError, VgpuError

SOLUTION_NAMES = ("status", "t", "steps_taken", "steps_rejected", "event_counts")
TAKEN = frozenset(SOLUTION_NAMES) | {"time"}
# netCDF engines xarray can write with, best first (scipy: netCDF3, always 64-bit offsets)
ENGINES = (("netCDF4", "netcdf4", None), ("h5netcdf", "h5netcdf", None),
           ("scipy", "scipy", "NETCDF3_64BIT"))


class MissingDependency(VgpuError):
    """An optional library that this feature needs is not installed."""


@dataclass(frozen=True)
class Labels:
    """The names a Solution's arrays are labelled by (what ``to_xarray`` reads)."""

    field: str                                  # the field's name
    states: tuple[str, ...]                     # in declaration order
    grid: tuple[str, ...]                       # the grid's index names, axis by axis
    outputs: dict[str, tuple[str, ...]]         # output -> its axes' names
    params: dict = dc_field(default_factory=dict)   # per-trajectory params: grid-shaped arrays


def of(field, params: dict | None) -> Labels:
    """The labels of a call of ``field``: ``params`` the call's values (those with the
    grid's rank are per trajectory; scalars are not labels)."""
    rank = len(field.grid)
    per = {name: v if hasattr(v, "__dask_graph__") else np.array(v)     # (a copy: the
           for name, v in (params or {}).items() if np.ndim(v) == rank}  # caller's may change)
    outputs = {o.name: tuple(d if isinstance(d, str) else f"{o.name}_{k}"
                             for k, d in enumerate(o.dims)) for o in field.outputs}
    return Labels(field.name, field.state_names, tuple(a.index for a in field.grid),
                  outputs, per)


def reshaped(labels: Labels, batch: tuple) -> Labels:
    """The labels of a field without a ``grid`` statement called with a batch of shape
    ``batch`` (call/batch.py): one axis keeps the dim ``i``; more are ``i_0``, ``i_1``,
    ... in order, and the per-trajectory params take the batch's shape."""
    dims = ("i",) if len(batch) == 1 else tuple(f"i_{k}" for k in range(len(batch)))
    params = {name: v.reshape(batch) if hasattr(v, "reshape") else v
              for name, v in labels.params.items()}
    return Labels(labels.field, labels.states, dims, labels.outputs, params)


def xarray():
    try:
        import xarray as xr
    except ImportError:
        raise MissingDependency("to_xarray needs xarray, an optional dependency that is not "
                                "installed: pip install 'vgpu[xarray]' (or pip install "
                                "xarray)") from None
    return xr


def to_xarray(sol):
    """The Solution ``sol`` as an ``xarray.Dataset`` (see the module docstring)."""
    xr = xarray()
    labels = sol.labels
    if labels is None:
        raise CallError("this Solution carries no labels (the field's names), so it cannot "
                        "be made a Dataset; a Solution from vgpu.solve, a Simulation or a "
                        "Dask run has them")
    grid = labels.grid
    if sol.history is not None and "time" in grid:
        raise CallError("the grid index `time` is also the history's time axis: rename the "
                        "grid index to make a Dataset of this solution")
    variables: dict = {}

    def put(kind: str, name: str, dims: tuple, value) -> None:
        key = f"{kind}_{name}" if kind and name in TAKEN else name
        if key in variables:
            raise CallError(f"two variables of the Dataset would be named `{key}`")
        variables[key] = (dims, value)

    columns = _columns(sol.states, labels.states, len(grid))
    if sol.history is None:
        for name, value in zip(labels.states, columns):
            put("state", name, grid, value)
    else:
        history = _columns(sol.history, labels.states, len(grid) + 1)
        for name, value, final in zip(labels.states, history, columns):
            put("state", name, ("time",) + grid, value)
            put("state", f"{name}_final", grid, final)
    for name in SOLUTION_NAMES:
        value = getattr(sol, name, None)
        if name == "event_counts" and value is not None and np.shape(value)[-1] == 0:
            continue                    # no `when` block
        if value is not None:
            put("", name, grid + ("event",) if name == "event_counts" else grid, value)
    for name, value in (sol.outputs or {}).items():
        put("output", name, labels.outputs.get(name) or _axes(name, value), value)
    for name, value in (sol.observed or {}).items():     # `observe`: one per trajectory
        put("observed", name, grid, value)
    coords = {}
    if sol.history is not None:
        coords["time"] = ("time", np.asarray(sol.times))
    for name, value in labels.params.items():
        key = f"param_{name}" if name in TAKEN or name in variables else name
        coords[key] = (grid, value)
    attrs = {"field": labels.field}
    if isinstance(sol.backend, str):
        attrs["backend"] = sol.backend
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def _columns(states, names: tuple[str, ...], rank: int) -> list:
    """One array per state from ``... + (n_states,)`` (or no state axis for one state)."""
    if len(names) == 1 and np.ndim(states) == rank:
        return [states]
    return [states[..., k] for k in range(len(names))]


def _axes(name: str, value) -> tuple[str, ...]:
    return tuple(f"{name}_{k}" for k in range(np.ndim(value)))


def netcdf_engine() -> tuple[str, str | None]:
    """The netCDF engine to write with (and its format), from what is installed."""
    for module, engine, fmt in ENGINES:
        if importlib.util.find_spec(module) is not None:
            return engine, fmt
    raise MissingDependency("writing netCDF needs netCDF4, h5netcdf or scipy, and none is "
                            "installed: pip install scipy (netCDF3) or netCDF4")


def write_netcdf(sol, fh) -> None:
    """``sol.to_xarray()`` written into the open binary file ``fh`` (netCDF4 when
    netCDF4 or h5netcdf is installed, else netCDF3 through scipy). The engines write
    to a path, so the bytes are made in a private temporary folder first; the caller
    places ``fh`` atomically."""
    import shutil
    import tempfile

    dataset = to_xarray(sol)
    engine, fmt = netcdf_engine()
    with tempfile.TemporaryDirectory(prefix="vgpu-nc-") as folder:
        part = os.path.join(folder, "out.nc")
        dataset.to_netcdf(part, engine=engine, format=fmt)
        with open(part, "rb") as src:
            shutil.copyfileobj(src, fh)
