"""An adaptive method's call with save_at, and an adaptive Simulation, run the field's
dense variant (adaptive_host.kernel_field): the kernel that writes save_at states. A
call of the same signature without save_at runs the kernel without that code. Each
keeps its own slot in the call's Prepared and its own disk entry, so neither is ever
handed the other's kernel, in one process or the next; ``evict`` drops both."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import vgpu

VDP = """
field vdp {
    param mu = 1.0
    state x, y
    dx/dt = y
    dy/dt = mu * (1 - x^2) * y - x
    solve dopri5(t1 = 6)
}
"""


def _problem(n=41):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 2)) * 2, np.linspace(0.3, 4.0, n)


@pytest.mark.parametrize("backend", ["glsl", "wgpu"])
def test_a_simulation_after_a_plain_solve_reads_its_states(backend, request):
    request.getfixturevalue(backend)
    h0, mu = _problem()
    ref = vgpu.solve(VDP, h0, params={"mu": mu}, backend="numpy", save_at=[1.0, 2.5])
    plain = vgpu.solve(VDP, h0, params={"mu": mu}, backend=backend)    # the plain kernel
    sim = vgpu.Simulation(VDP, h0, params={"mu": mu}, backend=backend)
    sim.advance(until=1.0)
    np.testing.assert_allclose(sim.states, ref.history[0], rtol=1e-3, atol=1e-3)
    sim.advance(until=2.5)
    np.testing.assert_allclose(sim.states, ref.history[1], rtol=1e-3, atol=1e-3)
    saved = vgpu.solve(VDP, h0, params={"mu": mu}, backend=backend, save_at=[1.0, 2.5])
    np.testing.assert_allclose(saved.history, ref.history, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(saved.states, plain.states)   # saving changes no step


_CHILD = """
import sys, numpy as np, vgpu
sys.path.insert(0, {tests!r})
from test_kernel_variants import VDP, _problem
h0, mu = _problem()
ref = vgpu.solve(VDP, h0, params={{"mu": mu}}, backend="numpy", save_at=[1.0])
if sys.argv[1] == "first":
    sim = vgpu.Simulation(VDP, h0, params={{"mu": mu}}, backend="glsl")
    sim.advance(until=1.0)
    vgpu.clear_cache()                      # then the plain kernel is built and stored
    vgpu.solve(VDP, h0, params={{"mu": mu}}, backend="glsl")
else:
    sim = vgpu.Simulation(VDP, h0, params={{"mu": mu}}, backend="glsl")
    sim.advance(until=1.0)
print(float(np.abs(sim.states - ref.history[0]).max()))
"""


def test_the_disk_cache_keeps_the_variants_apart(glsl, tmp_path):
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path / "cache"))
    code = _CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
    for stage in ("first", "second"):       # the second process reads the first's cache
        out = subprocess.run([sys.executable, "-c", code, stage], env=env, text=True,
                             capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert float(out.stdout.split()[-1]) < 1e-3, (stage, out.stdout)


@pytest.mark.parametrize("backend", ["glsl", "wgpu"])
def test_evict_drops_the_save_at_kernel_too(backend, request):
    request.getfixturevalue(backend)
    h0 = np.tile([2.0, 0.0], (4, 1))
    vgpu.solve(VDP, h0, backend=backend, save_at=[1.0, 2.0])
    assert vgpu.evict(VDP)
    before = vgpu.cache_stats()
    vgpu.solve(VDP, h0, backend=backend, save_at=[1.0, 2.0])
    after = vgpu.cache_stats()              # nothing was left, in memory or on disk
    assert after["compiles"] == before["compiles"] + 1
    assert after["memory_hits"] == before["memory_hits"]
    assert after["disk_hits"] == before["disk_hits"]


def test_many_save_times_on_glsl(glsl):
    h0 = np.tile([2.0, 0.0], (4, 1))
    times = np.linspace(0, 6, 40000)
    sol = vgpu.solve(VDP, h0, backend="glsl", save_at=times)
    ref = vgpu.solve(VDP, h0, backend="numpy", save_at=times)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-3, atol=1e-3)
