"""Cache management through the registry: vgpu.cache_info / clear_cache / evict and
`vgpuc cache` reach every backend's caches through ``backends.cached()`` and name no
backend, so a backend registered at run time is managed as the built-in ones are."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends as registry
from vgpu_compiler.backends import Caches
from vgpu_compiler.cli.system import cache_report

ROOT = Path(__file__).resolve().parents[2]
BACKEND_PACKAGES = ("glsl", "wgpu", "cpu", "numpy")
SRC = "field f { state x\n dx/dt = -x\n solve euler(dt = 0.1, steps = 3) }"


def _named(path: Path, functions: tuple[str, ...] | None = None) -> list[str]:
    """Backend names in ``path``'s imports and string constants (in ``functions`` only,
    when given)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name in functions] if functions else [tree]
    found = []
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.ImportFrom):
                found += [f"import {node.module}" for b in BACKEND_PACKAGES
                          if f"backends.{b}" in (node.module or "")]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [repr(node.value) for b in BACKEND_PACKAGES if node.value == b
                          or f"backends.{b}" in node.value]
    return found


def test_the_api_and_the_cache_command_name_no_backend():
    assert _named(ROOT / "vgpu_compiler" / "api.py") == []
    assert _named(ROOT / "vgpu_compiler" / "cli" / "system.py",
                  ("cache_command", "cache_report")) == []


def test_every_kernel_keeping_builtin_backend_registers_its_caches():
    kinds = {kind for _, c in registry.cached() for kind in c.disk}
    from vgpu_compiler import disk_cache as dc
    assert kinds == set(dc.SUFFIXES)            # every kind of disk entry has an owner
    assert {n for n, _ in registry.cached()} >= {"glsl", "wgpu", "cpu"}


def test_a_backend_registered_at_run_time_is_managed_like_the_others():
    held = {"memory": 3}
    seen = []

    def clear(memory, disk):
        out = {"memory": held["memory"]} if memory else {}
        held["memory"] = 0 if memory else held["memory"]
        return out

    def evict(field, dtype, per_trajectory):
        seen.append((field.name, dtype, per_trajectory))
        return True

    toy = dataclasses.replace(
        registry.get("numpy"), name="toy",
        caches=Caches(clear=clear, evict=evict,
                      info=lambda: {"memory_entries": held["memory"], "memory_capacity": 7}))
    registry.register(toy)
    try:
        info = vgpu.cache_info()
        assert info["toy"] == {"memory_entries": 3, "memory_capacity": 7}
        assert info["memory_entries"] >= 3
        assert "toy 7" in "\n".join(cache_report(info))
        assert vgpu.evict(SRC, dtype="float64") is True
        assert seen == [("f", "float64", None)]
        dropped = vgpu.clear_cache(disk=False)
        assert dropped["toy"] == {"memory": 3} and dropped["memory"] >= 3
        assert vgpu.cache_info()["toy"]["memory_entries"] == 0
        # it runs, too: the registry's backend, chosen by name
        np.testing.assert_array_equal(
            vgpu.run_field(SRC, np.ones((2, 1)), backend="toy"),
            vgpu.run_field(SRC, np.ones((2, 1)), backend="numpy"))
    finally:
        registry.unregister("toy")
    assert "toy" not in vgpu.cache_info()


# --- runtime/kernel_cache.py: the kernel cache every backend keeps its kernels in ---------
def _kernel(key, field_id="", dtype="float32", pt=()):
    from types import SimpleNamespace
    return SimpleNamespace(key=key, field_id=field_id, dtype=dtype, pt=pt)


def test_the_kernel_cache_releases_every_kernel_it_drops_once():
    from vgpu_compiler.call.counters import COUNTERS
    from vgpu_compiler.runtime.kernel_cache import KernelCache
    freed = []
    cache = KernelCache(2, release=lambda k: freed.append(k.key), nbytes=lambda k: 10)
    a, b, c = _kernel("a"), _kernel("b"), _kernel("c")
    before = COUNTERS.snapshot()["evictions"]
    assert cache.put(a) is a and cache.put(b) is b and freed == []
    assert cache.put(_kernel("b")) is b and freed == ["b"]   # another thread's: released
    freed.clear()
    cache.get("a")                               # a used last: b goes first
    cache.put(c)
    assert freed == ["b"] and cache.keys() == ["a", "c"]
    assert cache.evict("a") and not cache.evict("a") and freed == ["b", "a"]
    assert COUNTERS.snapshot()["evictions"] == before + 2
    assert cache.info() == {"memory_entries": 1, "memory_capacity": 2, "memory_bytes": 10}
    assert cache.clear_caches(memory=True, disk=True) == {"memory": 1, "disk": 0}
    assert freed == ["b", "a", "c"] and len(cache) == 0


