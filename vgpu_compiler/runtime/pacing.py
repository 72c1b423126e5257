"""How a run is split into dispatches, and how many steps each one gets.

A chunk's first dispatch gets a fixed budget of work (``first_steps``: a number of
trajectory-stages, or a backend's own first size); later ones are sized from the
measured time (``Pacer.record``) so that each takes about ``TARGET_SECONDS``: long
enough that the sync after each dispatch costs little, short enough for GPU watchdogs
(which kill dispatches of a few seconds) and for a lively progress bar. A dispatch grows
at most 4x over the one before, never past ``cap`` (a loop limiter's bound, or a forced
limit), never below one step. On a CPU renderer (no watchdog) a backend may aim at
``TARGET_CPU_SECONDS`` instead (fewer syncs).

The result never depends on where the integration is split: the state waits in its
buffer, exactly. ``segments`` and ``history_end`` say where the splits fall (every
saved step ends a dispatch; a history block ends one when its buffer is full).

Used by the adaptive and fixed-step drivers (adaptive.py, fixed.py, for glsl and wgpu),
glsl's and wgpu's session.py and adaptive_session.py; an adaptive run paces attempts the
same way it paces steps.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

TARGET_SECONDS = 0.2            # a dispatch's time on a GPU (watchdogs kill long ones)
TARGET_CPU_SECONDS = 1.0        # on a CPU renderer (no watchdog; fewer syncs)
GROWTH = 4                      # a dispatch is at most this many times the one before
_UNCAPPED = 1 << 30


def target(software: bool) -> float:
    """The seconds a dispatch aims at: ``TARGET_CPU_SECONDS`` on a CPU renderer."""
    return TARGET_CPU_SECONDS if software else TARGET_SECONDS


def first_steps(work: int, count: int, stages: int, cap: int | None) -> int:
    """The steps of a chunk's first dispatch: ``work`` trajectory-stages over ``count``
    trajectories of ``stages`` stages a step, at least 1, at most ``cap``."""
    return max(1, min(work // max(1, count * stages), cap or _UNCAPPED))


def capped(steps: int, cap: int | None) -> int:
    """``steps`` within [1, cap] (``cap`` None or 0: no bound)."""
    return max(1, min(steps, cap) if cap else steps)


def paced(steps: int, seconds: float, current: int, aim: float, cap: int | None) -> int:
    """The next dispatch's size after one of ``steps`` took ``seconds``: aimed at
    ``aim`` seconds, at most GROWTH times ``current`` and ``cap``, at least 1; ``current``
    unchanged when nothing was measured (no steps, or no time)."""
    if steps <= 0 or seconds <= 0:
        return current
    want = int(steps * aim / seconds)
    return max(1, min(want, GROWTH * current, cap or want))


class Pacer:
    """Steps (or attempts) per dispatch: ``steps`` now, ``record`` after each dispatch."""

    __slots__ = ("cap", "aim", "steps")

    def __init__(self, first: int, cap: int | None, aim: float | None = None):
        self.cap, self.aim = cap, TARGET_SECONDS if aim is None else aim
        self.steps = capped(first, cap)

    def record(self, steps: int, seconds: float) -> None:
        self.steps = paced(steps, seconds, self.steps, self.aim, self.cap)


def segments(end: int, pacer: Pacer, stops: Iterable[int] | None = None,
             start: int = 0) -> Iterator[tuple[int, int]]:
    """(first step, end step) of each dispatch of steps [start, end), each at most
    ``pacer.steps`` long (read at each split, so a ``record`` in between counts); every
    step of ``stops`` (the saved steps) ends one. With stops, or no steps at all, a
    dispatch of no steps comes first (a history keeps the start state)."""
    stops = set(stops or ())
    if stops or start == end:
        yield start, start
    s0 = start
    for stop in sorted(stops | {end}):
        while s0 < stop:
            s1 = min(s0 + pacer.steps, stop)
            yield s0, s1
            s0 = s1


def history_end(s0: int, steps: int, every: int, room: int, pace: int) -> int:
    """Where a dispatch of a history run from step ``s0`` ends: after ``pace`` steps, at
    the run's end, or when ``room`` saved slots (one each ``every`` steps) are full."""
    return min(steps, s0 + pace, (s0 // every + room) * every)
