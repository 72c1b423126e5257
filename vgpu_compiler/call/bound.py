"""What a backend receives (a Bound call) and what it returns (a Solution).

``bind.prepare(field, h0, params, inputs, dims, dtype, dt, steps, t0, save_every)``
checks the call against the field and produces its Prepared call (memoised per
signature) and Data; ``prepared.bound(data)`` is the Bound, the whole call in one
object, that backends' runners read. A backend never sees user mistakes in the
call: they are VgpuErrors raised by ``bind``.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field as _field
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from ..errors import ArgumentTypeError, CallError, UnknownNameError
if TYPE_CHECKING:               # (an annotation only: import vgpu loads no IR)
    from ..ir.nodes import Field

# progress(steps_done, steps_total): called by backends between chunks of steps.
Progress = Optional[Callable[[int, int], None]]


@dataclass
class Bound:
    field: Field
    dtype: np.dtype                         # float32 or float64
    grid_shape: tuple[int, ...]
    dims: dict[str, int]                    # every dim symbol of the field, bound
    h0: np.ndarray | None                   # grid_shape + (n_free,), dtype, C order; None if n_free == 0
    params: dict[str, float | np.ndarray]   # every param: a Python float, or a dtype array of grid_shape
    inputs: dict[str, np.ndarray]           # every input, dtype, C order, its declared shape
    output_shapes: dict[str, tuple[int, ...]]
    dt: float
    steps: int
    t0: float
    save_every: int | None = None
    adaptive: "AdaptiveCall | None" = None  # an adaptive method's values (call/adaptive.py)
    save_at: np.ndarray | None = None       # float64, sorted, within [t0, t1]
    seed: int = 0                           # the Philox key of noise: a call argument, never a recompile
    # The Prepared call (call/prepare.py) shared by every call of this one's signature.
    prepared: object = _field(default=None, repr=False, compare=False)
    # A window of a larger grid (call/window.py): the first row of the first grid axis
    # this call runs. grid_shape is the window's; dims (and whole_shape) the whole grid's.
    origin: int = 0

    @property
    def n_trajectories(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def whole_shape(self) -> tuple[int, ...]:
        """The whole grid's shape: grid_shape, unless this call is a window of it."""
        return tuple(self.dims[e] if isinstance(e, str) else int(e)
                     for e in (a.extent for a in self.field.grid))

    @property
    def first_trajectory(self) -> int:
        """The whole grid's flat (row-major) index of this call's first trajectory: the
        one offset every backend adds to a trajectory's index in the call."""
        return self.origin * math.prod(self.grid_shape[1:])

    @property
    def per_trajectory(self) -> tuple[str, ...]:
        """The params passed with one value per trajectory, in declaration order."""
        return tuple(p.name for p in self.field.params
                     if isinstance(self.params[p.name], np.ndarray) and self.params[p.name].ndim)


@dataclass
class Solution:
    states: np.ndarray                      # grid_shape + (n_states,), or grid_shape for one state
    outputs: dict[str, np.ndarray]          # output name -> array of its declared shape
    steps_taken: np.ndarray                 # int32, grid_shape
    history: np.ndarray | None = None       # (n_saved,) + states.shape, when save_every is given
    times: np.ndarray | None = None         # (n_saved,)
    status: np.ndarray | None = None        # int8, grid_shape (ir/controller.py's codes)
    t: np.ndarray | None = None             # the time each trajectory reached, grid_shape
    steps_rejected: np.ndarray | None = None    # int32, grid_shape
    # int32, grid_shape + (number of `when` blocks,): how often each fired per trajectory
    event_counts: np.ndarray | None = None
    backend: str | None = None              # the backend that ran it (set by the API)
    # the names of the states, the grid's axes and the outputs', and the per-trajectory
    # params of the call: what to_xarray labels the arrays with (call/labelled.py)
    labels: object = _field(default=None, repr=False, compare=False)

    # the field's states in declaration order (set by the API): sol["x"] reads one
    state_names: tuple[str, ...] = ()
    # sensitivities= (call/sensitivities.py): grid_shape + (n_states, len(names)) at the
    # final time; with save_at (or save_every), (n_saved,) + that; the names, in order
    sensitivities: np.ndarray | None = None
    history_sensitivities: np.ndarray | None = None
    sensitivity_names: tuple[str, ...] | None = None
    # `observe` statements (call/observers.py): name -> grid_shape array (working dtype)
    observed: dict = _field(default_factory=dict)

    def to_xarray(self):
        """This solution as an ``xarray.Dataset`` labelled by the field (xarray is an
        optional dependency): see call/labelled.py."""
        from .labelled import to_xarray
        return to_xarray(self)

    def __getitem__(self, name: str) -> np.ndarray:
        """``sol["x"]``: the final values of state ``x``, ``states[..., k]`` (the batch's
        shape; ``states`` itself for a field of one state)."""
        return self._state(self.states, name, 'sol["x"]')

    def history_of(self, name: str) -> np.ndarray:
        """The saved values of state ``name`` (save_every or save_at): ``history[..., k]``,
        shape ``(len(times),)`` + the batch's shape."""
        if self.history is None:
            raise CallError("this Solution has no history: pass save_every or save_at to "
                            "vgpu.solve to keep one")
        return self._state(self.history, name, "history_of")

    def _state(self, array, name, what: str):
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{what} takes a state's name (a str), got "
                                    f"{type(name).__name__} {name!r}; index sol.states for "
                                    f"positions")
        names = self.state_names
        if name not in names:
            listed = ", ".join(names) if names else "none (this Solution has no state names)"
            output = (f" ({name} is an output: sol.outputs[{name!r}])"
                      if name in (self.outputs or {}) else "")
            raise UnknownNameError(f"no state named {name!r}{output}; the states are: "
                                   f"{listed}")
        return array if len(names) == 1 else array[..., names.index(name)]


@dataclass(frozen=True)
class AdaptiveCall:
    """An adaptive method's arguments in force for one call (program values, defaults
    and call-time overrides resolved; checked)."""
    t1: float
    rtol: float
    atol: float
    dt0: float | None                       # None: Hairer's starting step
    dtmax: float
    max_steps: int


def saved_steps(steps: int, every: int) -> list[int]:
    """The steps whose state a history keeps: 0, k, 2k, ... and the last one."""
    saved = list(range(0, steps + 1, every))
    if saved[-1] != steps:
        saved.append(steps)
    return saved
