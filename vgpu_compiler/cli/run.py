"""``vgpuc run``: integrate an ensemble from the command line.

Arrays come in and go out as ``.npy`` / ``.npz``; ``-o x.nc`` writes the solution's
``to_xarray()`` Dataset as netCDF (call/labelled.py; xarray needed). Without ``--h0``, the states
that start from h0 are drawn standard-normal (``default_rng(--seed)``) with
shape ``grid_shape + (n_free,)`` (``grid_shape`` for one), the grid's size
taken from ``--dim`` and from the shapes of ``--input`` / ``--param`` arrays.
``--seed`` is also the key of a stochastic field's noise (``seed=``).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from .common import (EXIT_OK, UsageError, attach_file, check_output, compile_source,
                         load_array, parse_dims, parse_inputs, parse_params, program_text,
                         read_text, select_field, size_text, write_atomically)
from ..call import labelled
from ..call.progress import bar as progress_bar
from ..errors import VgpuError
from ..noise.normal import SEED_LIMIT

RESERVED = ("states", "steps_taken", "history", "times", "status", "t", "steps_rejected")


def run_command(args: argparse.Namespace) -> int:
    _check_paths(args)
    if args.plot:
        from .plot import require

        require(args.plot)
    source = read_text(args.file)
    field = select_field(compile_source(source, args.file), args.field)
    dims = parse_dims(args.dim)
    params = parse_params(args.param)
    inputs = parse_inputs(args.input)
    h0 = _starting_states(args, field, dims, params, inputs)
    solution = _solve(args, source, field, h0, dims, params, inputs)
    _save(args.output, solution)
    if args.plot:
        from .plot import plot_solution

        plot_solution(args.plot, solution.states, field.state_names,
                      history=solution.history, times=solution.times,
                      outputs=solution.outputs,
                      title=f"{field.name} ({os.path.basename(args.file)})")
    if not args.output and not args.quiet:
        _print_summary(field, solution)
    if not args.quiet:
        print(status_line(solution), file=sys.stdout)
    return EXIT_OK


def status_line(solution) -> str:
    """One line: how every trajectory ended, with its steps (accepted and rejected)."""
    status = np.asarray(solution.status) if solution.status is not None else None
    if status is None or status.size == 0:
        return "status: no trajectory" + backend_words(solution.backend)
    words = {0: "reached the end", 1: "stopped", 2: "hit max_steps", 3: "step underflow",
             4: "too many events"}
    parts = [f"{int((status == c).sum())} {w}" for c, w in words.items() if (status == c).any()]
    taken = np.asarray(solution.steps_taken)
    line = (f"status: {', '.join(parts)} (of {status.size}); steps taken {taken.min()}.."
            f"{taken.max()}")
    rejected = np.asarray(solution.steps_rejected) if solution.steps_rejected is not None \
        else None
    if rejected is not None and rejected.any():
        line += f", rejected {int(rejected.sum())} in all"
    return line + backend_words(solution.backend)


def backend_words(backend) -> str:
    """``; on the cpu backend`` (a cluster run: one name per block, each counted)."""
    if backend is None:
        return ""
    if isinstance(backend, np.ndarray):
        names, counts = np.unique(backend.astype(str), return_counts=True)
        return "; on " + ", ".join(f"{name} ({count} blocks)" for name, count in
                                   zip(names, counts))
    return f"; on the {backend} backend"


def _check_paths(args: argparse.Namespace) -> None:
    """Refuse bad output names (and folders that cannot take them) and a seed out of
    range before spending time on the run."""
    if args.output and os.path.splitext(args.output)[1].lower() not in (".npy", ".npz", ".nc"):
        raise UsageError(f"-o {args.output}: the output must end in .npy, .npz or .nc")
    if args.output and args.output.lower().endswith(".nc"):
        _netcdf_ready(args.output)
    if args.output:
        check_output(args.output, "-o")
    if args.plot:
        check_output(args.plot, "--plot")
    if not 0 <= args.seed < SEED_LIMIT:     # numpy's default_rng refuses < 0 first
        raise UsageError(f"--seed must be a whole number in [0, 2^64), got {args.seed}")
    if args.save_every is not None and args.save_every < 1:
        raise UsageError(f"--save-every must be at least 1, got {args.save_every}")
    if args.steps is not None and args.steps < 0:
        raise UsageError(f"--steps must not be negative, got {args.steps}")
    if args.chunks is not None and not args.scheduler:
        raise UsageError("--chunks splits a run on a Dask cluster: give --scheduler ADDRESS "
                         "(or --scheduler local)")
    if args.chunks is not None and args.chunks < 1:
        raise UsageError(f"--chunks must be at least 1, got {args.chunks}")


# --- the default h0 ------------------------------------------------------------------
def _starting_states(args, field, dims, params, inputs) -> np.ndarray | None:
    if args.h0:
        return load_array(args.h0, key="states")
    n_free = len(field.free_states)
    if n_free == 0:
        return None
    grid = grid_shape(field, dims, params, inputs)
    if grid is None:
        unknown = ", ".join(_unbound_grid_dims(field, dims, params, inputs))
        raise UsageError(f"no --h0, and the size of the grid of field {field.name!r} is not "
                         f"known: give --h0 FILE.npy, or --dim {unknown.split(',')[0]}=... "
                         f"(unbound: {unknown}) for random standard-normal starts")
    shape = grid + ((n_free,) if n_free > 1 else ())
    try:        # drawn in float64, then cast: the documented draw
        return np.random.default_rng(args.seed).standard_normal(shape).astype(args.dtype)
    except MemoryError:
        n_bytes = 8.0 * float(np.prod(shape, dtype=np.float64))
        raise UsageError(f"the default h0 of field {field.name!r}, shape {shape}, needs "
                         f"{size_text(n_bytes)} and does not fit in memory: give a smaller "
                         f"--dim, or --h0 FILE.npy") from None


def grid_shape(field, dims: dict[str, int], params: dict, inputs: dict) -> tuple[int, ...] | None:
    """The grid's shape from the dims that --dim and the arrays bind, or None."""
    known = _known_dims(field, dims, params, inputs)
    shape = []
    for axis in field.grid:
        extent = axis.extent
        if isinstance(extent, int):
            shape.append(extent)
        elif extent in known:
            shape.append(known[extent])
        else:
            return None
    return tuple(shape)


