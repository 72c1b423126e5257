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

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n

    def add_both(self, first: str, second: str) -> None:
        """add(first) and add(second) under one taking of the lock."""
        with self._lock:
            values = self._values
            values[first] += 1
            values[second] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def reset(self) -> None:
        with self._lock:
            self._values = dict.fromkeys(NAMES, 0)


COUNTERS = Counters()
# A forked child gets a fresh lock: the old one may be held by a thread it does not have.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: setattr(COUNTERS, "_lock", threading.Lock()))
