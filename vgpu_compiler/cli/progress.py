"""A small terminal progress bar, driven by ``progress(done, total)`` callbacks.

Backends call ``progress(steps_done, steps_total)`` between chunks of steps
(see ``runtime.bound.Progress``). ``ProgressBar`` is such a callable: it draws
one line on a terminal and stays silent when its stream is not a TTY, when
``quiet`` is set, or when a run is too short to be worth a bar.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """``bar = ProgressBar(); solve(..., progress=bar); bar.close()``.

    Nothing is drawn before ``delay`` seconds have passed, so quick runs print
    nothing at all; redraws are throttled to ``interval`` seconds.
    """

    def __init__(self, label: str = "", *, stream: TextIO | None = None, quiet: bool = False,
                 width: int = 30, delay: float = 0.3, interval: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and _is_tty(self.stream)
        self.label = label
        self.width = width
        self.delay = delay
        self.interval = interval
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        now = time.monotonic()
        finished = done >= total
        if now - self._start < self.delay and not (finished and self._drawn):
            return
        if now - self._last_draw < self.interval and not finished:
            return
        self._last_draw = now
        self._drawn = True
        self.stream.write("\r" + self.render(done, total, now - self._start))
        self.stream.flush()

    def render(self, done: int, total: int, elapsed: float) -> str:
        """The bar as text, e.g. ``lorenz [#######-------]  45% 450/1000 steps 1.2s``."""
        frac = min(max(done / total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        eta = ""
        if 0.0 < frac < 1.0:
            eta = f" eta {elapsed * (1.0 - frac) / frac:.1f}s"
        label = f"{self.label} " if self.label else ""
        return f"{label}[{bar}] {frac * 100:3.0f}% {done}/{total} steps {elapsed:.1f}s{eta}   "

    def close(self) -> None:
        """End the bar's line (only if something was drawn)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
