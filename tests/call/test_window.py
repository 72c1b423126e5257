"""Windows of a call (call/window.py): rows [start, stop) of the first grid axis, run
with the whole grid's dims and global indices, give exactly those rows of the whole
run, bit for bit, on every backend (numpy is the oracle; GLSL is held to the same
equality, since both run the same arithmetic on the same trajectory), and the blocks'
flux outputs add up to the whole run's (exactly here: counts)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import vgpu
from field_examples import LORENZ, SETTLE_COUNT
from vgpu_compiler import backends as registry
from vgpu_compiler.api import solve_window
from vgpu_compiler.call.adaptive import overrides as adaptive_overrides
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.call.bind import prepare
from vgpu_compiler.call.window import Window


HISTOGRAM = (Path(__file__).resolve().parents[2] / "examples" / "histogram.field").read_text()
RNG = np.random.default_rng(16)
BACKENDS = ["numpy", "glsl", "wgpu", "cpu"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def _windows(src, backend, cuts, rows, arrays=(), **call):
    """The Solutions of the windows between ``cuts``; ``arrays``: names of call
    arguments (h0, or params entries) to cut to each window's rows."""
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        kw = dict(call)
        if "h0" in arrays:
            kw["h0"] = call["h0"][a:b]
        if "params" in call:
            kw["params"] = {k: v[a:b] if isinstance(v, np.ndarray) else v
                            for k, v in call["params"].items()}
        if "t1" in kw:          # an adaptive method's argument, as solve passes it on
            kw["extra"] = adaptive_overrides(kw.pop("t1"), None, None, None, None, None)
        sol = solve_window(src, Window(a, b, rows), backend=backend, **kw)
        assert sol.backend == backend
        out.append(sol)
    return out


def test_lorenz_windows_are_the_rows_of_the_whole_run(backend):
    """Per-trajectory params and a history, windows of uneven lengths."""
    h0 = RNG.normal(size=(700, 3)).astype(np.float32)
    rho = np.linspace(0, 30, 700).astype(np.float32)
    call = dict(h0=h0, params={"rho": rho, "beta": 2.5}, steps=120, save_every=50)
    whole = vgpu.solve(LORENZ, backend=backend, **call)
    parts = _windows(LORENZ, backend, [0, 1, 256, 700], 700, ("h0",), **call)
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    np.testing.assert_array_equal(np.concatenate([p.history for p in parts], axis=1),
                                  whole.history)
    for p in parts:
        np.testing.assert_array_equal(p.times, whole.times)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_grid_index_and_the_dims_are_the_whole_grids(backend, dtype):
    """histogram.field reads i and N: a window sees the global i and the whole N, and
    the windows' counts add up to the whole run's (float64 GLSL sums deposits on the
    host, float32 adds atomically: both count exactly)."""
    call = dict(dims={"N": 1000}, steps=300, dtype=dtype)
    whole = vgpu.solve(HISTOGRAM, backend=backend, **call)
    parts = _windows(HISTOGRAM, backend, [0, 300, 999, 1000], 1000, **call)
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    np.testing.assert_array_equal(sum(p.outputs["counts"] for p in parts),
                                  whole.outputs["counts"])
    # the same rows run as a grid of their own are another computation: the test can fail
    alone = vgpu.solve(HISTOGRAM, backend=backend, dims={"N": 300}, steps=300, dtype=dtype)
    assert not np.array_equal(alone.states, whole.states[:300])


def test_basins_with_collapse_and_flux(backend):
    """Whole basins (4 rows each): collapse steps, states and counts, bit for bit."""
    whole = vgpu.solve(SETTLE_COUNT, backend=backend, dims={"N": 30})
    assert len(set(whole.steps_taken[:, 0].tolist())) > 3      # basins stop apart
    parts = _windows(SETTLE_COUNT, backend, [0, 8, 28, 30], 30, dims={"N": 30})
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    np.testing.assert_array_equal(np.concatenate([p.steps_taken for p in parts]),
                                  whole.steps_taken)
    np.testing.assert_array_equal(sum(p.outputs["hist"] for p in parts), whole.outputs["hist"])


def test_glsl_windows_split_into_chunks_and_repeated_at_new_places(glsl):
    """A window of one length runs at several places on one kernel (the place is a
    uniform): each gets its own rows, also when the driver's limits split it into
    several chunks and dispatches, and after a call of the same shape took the one-
    dispatch fast path."""
    h0 = RNG.normal(size=(1200, 3)).astype(np.float32)
    rho = np.linspace(0, 30, 1200).astype(np.float32)
    call = dict(h0=h0, params={"rho": rho}, steps=40)
    whole = vgpu.solve(LORENZ, backend="numpy", **call)
    for _ in range(2):      # the second time round, the kernel and its plan are cached
        parts = _windows(LORENZ, "glsl", [0, 400, 800, 1200], 1200, ("h0",), **call)
        np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    with limits(max_block=4096, max_steps=7):
        parts = _windows(LORENZ, "glsl", [0, 400, 800, 1200], 1200, ("h0",), **call)
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    # (a basin's mean is summed in another order on GLSL than on numpy: the whole GLSL
    # run is the reference here)
    full = vgpu.solve(SETTLE_COUNT, backend="glsl", dims={"N": 64})
    with limits(max_block=3 * 4 * 64):          # basins of 4 rows, 16 chunks per window
        parts = _windows(SETTLE_COUNT, "glsl", [0, 32, 64], 64, dims={"N": 64})
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), full.states)
    np.testing.assert_array_equal(sum(p.outputs["hist"] for p in parts), full.outputs["hist"])


