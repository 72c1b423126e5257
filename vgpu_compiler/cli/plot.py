"""Pictures of a solution for ``vgpuc run --plot`` (matplotlib, an optional extra).

- two or more states: a phase portrait, the first two states of every
  trajectory's final state as a scatter;
- one state: the distribution of the final state, as a histogram;
- with a history (``--save-every``): a panel with the states over time
  for a few trajectories;
- every one-dimensional output (``flux`` into ``output counts[32]``): a panel
  with its values as bars, one per slot (a histogram field's bins);
- every two-dimensional output (``output raster[N, 100]``): a panel with its
  values as an image, rows down (a spike raster: neuron x time bin).
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from ..errors import VgpuError
from .common import write_atomically

# Trajectories drawn in the history panel, and points in the scatter (sampled evenly).
MAX_LINES = 16
MAX_POINTS = 200_000
MAX_OUTPUT_PANELS = 2


class PlotError(VgpuError):
    """The plot cannot be drawn (matplotlib missing, or nothing to draw)."""


def require(path: str | None = None) -> None:
    """Fail early (before a long run) when matplotlib is missing, or does not know the
    format that ``path``'s suffix names."""
    _matplotlib()
    fmt = _format(path) if path else None
    if fmt is not None:
        from matplotlib.backend_bases import FigureCanvasBase

        known = FigureCanvasBase.get_supported_filetypes()
        if fmt not in known:
            raise PlotError(f"--plot {path}: matplotlib cannot write .{fmt} files "
                            f"(it writes {', '.join('.' + k for k in sorted(known))})")


def _format(path: str) -> str | None:
    """The picture's format, from the suffix (None: matplotlib's default, png)."""
    suffix = os.path.splitext(path)[1]
    return suffix[1:].lower() or None


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plot needs matplotlib, which is not installed; "
                        "install it with `pip install vgpu[plot]` (or `pip install matplotlib`)"
                        ) from None
    return matplotlib


def _pyplot():
    matplotlib = _matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _per_trajectory(states: np.ndarray, n_states: int) -> np.ndarray:
    """Final states as (n_trajectories, n_states)."""
    return np.asarray(states, dtype=np.float64).reshape(-1, n_states)


def _sample(n: int, limit: int) -> np.ndarray:
    if n <= limit:
        return np.arange(n)
    return np.linspace(0, n - 1, limit).astype(np.int64)


def _draw_final(ax, flat: np.ndarray, names: Sequence[str]) -> None:
    finite = np.isfinite(flat).all(axis=1)
    flat = flat[finite]
    if flat.shape[1] >= 2:
        pts = flat[_sample(len(flat), MAX_POINTS)]
        size = 6.0 if len(pts) < 2_000 else 2.0 if len(pts) < 50_000 else 0.5
        ax.scatter(pts[:, 0], pts[:, 1], s=size, alpha=0.6, linewidths=0)
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        ax.set_title(f"final state, {len(flat)} trajectories")
    else:
        ax.hist(flat[:, 0], bins=min(100, max(10, int(np.sqrt(len(flat))))))
        ax.set_xlabel(names[0])
        ax.set_ylabel("trajectories")
        ax.set_title(f"distribution of {names[0]}, {len(flat)} trajectories")


def _draw_history(ax, history: np.ndarray, times: np.ndarray, names: Sequence[str]) -> None:
    n_states = len(names)
    hist = np.asarray(history, dtype=np.float64).reshape(len(times), -1, n_states)
    picks = _sample(hist.shape[1], MAX_LINES)
    for s, name in enumerate(names[:4]):
        color = f"C{s}"
        for k, traj in enumerate(picks):
            ax.plot(times, hist[:, traj, s], color=color, lw=0.8, alpha=0.7,
                    label=name if k == 0 else None)
    ax.set_xlabel("t")
    ax.set_title(f"history of {len(picks)} trajectories")
    ax.legend(loc="best", fontsize="small")


def _draw_bars(ax, name: str, values: np.ndarray) -> None:
    values = np.asarray(values, dtype=np.float64)
    ax.bar(np.arange(len(values)), values, width=1.0, align="edge", edgecolor="white",
           linewidth=0.5)
    ax.set_xlim(0, len(values))
    ax.set_xlabel(f"slot of {name}")
    ax.set_ylabel(name)
    ax.set_title(f"output {name}: {len(values)} slots, total {values.sum():g}")


def _draw_image(ax, name: str, values: np.ndarray) -> None:
    values = np.asarray(values, dtype=np.float64)
    ax.imshow(values, aspect="auto", interpolation="nearest", cmap="Greys", origin="upper")
    ax.set_xlabel(f"{name}[.., j]")
    ax.set_ylabel(f"{name}[i, ..]")
    ax.set_title(f"output {name}: {values.shape[0]} x {values.shape[1]}, "
                 f"total {values.sum():g}")


def _bar_outputs(outputs: dict | None) -> list[tuple[str, np.ndarray]]:
    """The one- and two-dimensional outputs, drawn as bars or an image (the first
    MAX_OUTPUT_PANELS)."""
    found = [(k, v) for k, v in (outputs or {}).items() if np.ndim(v) in (1, 2) and np.size(v)]
    return found[:MAX_OUTPUT_PANELS]


def plot_solution(path: str, states: np.ndarray, state_names: Sequence[str], *,
                  history: np.ndarray | None = None, times: np.ndarray | None = None,
                  outputs: dict | None = None, title: str | None = None) -> None:
    """Write a PNG (or any format matplotlib knows from the suffix) to ``path``."""
    plt = _pyplot()
    names = list(state_names)
    if not names or np.size(states) == 0:
        raise PlotError("--plot: the field has no state to draw")
    flat = _per_trajectory(states, len(names))
    with_history = history is not None and times is not None
    bars = _bar_outputs(outputs)
    panels = 1 + with_history + len(bars)
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 5), squeeze=False)
    try:
        _draw_final(axes[0, 0], flat, names)
        if with_history:
            _draw_history(axes[0, 1], history, times, names)
        for k, (name, values) in enumerate(bars):
            draw = _draw_bars if np.ndim(values) == 1 else _draw_image
            draw(axes[0, 1 + with_history + k], name, values)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        try:            # atomically: a failed write leaves no partial picture
            write_atomically(path, lambda fh: fig.savefig(fh, format=_format(path),
                                                          dpi=110), "--plot")
        except ValueError as exc:
            raise PlotError(f"--plot: cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)