def _known_dims(field, dims, params, inputs) -> dict[str, int]:
    known = dict(dims)
    for decl in field.inputs:
        arr = inputs.get(decl.name)
        if arr is None or np.ndim(arr) != len(decl.dims):
            continue
        for extent, size in zip(decl.dims, np.shape(arr)):
            if isinstance(extent, str):
                known.setdefault(extent, int(size))
    # A per-trajectory param has exactly the grid's shape.
    for value in params.values():
        if isinstance(value, np.ndarray) and value.ndim == len(field.grid):
            for axis, size in zip(field.grid, value.shape):
                if isinstance(axis.extent, str):
                    known.setdefault(axis.extent, int(size))
    return known


def _unbound_grid_dims(field, dims, params, inputs) -> list[str]:
    known = _known_dims(field, dims, params, inputs)
    return [a.extent for a in field.grid if isinstance(a.extent, str) and a.extent not in known]


# --- running ----------------------------------------------------------------------------
def _solve(args, source, field, h0, dims, params, inputs):
    import vgpu

    if args.scheduler:
        return _solve_on_cluster(args, source, field, h0, dims, params, inputs)
    bar = progress_bar(field.name, enabled=False if args.quiet else None)   # TTY only
    try:
        return vgpu.solve(program_text(source, args.file), h0, params=params or None,
                          inputs=inputs or None, dims=dims or None, field=args.field,
                          backend=args.backend, dtype=args.dtype, dt=args.dt, steps=args.steps, t0=args.t0,
                          save_every=args.save_every, progress=bar,
                          t1=getattr(args, "t1", None), rtol=getattr(args, "rtol", None),
                          atol=getattr(args, "atol", None), dt0=getattr(args, "dt0", None),
                          dtmax=getattr(args, "dtmax", None),
                          max_steps=getattr(args, "max_steps", None),
                          save_at=_save_at(getattr(args, "save_at", None)), seed=args.seed)
    except VgpuError as err:
        raise attach_file(err, source, args.file)
    finally:
        bar.close()


