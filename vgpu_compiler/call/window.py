"""A window of a call: rows [start, stop) of the first grid axis of a larger grid.

A call made with ``window=Window(start, stop, rows)`` runs only those rows of a
grid that has ``rows`` rows, and gives exactly what the same rows of the whole
call give, bit for bit: its arrays (h0 and the params passed per trajectory) hold
only the window's rows, while everything else is the whole grid's:
- dim symbols keep their whole-grid values (an expression using ``N`` sees the
  whole ``N``; outputs have their whole shapes);
- the grid index of the first axis counts from ``start`` (``i`` is global), and
  so does every trajectory's flat index (``Bound.origin``, the one source of a
  trajectory's global identity in every backend);
- a basin is never cut: ``start`` is a multiple of the basin's extent on the
  first axis, and ``stop`` is too, or is the end of the grid.

This is how an ensemble is split into blocks that run apart (vgpu_compiler/
distributed runs one block per Dask task): the blocks' states, steps and
histories put side by side are those of the whole run, and their flux outputs
add up to the whole run's (exactly when the contributions sum exactly, e.g.
counts; otherwise up to the order of the float additions).

Where the window sits is a number passed with the call's data (``Data.origin``),
never part of its signature: every window of one length shares one Prepared call
and one compiled kernel (the GLSL backend passes it as a uniform).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentTypeError, CallError


@dataclass(frozen=True)
class Window:
    """Rows [start, stop) of the first grid axis of a grid with ``rows`` rows."""

    start: int
    stop: int
    rows: int

    def __post_init__(self):
        for name in ("start", "stop", "rows"):
            v = getattr(self, name)
            if type(v) is not int:
                raise ArgumentTypeError(f"window {name} must be an int, got {v!r}")
        if not 0 <= self.start <= self.stop <= self.rows:
            raise CallError(f"window rows [{self.start}, {self.stop}) do not lie in a grid "
                            f"of {self.rows} rows")

    @property
    def length(self) -> int:
        return self.stop - self.start

    def shape(self, whole: tuple[int, ...]) -> tuple[int, ...]:
        """The window's part of a whole grid shape (or of an array of it)."""
        return (self.length,) + tuple(whole[1:])

    def check(self, field, grid_shape: tuple[int, ...]) -> None:
        """The window against the whole grid of a call: its rows, and whole basins."""
        if not grid_shape:
            raise CallError(f"field {field.name} has no grid axis to take a window of")
        if grid_shape[0] != self.rows:
            raise CallError(f"a window of a grid of {self.rows} rows, but the call's grid "
                            f"has {grid_shape[0]} rows on its first axis")
        rows = int(field.basin[0].extent) if field.basin else 1
        if self.start % rows or (self.stop % rows and self.stop != self.rows):
            raise CallError(f"window rows [{self.start}, {self.stop}) cut a basin of field "
                            f"{field.name}: they must be multiples of {rows} (the basin's "
                            f"extent on the first grid axis), or end the grid")


def check_origin(prepared, window: Window) -> None:
    """A window at a new place, for a Prepared call of its length: whole basins."""
    window.check(prepared.field, (window.rows,) + tuple(prepared.grid_shape[1:]))
