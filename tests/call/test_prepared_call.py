"""The per-call path: call/lru.py (the one bounded cache of the path) and call/prepare.py
(signature -> memoised Prepared call -> a backend's run(prepared, data, progress))."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np

import vgpu
from field_examples import LORENZ, MATMUL
from vgpu_compiler.backends import get as backend
from vgpu_compiler.call import prepare as prep
from vgpu_compiler.call.bind import _bind, prepare
from vgpu_compiler.call.counters import COUNTERS
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


# --- signature -> Prepared -> run(prepared, data) ---------------------------------------


RNG = np.random.default_rng(3)


def _field(src):
    return vgpu.compile(src).select(None)


def test_one_prepared_call_per_signature_with_each_calls_own_data():
    field = _field(LORENZ)
    h1, h2 = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))
    p1, d1 = prepare(field, h1, {"rho": 20.0})
    p2, d2 = prepare(field, h2, {"rho": 30.0})
    assert p1 is p2 and p1.slots is p2.slots
    np.testing.assert_array_equal(d2.h0, h2.astype(np.float32))
    assert d1.params["rho"] == 20.0 and d2.params["rho"] == 30.0
    full = _bind(field, h2, {"rho": 30.0}, None, None, "float32", None, None, None, None)
    again = p2.bound(d2)
    assert again.prepared is p2
    for name in ("grid_shape", "dims", "output_shapes", "dt", "steps", "t0", "dtype"):
        assert getattr(again, name) == getattr(full, name), name
    np.testing.assert_array_equal(again.h0, full.h0)
    assert again.params == full.params
    assert prepare(field, RNG.normal(size=(6, 3)))[0] is not p1           # a new shape


def test_a_prepared_call_keeps_no_users_data():
    field = _field(MATMUL)
    A = RNG.normal(size=(4, 4)).astype(np.float32)
    ref = weakref.ref(A)
    prepared, data = prepare(field, inputs={"A": A, "B": A.copy()})
    assert data.inputs["A"] is A                 # float32, C order: not copied
    del A, data
    gc.collect()
    assert ref() is None and prepared.template.inputs == {"A": None, "B": None}


def test_the_prepared_calls_are_bounded():
    field = _field(LORENZ)
    for n in range(1, prep.CAPACITY + 10):
        prepare(field, np.zeros((n, 3)))
    assert len(prep._memo) <= prep.CAPACITY


def test_every_backend_runs_a_prepared_call_like_the_reference():
    field = _field(LORENZ)
    h0 = RNG.normal(size=(40, 3))
    prepared, data = prepare(field, h0, steps=25)
    want = backend("numpy").run(prepared, data).states
    for name in ("glsl",):
        if backend(name).available()[0]:
            np.testing.assert_allclose(backend(name).run(prepared, data).states, want,
                                       rtol=1e-5, atol=1e-5)


def test_glsl_keeps_its_kernel_and_identity_in_the_prepared_calls_slot(glsl, monkeypatch):
    src = LORENZ + "\n# a text of its own: test_prepared_call\n"
    h0 = RNG.normal(size=(9, 3)).astype(np.float32)
    digests = []
    from vgpu_compiler.runtime import kernel_cache
    real = kernel_cache.canonical
    monkeypatch.setattr(kernel_cache, "canonical", lambda f: digests.append(f) or real(f))
    want = vgpu.run_field(src, h0, backend="numpy", steps=5)
    first = vgpu.run_field(src, h0, backend="glsl", steps=5)
    prepared, _ = prepare(_field(src), h0, steps=5)
    env, kernel, base, ident = prepared.slots["glsl"]
    assert glsl.MEMORY.get(base.key) is base and ident[0] == base.disk_key
    hits = COUNTERS.snapshot()["memory_hits"]
    for _ in range(3):
        np.testing.assert_array_equal(vgpu.run_field(src, h0 * 1, backend="glsl", steps=5),
                                      first)
    assert COUNTERS.snapshot()["memory_hits"] == hits + 3
    assert len(digests) == 1                     # the field was digested once, not per call
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)
    glsl.MEMORY.evict(base.key)                  # evicted: the slot is not trusted
    np.testing.assert_array_equal(vgpu.run_field(src, h0, backend="glsl", steps=5), first)
    assert prepared.slots["glsl"][2] is not base and len(digests) == 1


def test_calls_no_signature_describes_digest_the_field_once(glsl, monkeypatch):
    """A list h0 gets a Prepared of its own every call; the field's identity is kept per
    field object all the same (digesting it is linear in the IR)."""
    src = LORENZ + "\n# a text of its own: unsigned calls\n"
    digests = []
    from vgpu_compiler.runtime import kernel_cache
    real = kernel_cache.canonical
    monkeypatch.setattr(kernel_cache, "canonical", lambda f: digests.append(f) or real(f))
    h0 = RNG.normal(size=(4, 3)).tolist()
    want = vgpu.run_field(src, h0, backend="numpy", steps=3)
    for _ in range(3):
        np.testing.assert_allclose(vgpu.run_field(src, h0, backend="glsl", steps=3), want,
                                   rtol=1e-5, atol=1e-6)
    assert len(digests) == 1