def _solve_on_cluster(args, source, field, h0, dims, params, inputs):
    """The run on a Dask cluster (vgpu_compiler/distributed): the first grid axis in
    --chunks blocks of whole basins, computed at once; which backend each worker chose
    goes in the summary."""
    import vgpu
    from ..distributed.cluster import client_for, rows_per_block, worker_count
    from ..distributed.ensemble import compute

    grid = (np.shape(h0)[:len(field.grid)] if h0 is not None
            else grid_shape(field, dims, params, inputs))
    try:
        with client_for(args.scheduler) as client:
            blocks = args.chunks or 2 * worker_count(client)
            rows = grid[0] if grid else 1
            unit = int(field.basin[0].extent) if field.basin else 1
            lazy = vgpu.solve(program_text(source, args.file), h0, params=params or None,
                              inputs=inputs or None, dims=dims or None, field=args.field,
                              backend=args.backend, dtype=args.dtype, dt=args.dt,
                              steps=args.steps, t0=args.t0, save_every=args.save_every,
                              t1=getattr(args, "t1", None), rtol=getattr(args, "rtol", None),
                              atol=getattr(args, "atol", None), dt0=getattr(args, "dt0", None),
                              dtmax=getattr(args, "dtmax", None),
                              max_steps=getattr(args, "max_steps", None),
                              save_at=_save_at(getattr(args, "save_at", None)), seed=args.seed,
                              chunks=rows_per_block(rows, blocks, unit))
            return compute(lazy)
    except VgpuError as err:
        raise attach_file(err, source, args.file)


def _save_at(text: str | None):
    """``--save-at T0:T1:N`` (N evenly spaced times) or ``t,t,...``."""
    if text is None:
        return None
    try:
        if ":" in text:
            a, b, n = text.split(":")
            return np.linspace(float(a), float(b), int(n))
        return np.array([float(x) for x in text.split(",")])
    except ValueError:
        raise UsageError(f"--save-at {text}: give T0:T1:N (N evenly spaced times) or a "
                         f"comma-separated list of times") from None


# --- results out --------------------------------------------------------------------------
def solution_arrays(solution) -> dict[str, np.ndarray]:
    """Everything an .npz holds: states, steps_taken, status, t, steps_rejected, outputs,
    observers, history and times."""
    arrays = {"states": solution.states, "steps_taken": solution.steps_taken}
    for name in ("status", "t", "steps_rejected"):
        if getattr(solution, name, None) is not None:
            arrays[name] = getattr(solution, name)
    for name, value in (solution.outputs or {}).items():
        arrays[f"output_{name}" if name in RESERVED else name] = value
    for name, value in (solution.observed or {}).items():
        arrays[f"observed_{name}" if name in RESERVED else name] = value
    if solution.history is not None:
        arrays["history"] = solution.history
        arrays["times"] = solution.times
    return arrays


def _save(path: str | None, solution) -> None:
    """Write ``-o`` atomically (a failed write leaves no partial file)."""
    if not path:
        return
    if path.lower().endswith(".npz"):
        arrays = solution_arrays(solution)
        write_atomically(path, lambda fh: np.savez(fh, **arrays), "-o")
    elif path.lower().endswith(".nc"):
        write_atomically(path, lambda fh: labelled.write_netcdf(solution, fh), "-o")
    else:
        write_atomically(path, lambda fh: np.save(fh, solution.states), "-o")


def _netcdf_ready(path: str) -> None:
    """-o x.nc needs xarray and a netCDF engine (call/labelled.py): say so before the run."""
    try:
        labelled.xarray()
        labelled.netcdf_engine()
    except labelled.MissingDependency as exc:
        raise UsageError(f"-o {path}: {exc}") from None


def _print_summary(field, solution) -> None:
    out = sys.stdout
    states = np.asarray(solution.states)
    names = ", ".join(field.state_names)
    with np.printoptions(threshold=20, edgeitems=3, precision=6):
        print(f"{field.name}: states ({names}), shape {states.shape}", file=out)
        print(states, file=out)
        for name, value in (solution.outputs or {}).items():
            print(f"output {name}, shape {np.shape(value)}:", file=out)
            with np.printoptions(threshold=256):
                print(np.asarray(value), file=out)
        for name, value in (solution.observed or {}).items():
            print(f"observed {name}, shape {np.shape(value)}:", file=out)
            print(np.asarray(value), file=out)
        taken = np.asarray(solution.steps_taken)
        if taken.size:
            print(f"steps taken: min {taken.min()}, max {taken.max()}", file=out)
        if isinstance(solution.backend, np.ndarray):     # a run on a Dask cluster
            ran = dict(zip(*np.unique(solution.backend.astype(str), return_counts=True)))
            where = ", ".join(f"{n} on {b}" for b, n in ran.items())
            print(f"blocks: {len(solution.backend)} ({where})", file=out)
