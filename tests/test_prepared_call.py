"""The per-call path: call/lru.py (the one bounded cache), call/prepare.py (signature -> Prepared call -> a backend's run(prepared, data))."""
from __future__ import annotations

import threading

from vgpu_compiler.call.lru import LRU


def test_least_recently_used_goes_first_and_is_handed_over():
    dropped = []
    cache = LRU(2, on_evict=lambda v, pushed: dropped.append((v, pushed)))
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1              # a is now the most recent
    cache.put("c", 3)
    assert dropped == [(2, True)] and cache.keys() == ["a", "c"]
    assert cache.put("a", 10) == 1 and dropped[-1] == (10, False)   # kept; the new refused
    assert cache.pop("c") == 3 and dropped[-1] == (3, False)
    cache.resize(1)
    assert len(cache) == 1 and cache.capacity == 1
    assert cache.clear() == [1] and len(cache) == 0


def test_threads_that_race_to_store_get_one_value():
    cache, got = LRU(8), []

    def store(v):
        got.append(cache.put("k", v))

    threads = [threading.Thread(target=store, args=(object(),)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(v) for v in got}) == 1 and cache.get("k") is got[0]
