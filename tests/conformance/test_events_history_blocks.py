"""GLSL: a fixed-step method's save_every with events keeps its history in one buffer
per chunk of trajectories; a history larger than one storage block runs in chunks small
enough that it fits (the storage block made small here, as a driver's 128 MiB would be
by 4096 trajectories x 3000 steps x 3 states), with the numbers of one chunk."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import adaptive_run
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.errors import BackendError, StatusWarning

from event_fields import ball, lif

HEIGHTS = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1, 3.0])
K = np.array([3, 5, 2, 10, 4, 1, 7], float)

CASES = {
    "ball": (ball("rk4(dt = 0.01, steps = 1000)"), HEIGHTS, {"params": {"K": K}}, 10, 1),
    "ball_basin": (ball("rk4(dt = 0.01, steps = 1000)", "basin l < 4"), HEIGHTS,
                   {"params": {"K": K}}, 7, 4),
    "lif": (lif("euler(dt = 1e-4, steps = 3000)"), None,
            {"params": {"I": np.linspace(1.1, 4.0, 37)}, "dims": {"N": 37}}, 50, 1),
}


def solve(case, backend, dtype, **kw):
    src, h0, args, every, _ = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatusWarning)
        return vgpu.solve(src, h0, backend=backend, dtype=dtype, save_every=every,
                          **args, **kw)


def history_bytes(sol, dtype) -> int:
    """Bytes of one trajectory's history: saved steps x states x the item."""
    n_states = 1 if sol.states.ndim == 1 else sol.states.shape[-1]
    return sol.history.shape[0] * n_states * np.dtype(dtype).itemsize


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_a_history_past_one_block_runs_in_chunks(glsl, monkeypatch, case, dtype):
    ref = solve(case, "numpy", dtype)
    whole = solve(case, "glsl", dtype)
    unit = CASES[case][4]                   # (a chunk holds whole rows of basins)
    chunks = []
    init = adaptive_run._Target.__init__

    def spy(self, *a):
        init(self, *a)
        chunks.extend(self.chunks)
    monkeypatch.setattr(adaptive_run._Target, "__init__", spy)
    with limits(max_block=unit * history_bytes(ref, dtype)):   # one row of basins a block
        got = solve(case, "glsl", dtype)
    n = ref.states.shape[0]
    assert len(chunks) == -(-n // unit) and all(b - a <= unit for a, b in chunks)
    for name in ("history", "states", "event_counts", "steps_taken", "status", "t"):
        np.testing.assert_array_equal(getattr(got, name), getattr(whole, name), err_msg=name)
    for name, value in ref.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], value, err_msg=name)
    np.testing.assert_array_equal(got.times, ref.times)
    np.testing.assert_allclose(got.history, ref.history, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got.event_counts, ref.event_counts)
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case,what", [("ball", "one trajectory"),
                                       ("ball_basin", "one row of basins \\(4 trajectories\\)")])
def test_a_history_past_one_block_for_the_fewest_trajectories_is_refused(glsl, case, what):
    ref = solve(case, "numpy", "float32")
    per = history_bytes(ref, "float32")
    unit = CASES[case][4]
    with limits(max_block=unit * per - 4):
        with pytest.raises(BackendError, match=f"the history of {what} "
                                               f"\\({ref.history.shape[0]} saved steps x 3 "
                                               f"states\\)"):
            solve(case, "glsl", "float32")