def test_a_rejected_disk_entry_is_dropped_and_built_once_more(tmp_path):
    from vgpu_compiler import disk_cache as dc
    from vgpu_compiler.call.counters import COUNTERS
    from vgpu_compiler.errors import BackendError
    from vgpu_compiler.runtime.kernel_cache import KernelCache
    disk = dc.JsonCache(tmp_path, kind="glsl", text="glsl", format=1)
    cache = KernelCache(4, disk=disk)
    disk.store("k", "stale text", {})
    built, made = [], []

    def make(mkey, text, meta):
        made.append(text)
        if text != "good text":
            raise RuntimeError("the driver says no")
        return _kernel(mkey)
    c0 = COUNTERS.snapshot()
    kernel = cache.find_or_build("m", "k", lambda: built.append(1) or ("good text", {}),
                                 make, lambda exc: BackendError(str(exc)))
    assert made == ["stale text", "good text"] and built == [1] and kernel.key == "m"
    assert disk.load("k")[0] == "good text"      # replaced by the rebuilt text
    c1 = COUNTERS.snapshot()
    assert (c1["disk_hits"] - c0["disk_hits"], c1["compiles"] - c0["compiles"]) == (1, 1)
    assert cache.find_or_build("m", "k", None, None, None) is kernel    # memory hit
    with pytest.raises(BackendError, match="the driver says no"):       # built, rejected
        cache.find_or_build("m2", "k2", lambda: ("bad text", {}), make,
                            lambda exc: BackendError(str(exc)))
    assert disk.load("k2") is None and cache.get("m2") is None


def test_a_calls_slot_is_trusted_only_while_its_kernel_is_cached():
    from vgpu_compiler.runtime.kernel_cache import KernelCache
    cache, slots, asked = KernelCache(4), {}, []

    def find(ident):
        asked.append(ident)
        return cache.put(_kernel(f"m{len(asked)}"))
    first = cache.for_call(slots, "s", "env", lambda: "ident", find)
    assert cache.for_call(slots, "s", "env", None, None) is first       # the slot's
    cache.evict(first.key)                       # evicted: found again, identity kept
    again = cache.for_call(slots, "s", "env", lambda: "other", find)
    assert again is not first and asked == ["ident", "ident"]
    cache.for_call(slots, "s", "env2", lambda: "other", find)  # the environment changed
    assert asked == ["ident", "ident", "other"]


def test_evict_field_narrows_memory_and_disk_alike(tmp_path):
    from vgpu_compiler import disk_cache as dc
    from vgpu_compiler.frontend.compile import compile_program
    from vgpu_compiler.runtime.kernel_cache import KernelCache, identity
    field = compile_program(SRC, "f.field").program.fields[0]
    other = compile_program(SRC.replace("field f", "field g"), "g.field").program.fields[0]
    disk = dc.JsonCache(tmp_path, kind="glsl", text="glsl", format=1)
    cache = KernelCache(8, disk=disk)
    for f in (field, other):
        for dtype, pt in (("float32", ()), ("float64", ()), ("float32", ("k",))):
            key, fid, _ = identity(f, "compiler", dtype, ",".join(pt))
            disk.store(key, "text", {"dtype": dtype, "pt": list(pt)})
            cache.put(_kernel(key + "-m", fid, dtype, pt))
    assert cache.evict_field(field, "float64") is True
    assert cache.evict_field(field, "float64") is False
    assert cache.evict_field(field, per_trajectory_params=["k"]) is True
    assert len(cache) == 4 and len(disk.entries()) == 4
    assert cache.evict_field(field) is True and cache.evict_field(field) is False
    assert len(cache) == 3 and len(disk.entries()) == 3     # g's three are kept


def test_evict_reaches_the_cpu_backends_kernels_in_memory_and_on_disk():
    if not registry.get("cpu").available()[0]:
        pytest.skip("no C compiler")
    from vgpu_compiler.call.counters import COUNTERS
    src = SRC.replace("field f", "field evicted_on_cpu")
    h0 = np.ones((4, 1))
    want = vgpu.run_field(src, h0, backend="cpu")
    assert vgpu.evict(src, dtype="float64") is False         # never built in float64
    assert vgpu.evict(src) is True and vgpu.evict(src) is False
    before = COUNTERS.snapshot()
    np.testing.assert_array_equal(vgpu.run_field(src, h0, backend="cpu"), want)
    after = COUNTERS.snapshot()
    assert after["compiles"] == before["compiles"] + 1       # compiled again: not on disk
    assert after["disk_hits"] == before["disk_hits"]
