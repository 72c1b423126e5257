"""A terminal progress bar for ``progress(done, total)`` callbacks, drawn by tqdm.

Backends call ``progress(steps_done, steps_total)`` between chunks of steps
(``call.bound.Progress``): ``done`` is cumulative and never decreases within a
run, and every run ends with ``progress(total, total)`` (the GLSL backend may
report that last one twice). ``bar()`` returns such a callable::

    with bar("lorenz") as progress:
        sol = vgpu.solve(src, h0, progress=progress)

Where it draws: on ``stream`` (``sys.stderr`` by default), only when that is a
terminal, unless ``enabled=True`` forces it (``enabled=False`` silences it, as
``vgpuc run --quiet`` does). Nothing is drawn before ``delay`` seconds (0.3 s,
``DELAY``) have passed, so quick runs print nothing at all; redraws are
throttled by tqdm (at most one each 0.1 s). ``close()`` draws the final state
and ends the line, if anything was drawn.

Who uses it:

- ``vgpuc run`` draws one bar per run, labelled with the field's name.
- ``vgpu.solve(..., progress=True)`` creates ``bar(field_name)``, passes it
  to the backend and closes it after the run (also when the run fails).

tqdm is imported inside ``bar()``, not here, so ``import vgpu`` does not pay
for it.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import TextIO

DELAY = 0.3         # seconds before anything is drawn: quick runs stay silent
UNIT = "steps"


class StepsBar:
    """``progress(done, total)`` driving a tqdm bar (``.tqdm``); see the module."""

    def __init__(self, tqdm_bar) -> None:
        self.tqdm = tqdm_bar

    def __call__(self, done: int, total: int) -> None:
        bar = self.tqdm
        if bar.disable or total <= 0:       # a run of no steps: nothing to show
            return
        if bar.total != total:
            bar.total = total
        if done != bar.n:                   # cumulative in, increments to tqdm (a
            bar.update(done - bar.n)        # decrease, never made by a backend, too)

    def close(self) -> None:
        """Draw the final state and end the line (only if something was drawn)."""
        self.tqdm.close()

    def __enter__(self) -> "StepsBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(label: str = "", *, total: int | None = None, enabled: bool | None = None,
        stream: TextIO | None = None, delay: float | None = None) -> StepsBar:
    """A progress bar for one run: ``progress=bar("lorenz")``, then ``.close()``.

    ``enabled=None`` draws only when ``stream`` (default ``sys.stderr``) is a
    terminal; ``True`` always, ``False`` never. ``total`` may be left to the
    first ``progress(done, total)`` call. ``delay`` defaults to ``DELAY``.
    """
    stream = sys.stderr if stream is None else stream
    if enabled is None:
        enabled = _is_tty(stream)
    # miniters=1: every call (one per chunk of steps, so few) may redraw, at most
    # each mininterval; tqdm's own guess would skip calls after a fast start.
    return StepsBar(_tqdm_class()(total=total, desc=label or None, unit=UNIT, file=stream,
                                  disable=not enabled, delay=DELAY if delay is None else delay,
                                  miniters=1, mininterval=0.1, leave=True,
                                  **(_sizeless_terminal(stream) if enabled else {})))


@functools.cache
def _tqdm_class():
    """tqdm without its monitor thread (needed only for guessed miniters), made on
    first use: importing tqdm here, not at the top, keeps `import vgpu` quick."""
    from tqdm import tqdm

    class _Tqdm(tqdm):
        monitor_interval = 0

    return _Tqdm


def _sizeless_terminal(stream: TextIO) -> dict:
    """A size for a terminal that reports none (a bare pty says 0 x 0), on which
    tqdm would draw nothing at all; {} leaves the size to tqdm."""
    try:
        columns, lines = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):   # not a file, closed, not a terminal
        return {}
    if columns > 0 and lines > 0:
        return {}
    return {"ncols": columns or 80, "nrows": lines or 24}


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):     # no isatty, or a closed stream
        return False
