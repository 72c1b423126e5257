"""Cache management through the registry: vgpu.cache_info / clear_cache / evict and
`vgpuc cache` reach every backend's caches through ``backends.cached()`` and name no
backend, so a backend registered at run time is managed as the built-in ones are."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np

import vgpu
from vgpu_compiler import backends as registry
from vgpu_compiler.backends import Caches
from vgpu_compiler.cli.system import cache_report

ROOT = Path(__file__).resolve().parent.parent
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
