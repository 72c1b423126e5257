"""One bounded, thread-safe least-recently-used mapping for every cache of the call path
(the parse cache, the prepared calls, the GLSL backend's compiled kernels).

``put`` keeps the value already there when another thread stored one first, and hands
what it pushed out (or refused) to ``on_evict`` outside the lock, so that releasing a
GL object never runs under it. After ``os.fork`` the child gets fresh locks: a parent
thread may have held one at the fork.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    def __init__(self, capacity: int, on_evict: Callable[[V, bool], None] | None = None):
        self.capacity = max(1, int(capacity))
        self.on_evict = on_evict    # on_evict(value, pushed_out): for each value that put,
                                    # resize or pop drops (pushed_out: for room)
        self._lock = threading.Lock()
        self._items: OrderedDict = OrderedDict()
        _ALL.add(self)

    def get(self, key: Hashable) -> V | None:
        # Without the lock: each OrderedDict operation is one step under the GIL (C code
        # calling no Python), and a key another thread drops between the two steps is a
        # hit made just before the drop. The per-call path does three of these.
        items = self._items
        hit = items.get(key)
        if hit is not None:
            try:
                items.move_to_end(key)
            except KeyError:
                pass
        return hit

    def put(self, key: Hashable, value: V) -> V:
        """Store ``value`` (or return the one another thread stored first); the least
        recently used beyond capacity go to ``on_evict``."""
        with self._lock:
            have = self._items.get(key)
            if have is not None:
                refused, value, dropped = [value], have, []
            else:
                self._items[key] = value
                refused, dropped = [], self._trim()
        self._dropped(refused, False)
        self._dropped(dropped, True)
        return value

    def pop(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.pop(key, None)
        if value is not None:
            self._dropped([value], False)
        return value

    def clear(self) -> list[V]:
        """Forget every value; returns them (the caller releases what they own)."""
        with self._lock:
            values = list(self._items.values())
            self._items.clear()
        return values

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, int(capacity))
            dropped = self._trim()
        self._dropped(dropped, True)

    def keys(self) -> list:
        with self._lock:
            return list(self._items)

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def _trim(self) -> list[V]:
        dropped = []
        while len(self._items) > self.capacity:
            dropped.append(self._items.popitem(last=False)[1])
        return dropped

    def _dropped(self, values: list[V], pushed_out: bool) -> None:
        if self.on_evict is not None:
            for v in values:
                self.on_evict(v, pushed_out)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


_ALL: "weakref.WeakSet[LRU]" = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: [c._after_fork_in_child() for c in list(_ALL)])
