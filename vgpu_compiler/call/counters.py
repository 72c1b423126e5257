"""Process-wide counters of the runtime, readable from Python (``vgpu.cache_stats()``)."""
from __future__ import annotations

import os
import threading

NAMES = ("compiles", "memory_hits", "disk_hits", "dispatches", "evictions", "cpu_fallbacks",
         "parses", "parse_hits")


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(NAMES, 0)
        self._tallies: list[tuple[str, list]] = []     # (name, [count]): tally()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n

    def add_both(self, first: str, second: str) -> None:
        """add(first) and add(second) under one taking of the lock."""
        with self._lock:
            values = self._values
            values[first] += 1
            values[second] += 1

    def tally(self, name: str) -> list:
        """A one-item list counted in ``name`` (its value added at each snapshot): a hot
        path's count, kept without this lock (``t[0] += 1``: 0.03 us, add 0.2 us) by an
        owner that writes it under a lock of its own, one writer at a time (a replay's
        plan, call/replay.py); ``untally(t)`` when it is dropped, under that lock."""
        t = [0]
        with self._lock:
            self._tallies.append((name, t))
        return t

    def untally(self, t: list) -> None:
        """Fold tally ``t`` into its counter and stop reading it."""
        with self._lock:
            for i, (name, mine) in enumerate(self._tallies):
                if mine is t:
                    del self._tallies[i]
                    self._values[name] += t[0]
                    return

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            values = dict(self._values)
            for name, t in self._tallies:
                values[name] += t[0]
            return values

    def reset(self) -> None:
        with self._lock:
            # a tally counts on from its value now (its owner's lock is not held here)
            self._values = dict.fromkeys(NAMES, 0)
            for name, t in self._tallies:
                self._values[name] -= t[0]


COUNTERS = Counters()
# A forked child gets a fresh lock: the old one may be held by a thread it does not have.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: setattr(COUNTERS, "_lock", threading.Lock()))