def test_one_prepared_call_for_every_window_of_one_length():
    f = vgpu.compile(LORENZ).select(None)
    h0 = np.zeros((10, 3), np.float32)
    p1, d1 = prepare(f, h0, window=Window(0, 10, 30))
    p2, d2 = prepare(f, h0, window=Window(20, 30, 30))
    assert p1 is p2 and (d1.origin, d2.origin) == (0, 20)
    assert p1.template.grid_shape == (10,) and p1.template.whole_shape == (30,)
    sol = registry.get("numpy").run(p2, d2, None)
    assert sol.states.shape == (10, 3)


@pytest.mark.parametrize("window, h0_rows, message", [
    (Window(2, 8, 30), 6, "cut a basin"),           # basins have 4 rows
    (Window(0, 6, 30), 6, "cut a basin"),
    (Window(0, 8, 31), 8, "dim N is 30 from dims= but 31 from h0"),
    (Window(0, 8, 30), 7, "the window [0, 8) has 8"),
])
def test_a_window_that_cuts_a_basin_or_misses_its_grid_is_refused(window, h0_rows, message):
    src = SETTLE_COUNT.replace("float(i) / float(N) + float(j) * 0.1", "").replace(
        "state x =", "state x")
    x = np.zeros((h0_rows, 8), np.float32)
    with pytest.raises(vgpu.VgpuError, match=message.replace("[", r"\[").replace(")", r"\)")):
        solve_window(src, window, x, dims={"N": 30})


def test_a_window_must_lie_in_its_grid():
    with pytest.raises(vgpu.CallError, match="do not lie"):
        Window(5, 40, 30)
    with pytest.raises(vgpu.ArgumentTypeError):
        Window(0, 1.5, 30)


def test_the_numpy_layout_numbers_a_windows_lanes_in_the_whole_grid():
    """Layout.trajectory: every active lane's row-major index in the whole grid (what a
    per-trajectory counter must use), and the grid index of axis 0 counted from origin."""
    from vgpu_compiler.backends.numpy.layout import Layout
    lay = Layout((10, 8), (4, 8), origin=20)         # rows 20..29 of a larger grid
    assert sorted(lay.trajectory[lay.active].tolist()) == list(range(160, 240))
    rows = lay.global_index[0][lay.active]
    assert rows.min() == 20 and rows.max() == 29
    plain = Layout((10, 8), (4, 8))
    np.testing.assert_array_equal(plain.trajectory[plain.active], plain.flat[plain.active])


OU = (Path(__file__).resolve().parents[2] / "examples" / "ou.field").read_text()
TSIT5 = (Path(__file__).resolve().parents[2] / "examples" / "lorenz_tsit5.field").read_text()


def test_noise_in_a_window_is_the_whole_runs_noise(backend):
    """The Philox counter takes the trajectory's global index: a window's paths are
    those rows of the whole run's, for a seed given."""
    x0 = np.zeros(600, np.float32)
    whole = vgpu.solve(OU, x0, backend=backend, steps=50, seed=7)
    parts = _windows(OU, backend, [0, 200, 600], 600, ("h0",), h0=x0, steps=50, seed=7)
    np.testing.assert_array_equal(np.concatenate([p.states for p in parts]), whole.states)
    alone = vgpu.solve(OU, x0[200:], backend=backend, steps=50, seed=7)   # can fail
    assert not np.array_equal(alone.states, whole.states[200:])


def test_an_adaptive_method_in_windows(backend):
    """tsit5 (per-trajectory steps): states, t, status, steps taken and rejected."""
    h0 = RNG.normal(size=(300, 3)).astype(np.float32)
    rho = np.linspace(0, 30, 300).astype(np.float32)
    call = dict(h0=h0, params={"rho": rho}, t1=0.3)
    whole = vgpu.solve(TSIT5, backend=backend, **call)
    parts = _windows(TSIT5, backend, [0, 100, 300], 300, ("h0",), **call)
    for name in ("states", "t", "status", "steps_taken", "steps_rejected"):
        np.testing.assert_array_equal(np.concatenate([getattr(p, name) for p in parts]),
                                      getattr(whole, name), err_msg=name)
