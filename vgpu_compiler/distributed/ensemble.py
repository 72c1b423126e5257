"""A call on a Dask cluster: the graph of blocks, and the lazy Solution it assembles.

The grid is split along its first axis into blocks of whole basins (a block boundary
is moved down to a multiple of the basin's extent on that axis; every other axis is
one chunk). Each block is one task (``block.run``), given its window of h0 and of
the params passed per trajectory (the blocks of the dask arrays, or of numpy arrays
cut with ``chunks=``), and everything else whole: scalar params, inputs, dims. It
runs VGPU on its worker with its window's place in the grid (call/window.py), so it
computes exactly those rows of a local run.

The result is a Solution of dask arrays, built generically from what a Solution
holds (so a new per-trajectory array needs nothing here): every array with the
grid's rows on its first axis (states, steps_taken, ...) or its second (history)
is the blocks' arrays side by side, chunked like the blocks; every output is the
sum of the blocks' outputs (a tree reduction); any other array (times) is the
first block's, which every block computes alike; ``backend`` is one name per
block. The call is checked on the client first (bind on an empty window), so a
mistake in it is raised at once, as a local call raises it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ArgumentTypeError, ShapeError
from ..call.bind import prepare
from ..call.bound import Solution
from ..call.empty import solution as empty_solution
from ..call import labelled
from ..call.status import complete_status
from ..call.tolerance import warn_tolerance
from ..call.window import Window
from ..pipeline import compile as compile_program
from . import block

SPLIT_EVERY = 8         # the fan-in of the tree that sums the outputs
PER_BLOCK = ("backend",)     # Solution attributes that are one value per block


def solve(src, h0, params, inputs, dims, field, backend, dtype, dt, steps, t0, save_every,
          chunks, extra=None, seed=0) -> Solution:
    import dask
    import dask.array as da
    selected = compile_program(src).select(field)
    params = {k: _array(v) for k, v in (params or {}).items()}
    h0 = None if h0 is None else _array(h0)
    lazy = {k: v for k, v in params.items() if np.ndim(v) > 0}
    scalars = {k: v for k, v in params.items() if k not in lazy}
    rows = _rows(selected, h0, lazy, chunks, src, inputs, dims, dtype, dt, steps, t0,
                 save_every)
    unit = int(selected.basin[0].extent) if selected.basin else 1
    bounds = _bounds(rows, unit, h0, lazy, chunks)
    # the call checked on the client, on an empty window: its mistakes are raised here
    window = Window(0, 0, rows)
    empty = {k: _empty(v) for k, v in lazy.items()}
    extra = dict(extra or {})
    adaptive = {k: v for k, v in extra.items() if k != "save_at"}
    prepared, _ = prepare(selected, None if h0 is None else _empty(h0), {**scalars, **empty},
                          inputs, dims, dtype, dt, steps, t0, save_every, adaptive,
                          extra.get("save_at"), seed, window)
    warn_tolerance(prepared.template, stacklevel=4)         # the caller of vgpu.solve
    probe = complete_status(empty_solution(prepared.template), prepared.template)
    probe.observed = {o.name: np.zeros(prepared.grid_shape, prepared.dtype)
                      for o in selected.observers}      # (an empty window's)
    spec = dict(source=src, field=selected.name, params=scalars, pt=tuple(lazy),
                inputs=inputs, dims=dims, backend=backend, dtype=dtype, dt=dt, steps=steps,
                t0=t0, save_every=save_every, extra=extra or None, seed=seed, rows=rows,
                bounds=tuple(bounds),
                h0_shape=None if h0 is None else tuple(np.shape(h0)[1:]),
                pt_shapes=tuple(tuple(np.shape(v)[1:]) for v in lazy.values()))
    lengths = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))
    # every grid-sized array as (rows, everything else), cut at the block boundaries;
    # with none (a grid from dims alone) an array of no columns gives the blocks
    columns = [_columns(da, x, rows, lengths) for x in ([h0] if h0 is not None else [])
               + list(lazy.values())]
    if not columns:
        columns = [da.zeros((rows, 0), chunks=(lengths, (0,)), dtype=np.float32)]
    solutions = da.map_blocks(block.run_blocks, *columns, spec=spec, has_h0=h0 is not None,
                              drop_axis=[1], chunks=((1,) * len(lengths),), dtype=object,
                              meta=np.empty((0,), object))
    sol = _assemble(da, probe, solutions, lengths)
    sol.labels = labelled.of(selected, params)      # the per-trajectory params: lazy
    return sol


def _array(v):
    """A dask array as it is; anything else as numpy (a list of numbers is an array)."""
    return v if hasattr(type(v), "__dask_graph__") or np.isscalar(v) else np.asarray(v)


def _empty(a):
    """An empty window's part of an array (its first axis cut to no row), as numpy."""
    shape = tuple(int(n) for n in np.shape(a))
    return np.zeros((0,) + shape[1:], getattr(a, "dtype", np.float64))


def _rows(field, h0, lazy: dict, chunks, src, inputs, dims, dtype, dt, steps, t0,
          save_every) -> int:
    """The rows of the whole grid's first axis: from an array's shape, or (no array is
    passed per trajectory) from binding the call, which then holds no grid-sized array."""
    for a in ([h0] if h0 is not None else []) + list(lazy.values()):
        shape = np.shape(a)
        if any(isinstance(n, float) and np.isnan(n) for n in shape):
            raise ShapeError("a dask array of unknown chunk sizes: call its "
                             "compute_chunk_sizes() first")
        if len(shape) >= 1:
            return int(shape[0])
    prepared, _ = prepare(field, None, None, inputs, dims, dtype, dt, steps, t0, save_every)
    if not prepared.grid_shape:
        raise ArgumentTypeError(f"field {field.name} has no grid axis to split into blocks")
    return int(prepared.grid_shape[0])


