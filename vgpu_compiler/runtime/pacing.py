"""How a run is split into dispatches, and how many steps each one gets.

A chunk's first dispatch gets a fixed budget of work (``first_steps``: a number of
trajectory-stages, or a backend's own first size); later ones are sized from the
measured time (``Pacer.record``) so that each takes about ``TARGET_SECONDS``: long
enough that the sync after each dispatch costs little, short enough for GPU watchdogs
(which kill dispatches of a few seconds) and for a lively progress bar. A dispatch grows
at most 4x over the one before, never past ``cap`` (a loop limiter's bound, or a forced
limit), never below one step. On a CPU renderer (no watchdog) a backend may aim at
``TARGET_CPU_SECONDS`` instead (fewer syncs).

A dispatch also costs a fixed time whatever its steps (``overhead``: each trajectory's
carried state loaded and stored, the launch, the sync), which grows with the number of
trajectories: llvmpipe, about 0.1-0.2 us per trajectory, 0.1-0.2 s a dispatch at a
million. Aiming the whole dispatch at ``aim`` then starves it (at a million, one step a
dispatch: mostly overhead). The Pacer estimates the overhead from two dispatches of
different sizes (time = overhead + steps x per-step) and aims at the larger of ``aim``
and ``OVERHEAD_RATIO + 1`` times the overhead (so the steps take at least
``OVERHEAD_RATIO`` times what the overhead does), at most ``MAX_STRETCH`` times ``aim``.

The result never depends on where the integration is split: the state waits in its
buffer, exactly. ``segments`` and ``history_end`` say where the splits fall (every
saved step ends a dispatch; a history block ends one when its buffer is full).

Used by the adaptive and fixed-step drivers (adaptive.py, fixed.py, for glsl, wgpu and cpu)
and the Simulation sessions (fixed_session.py, adaptive_session.py, shader/located.py);
an adaptive run paces attempts the same way it paces steps.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

TARGET_SECONDS = 0.2            # a dispatch's time on a GPU (watchdogs kill long ones)
TARGET_CPU_SECONDS = 1.0        # on a CPU renderer (no watchdog; fewer syncs)
GROWTH = 4                      # a dispatch is at most this many times the one before
OVERHEAD_RATIO = 4              # a dispatch's steps take at least this times its overhead
MAX_STRETCH = 8                 # ... but a dispatch aims at no more than this times ``aim``
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


def paced(steps: int, seconds: float, current: int, aim: float, cap: int | None,
          overhead: float = 0.0) -> int:
    """The next dispatch's size after one of ``steps`` took ``seconds``: aimed at
    ``aim`` seconds, at most GROWTH times ``current`` and ``cap``, at least 1; ``current``
    unchanged when nothing was measured (no steps, or no time). With ``overhead`` (the
    seconds a dispatch costs whatever its steps, < ``seconds``) the steps' own time is
    ``seconds - overhead`` and the aim at least (OVERHEAD_RATIO + 1) x overhead, at
    most MAX_STRETCH x ``aim``."""
    if steps <= 0 or seconds <= 0:
        return current
    if 0 < overhead < seconds:
        goal = min(max(aim, (OVERHEAD_RATIO + 1) * overhead), MAX_STRETCH * aim)
        want = int(max(0.0, goal - overhead) * steps / (seconds - overhead))
    else:
        want = int(steps * aim / seconds)
    return max(1, min(want, GROWTH * current, cap or want))


def overhead_of(a: tuple[int, float], b: tuple[int, float]) -> float | None:
    """A dispatch's fixed seconds from two measured (steps, seconds) on the line
    seconds = overhead + steps x per-step; None when they cannot tell (sizes within 25%
    of each other, or a per-step time <= 0: noise, or a cost that changed in between)."""
    (s1, t1), (s2, t2) = a, b
    if 4 * abs(s2 - s1) < max(s1, s2):
        return None
    per = (t2 - t1) / (s2 - s1)
    if per <= 0:
        return None
    return min(max(0.0, t2 - per * s2), t1, t2)


class Pacer:
    """Steps (or attempts) per dispatch: ``steps`` now, ``record`` after each dispatch;
    ``overhead``: the fixed seconds of a dispatch, as last estimated (overhead_of the
    last two measured dispatches whose sizes tell it, falling at most by half a
    dispatch; 0 until then)."""

    __slots__ = ("cap", "aim", "steps", "overhead", "last")

    def __init__(self, first: int, cap: int | None, aim: float | None = None):
        self.cap, self.aim = cap, TARGET_SECONDS if aim is None else aim
        self.steps = capped(first, cap)
        self.overhead, self.last = 0.0, None

    def record(self, steps: int, seconds: float) -> None:
        if steps > 0 and seconds > 0:
            if self.last is not None:
                # at most halved a dispatch: a per-step cost that rose in between (events
                # starting to fire) reads as a smaller overhead
                est = overhead_of(self.last, (steps, seconds))
                if est is not None:
                    self.overhead = max(est, self.overhead / 2)
            self.last = (steps, seconds)
        self.steps = paced(steps, seconds, self.steps, self.aim, self.cap, self.overhead)


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
