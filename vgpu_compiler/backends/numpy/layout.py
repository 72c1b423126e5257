"""Where each trajectory lives in the reference backend: (basin, lane).

Every per-trajectory value is an array of shape ``(n_basins, lanes)`` with
``lanes`` the product of the basin shape. The grid is padded up to a multiple
of the basin shape on every axis (basins in row-major order over the padded
grid, lanes in row-major order inside a basin); padded lanes are idle
(``active`` is False) and never count. Without a ``basin`` statement all
trajectories form one group of shape ``(1, N)``.
"""
from __future__ import annotations

import numpy as np

from ...ir.ops import Edge, ReduceOp

INT = np.int32


class Layout:
    def __init__(self, grid_shape: tuple[int, ...], basin_shape: tuple[int, ...] | None,
                 origin: int = 0):
        self.grid_shape = tuple(grid_shape)
        self.n = int(np.prod(grid_shape))
        if basin_shape is None:
            self.basin_shape = (self.n,)
            self.per_axis = (1,)
            coords = np.unravel_index(np.arange(self.n), self.grid_shape)
            self.grid_index = [c.astype(INT).reshape(1, -1) for c in coords]
            self.basin_index = [np.arange(self.n, dtype=INT).reshape(1, -1)]
            self.extent = [np.full((1, 1), self.n)]
        else:
            self._with_basin(tuple(basin_shape))
        self.shape = self.grid_index[0].shape
        self.active = np.ones(self.shape, bool)
        for g, n in zip(self.grid_index, self.grid_shape):
            self.active &= g < n
        clamped = [np.minimum(g, max(n - 1, 0)) for g, n in zip(self.grid_index, self.grid_shape)]
        self.flat = (np.ravel_multi_index(clamped, self.grid_shape) if self.n
                     else np.zeros(self.shape, np.intp))
        self.count = self.active.sum(axis=1, keepdims=True)
        # A window of a larger grid (call/window.py) starts at row ``origin`` of the first
        # axis: the grid index the program sees (``global_index``) and every lane's
        # trajectory number in the whole grid (``trajectory``, row-major) count from it.
        # Everything else here is the window's own (basins are never cut).
        self.origin = origin
        self.global_index = self.grid_index
        if origin:
            self.global_index = [self.grid_index[0] + INT(origin)] + self.grid_index[1:]
        self.trajectory = self.flat.astype(np.int64) + origin * int(np.prod(self.grid_shape[1:]))

    def _with_basin(self, basin: tuple[int, ...]) -> None:
        self.basin_shape = basin
        self.per_axis = tuple(-(-g // b) for g, b in zip(self.grid_shape, basin))
        n_basins, lanes = int(np.prod(self.per_axis)), int(np.prod(basin))
        b_coords = np.unravel_index(np.arange(n_basins), self.per_axis)
        l_coords = np.unravel_index(np.arange(lanes), basin)
        self.basin_index = [lc.astype(INT).reshape(1, -1).repeat(n_basins, 0) for lc in l_coords]
        self.grid_index = [(bc.reshape(-1, 1) * b + lc.reshape(1, -1)).astype(INT)
                           for bc, lc, b in zip(b_coords, l_coords, basin)]
        # the active box of each basin: how many active lanes along each axis
        self.extent = [np.minimum(b, g - bc * b).reshape(-1, 1).astype(np.int64)
                       for bc, b, g in zip(b_coords, basin, self.grid_shape)]

    # --- moving arrays between the grid and the lanes ------------------------
    def to_lanes(self, a: np.ndarray) -> np.ndarray:
        """grid_shape + trailing -> (n_basins, lanes) + trailing (idle lanes copy a neighbour)."""
        a = np.asarray(a)
        trailing = a.shape[len(self.grid_shape):]
        return a.reshape((self.n,) + trailing)[self.flat]

    def to_grid(self, a: np.ndarray) -> np.ndarray:
        """(n_basins, lanes) + trailing -> grid_shape + trailing (active lanes only)."""
        a = np.asarray(a)
        trailing = a.shape[2:]
        out = np.zeros((self.n,) + trailing, a.dtype)
        out[self.flat[self.active]] = a[self.active]
        return out.reshape(self.grid_shape + trailing)

    def per_basin_to_grid(self, a: np.ndarray) -> np.ndarray:
        """(n_basins,) -> grid_shape: every trajectory gets its basin's value."""
        return self.to_grid(np.broadcast_to(np.asarray(a).reshape(-1, 1), self.shape))

    # --- inside a basin -------------------------------------------------------
    def gather(self, values: np.ndarray, index: list, edge: Edge) -> np.ndarray:
        """``s[e1, ...]``: the value at basin position ``index``, after the edge rule."""
        lane = np.zeros(self.shape, np.int64)
        inside = np.ones(self.shape, bool)
        for e, ext, b in zip(index, self.extent, self.basin_shape):
            e = np.broadcast_to(np.asarray(e, np.int64), self.shape)
            if edge is Edge.WRAP:
                e = np.mod(e, ext)
            else:
                if edge is Edge.ZERO:
                    inside &= (e >= 0) & (e < ext)
                e = np.clip(e, 0, ext - 1)
            lane = lane * b + e
        out = np.take_along_axis(values, lane, axis=1)
        if edge is Edge.ZERO:
            out = np.where(inside, out, np.zeros((), values.dtype))
        return out

    def reduce(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """A basin reduction over the active lanes, shape (n_basins, 1)."""
        dtype = values.dtype
        if op is ReduceOp.MIN:
            return np.where(self.active, values, dtype.type(np.inf)).min(axis=1, keepdims=True)
        if op is ReduceOp.MAX:
            return np.where(self.active, values, dtype.type(-np.inf)).max(axis=1, keepdims=True)
        total = np.where(self.active, values, dtype.type(0)).sum(axis=1, keepdims=True)
        if op is ReduceOp.SUM:
            return total
        return total / self.count.astype(dtype)
