"""The plan both shader backends split a run by (backends/shader/plan.py), on its own:
pure (no device), milliseconds. The runs themselves are split and compared bit for bit
with one-chunk runs in test_glsl_dispatch.py, test_simulation*.py, test_wgpu_*.py."""
from types import SimpleNamespace

import numpy as np
import pytest

from vgpu_compiler.backends.shader import plan as P
from vgpu_compiler.errors import BackendError


def _bound(grid, n_states=3, inputs=None):
    return SimpleNamespace(grid_shape=grid, n_trajectories=int(np.prod(grid)),
                           inputs=inputs or {}, field=SimpleNamespace(states=[0] * n_states))


def _meta(basin=None, local=64, collapse=False):
    return {"has_basin": basin is not None, "basin": basin, "local_size": (local, 1, 1),
            "collapse": collapse, "uses_init": False, "buffers": [], "n_deposits": 0}


def test_limits_are_set_restored_and_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("VGPU_TEST_STEPS", "12")
    monkeypatch.setenv("VGPU_TEST_BLOCK", "lots")
    limits = P.Limits({"max_steps": "VGPU_TEST_STEPS", "max_block": "VGPU_TEST_BLOCK"})
    assert limits.in_force == (0, 1 << 27, 12)
    assert "VGPU_TEST_BLOCK must be a whole number" in limits.wrong
    with pytest.raises(BackendError, match="VGPU_TEST_BLOCK"):
        P.plan_for(SimpleNamespace(plans={}), None, limits, {})
    before = limits.in_force
    with limits.within(max_steps=3, work_per_dispatch=0):
        assert limits.in_force == (0, 0, 3)
    assert limits.in_force == before and limits.in_force is not before   # (a new tuple)
    with pytest.raises(KeyError):
        limits.set(max_stepz=1)


def test_chunks_fit_the_block_and_the_workgroups():
    dev = {"max_block": 12 * 100, "max_groups": (4, 4, 4)}
    # 3 float32 states a trajectory: 100 a block
    assert P._ranges(_bound((250,)), _meta(), dev, 4, 0, 1200) == [(0, 100), (100, 200),
                                                                   (200, 250)]
    # 64 lanes x 4 x 4 workgroups: at most 1024 a chunk, whatever the block
    assert P._ranges(_bound((2000,)), _meta(), dev, 4, 0, 1 << 30) == [(0, 1024),
                                                                       (1024, 2000)]
    # a history of 120 bytes a trajectory bounds them too
    assert P._ranges(_bound((25,)), _meta(), dev, 4, 0, 1200, history=120)[0] == (0, 10)
    # rows of basins (2 x 8) along the first axis: whole basins, 4 rows a chunk
    rows = P._ranges(_bound((10, 8)), _meta(basin=(2, 8)), dev, 4, 0, 12 * 8 * 5)
    assert rows == [(0, 4), (4, 8), (8, 10)]
    assert P.groups(_meta(basin=(2, 8)), (10, 8), dev, 4, 32) == (1, 2, 1)
    assert P.groups(_meta(), (1000,), dev, 0, 1000) == (4, 4, 1)
    with pytest.raises(BackendError, match="one row of basins"):
        P._ranges(_bound((10, 8)), _meta(basin=(2, 8)), dev, 4, 0, 12 * 8)
    with pytest.raises(BackendError, match="input w .* larger than"):
        P._ranges(_bound((10,), inputs={"w": np.zeros(400, np.float32)}), _meta(), dev, 4,
                  0, 1200)


def test_the_loop_cap_counts_the_steps_loops():
    meta = {"loop_trips_per_step": 257, "loop_trips_once": 32}
    assert P.loop_cap(meta) == (P.LOOP_LIMIT - 1 - 32) // 257
    assert P.loop_cap({"loop_trips_per_step": 0, "loop_trips_once": 0}) == P.LOOP_LIMIT - 1