def _bounds(rows: int, unit: int, h0, lazy: dict, chunks) -> list[int]:
    """Block boundaries along the first grid axis: from ``chunks`` (rows per block, or
    the blocks' lengths), else from the first dask array's chunks; each moved down to a
    multiple of ``unit`` (whole basins), the last one the end of the grid."""
    if chunks is None:
        for a in ([h0] if h0 is not None else []) + list(lazy.values()):
            if hasattr(type(a), "__dask_graph__"):
                chunks = tuple(a.chunks[0])
                break
    if chunks is None:
        chunks = rows
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ArgumentTypeError(f"chunks must be a number of rows >= 1, got {chunks}")
        edges = list(range(0, rows, int(chunks))) + [rows]
    elif isinstance(chunks, (tuple, list)) and all(
            isinstance(c, (int, np.integer)) and c >= 0 for c in chunks):
        if sum(chunks) != rows:
            raise ShapeError(f"chunks {tuple(chunks)} add up to {sum(chunks)} rows, but the "
                             f"grid has {rows} rows on its first axis")
        edges = list(np.cumsum([0] + list(chunks)))
    else:
        raise ArgumentTypeError(f"chunks must be rows per block (an int) or the blocks' "
                                f"lengths (a tuple of ints), got {chunks!r}")
    out = [0]
    for e in edges[1:-1]:
        e = int(e) - int(e) % unit
        if e > out[-1]:
            out.append(e)
    if rows > out[-1] or rows == 0:
        out.append(rows)
    return out


def _columns(da, a, rows: int, lengths: tuple):
    """``a`` (numpy or dask) as a dask array (rows, everything else), chunked at the
    block boundaries on its rows and whole on the rest."""
    width = int(np.prod(np.shape(a)[1:], dtype=np.int64))
    if not hasattr(type(a), "__dask_graph__"):
        return da.from_array(np.asarray(a).reshape(rows, width), chunks=(lengths, -1))
    if tuple(a.chunks[0]) != lengths or any(len(c) > 1 for c in a.chunks[1:]):
        a = a.rechunk((lengths,) + tuple(-1 for _ in a.shape[1:]))
    return a if a.ndim == 2 else a.reshape(rows, width)


def _assemble(da, probe: Solution, solutions, lengths: tuple) -> Solution:
    """The Solution of dask arrays (see the module docstring), each taken from the
    blocks' Solutions by a blockwise operation (fused with the run: one task a block)."""
    grid = probe.steps_taken.shape
    values = {}
    for f in dataclasses.fields(probe):
        name, v = f.name, getattr(probe, f.name)
        if name in PER_BLOCK:
            values[name] = solutions.map_blocks(block.label, name, dtype=object,
                                                meta=np.empty((0,), object))
        elif isinstance(v, dict) and name == "observed":    # per trajectory, as states
            values[name] = {k: _side_by_side(da, solutions, f"observed/{k}", o, 0, lengths)
                            for k, o in v.items()}
        elif isinstance(v, dict):
            values[name] = {k: _summed(da, solutions, f"outputs/{k}", o)
                            for k, o in v.items()}
        elif isinstance(v, np.ndarray):
            axis = _trajectory_axis(v, grid)
            out = tuple(range(v.ndim))
            if axis is not None:
                values[name] = _side_by_side(da, solutions, name, v, axis, lengths)
            else:        # the same for every block (e.g. times): the first's
                first = solutions.blocks[:1]
                values[name] = da.blockwise(
                    block.part, out, first, (v.ndim,), name, None, concatenate=True,
                    new_axes=dict(enumerate(v.shape)), dtype=v.dtype,
                    meta=np.empty((0,) * v.ndim, v.dtype))
        else:
            values[name] = v
    return Solution(**values)


def _side_by_side(da, solutions, name: str, v: np.ndarray, axis: int, lengths: tuple):
    """A per-trajectory array: the blocks' arrays side by side on ``axis``."""
    return da.blockwise(
        block.part, tuple(range(v.ndim)), solutions, (axis,), name, None,
        new_axes={k: n for k, n in enumerate(v.shape) if k != axis},
        adjust_chunks={axis: lengths}, dtype=v.dtype, meta=np.empty((0,) * v.ndim, v.dtype))


def _trajectory_axis(v: np.ndarray, grid: tuple) -> int | None:
    """Where an array of an empty window's Solution has the grid's axes (0 rows), if
    it has them: at axis 0 (per trajectory) or 1 (a history)."""
    for axis in (0, 1):
        if v.shape[axis:axis + len(grid)] == grid:
            return axis
    return None


def _summed(da, solutions, name: str, like: np.ndarray):
    """An output summed over the blocks: one (1, *shape) piece per block, then a tree
    reduction (``SPLIT_EVERY`` pieces a node)."""
    pieces = da.blockwise(block.piece, tuple(range(like.ndim + 1)), solutions, (0,), name, None,
                          new_axes={k + 1: n for k, n in enumerate(like.shape)},
                          dtype=like.dtype, meta=np.empty((0,) * (like.ndim + 1), like.dtype))
    return pieces.sum(axis=0, split_every=SPLIT_EVERY, dtype=like.dtype)


def compute(solution: Solution, **kwargs) -> Solution:
    """A Solution of dask arrays computed at once (each block runs once), as numpy
    arrays; ``kwargs`` go to ``dask.compute`` (e.g. ``scheduler=``)."""
    import dask
    fields = {f.name: getattr(solution, f.name) for f in dataclasses.fields(solution)}
    done, = dask.compute(fields, **kwargs)
    return Solution(**done)
