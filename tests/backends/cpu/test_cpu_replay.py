"""A small repeated run_field on the cpu backend is replayed (vgpu_compiler/call/replay.py,
backends/cpu/replay.py): the same numbers as the full path (vgpu.solve, which never
replays) and the numpy reference, bit for bit, with new inputs, h0 and params each call;
another shape, dtype or steps is not replayed from the old plan; errors are the full
path's; vgpu.evict and vgpu.clear_cache drop the plans."""
from __future__ import annotations

import pathlib
import threading
import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import toolchain
from vgpu_compiler.call import replay

pytestmark = pytest.mark.skipif(not toolchain.available()[0], reason="no C compiler")

ROOT = pathlib.Path(__file__).resolve().parents[3]
MATMUL = (ROOT / "examples" / "matmul.field").read_text() + "\n# test_cpu_replay\n"
# h0, a per-trajectory param (k), a scalar param in the kernel (c), one with a default
DECAY = """field decay {
    grid i < N
    state x, y
    param k
    param c
    param g = 0.5
    dx/dt = -k * x + c * y
    dy/dt = g * x - y
    solve rk4(dt = 0.05, steps = 20)
}
# test_cpu_replay
"""
RNG = np.random.default_rng(29)


def _plan(src, **kw):
    kw = {"field": None, "backend": "cpu", "dtype": "float32", "dt": None, "steps": None,
          "t0": None, "seed": 0, **kw}
    return replay.lookup(replay.key(src, kw["field"], kw["backend"], kw["dtype"], kw["dt"],
                                    kw["steps"], kw["t0"], kw["seed"]))


def test_repeated_matmul_is_the_full_path_and_the_reference_bit_for_bit():
    plans = set()
    for _ in range(4):
        A = RNG.standard_normal((16, 8)).astype(np.float32)
        B = RNG.standard_normal((8, 16))            # float64: cast as the full path casts
        got = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="cpu")
        plans.add(id(_plan(MATMUL)))
        full = vgpu.solve(MATMUL, inputs={"A": A, "B": B}, backend="cpu").states
        ref = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="numpy")
        np.testing.assert_array_equal(got, full)
        np.testing.assert_array_equal(got, ref)
    assert len(plans) == 1 and _plan(MATMUL) is not None      # one plan, replayed thrice
    before = vgpu.cache_stats()["dispatches"]
    kept = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="cpu")
    again = vgpu.run_field(MATMUL, inputs={"A": 2 * A, "B": B}, backend="cpu")
    assert vgpu.cache_stats()["dispatches"] == before + 2
    np.testing.assert_array_equal(kept, full)       # a fresh array: the next call left it
    np.testing.assert_array_equal(again, vgpu.solve(MATMUL, inputs={"A": 2 * A, "B": B},
                                                    backend="cpu").states)


def test_new_h0_and_params_each_call_and_what_is_not_replayed():
    n = 37
    for dtype in ("float32", "float64"):
        for call in range(3):
            h0 = RNG.normal(size=(n, 2))
            params = {"k": RNG.uniform(0.5, 2, n).astype(dtype), "c": float(RNG.normal())}
            if call == 2:
                params["g"] = 0.25
            kw = dict(params=params, dtype=dtype)
            got = vgpu.run_field(DECAY, h0, backend="cpu", **kw)
            if call == 1:
                assert _plan(DECAY, dtype=dtype) is not None
            np.testing.assert_array_equal(got, vgpu.solve(DECAY, h0, backend="cpu", **kw).states)
            np.testing.assert_allclose(got, vgpu.run_field(DECAY, h0, backend="numpy", **kw),
                                       rtol=1e-5 if dtype == "float32" else 1e-12)
    plan = _plan(DECAY)
    h0 = RNG.normal(size=(n, 2))
    params = {"k": np.ones(n, np.float32), "c": 1.0, "g": 0.25}
    vgpu.run_field(DECAY, h0, params=params, backend="cpu")
    assert _plan(DECAY) is plan
    # another grid, a scalar k (another kernel), steps given: the full path, recorded anew
    for h, p, kw in ((RNG.normal(size=(5, 2)), {**params, "k": np.ones(5, np.float32)}, {}),
                     (h0, {**params, "k": 2}, {}), (h0, params, {"steps": 3})):
        got = vgpu.run_field(DECAY, h, params=p, backend="cpu", **kw)
        np.testing.assert_array_equal(got, vgpu.solve(DECAY, h, params=p, backend="cpu",
                                                      **kw).states)
    assert _plan(DECAY) is not plan and _plan(DECAY, steps=3) is not None


def test_a_call_the_full_path_refuses_is_refused_after_a_replay():
    h0 = RNG.normal(size=(6, 2)).astype(np.float32)
    good = {"k": np.ones(6, np.float32), "c": 1.0}
    vgpu.run_field(DECAY, h0, params=good, backend="cpu")
    vgpu.run_field(DECAY, h0, params=good, backend="cpu")
    assert _plan(DECAY) is not None
    with pytest.raises(vgpu.ShapeError):
        vgpu.run_field(DECAY, h0[:5], params=good, backend="cpu")
    with pytest.raises(vgpu.MissingError):
        vgpu.run_field(DECAY, h0, params={"k": good["k"]}, backend="cpu")
    with pytest.raises(vgpu.UnknownNameError):
        vgpu.run_field(DECAY, h0, params={**good, "kk": 1.0}, backend="cpu")
    with pytest.raises(vgpu.ArgumentTypeError):
        vgpu.run_field(DECAY, h0, params={**good, "c": 2**70}, backend="cpu")
    vgpu.run_field(DECAY, h0, params=good, backend="cpu", steps=2)
    with pytest.raises(vgpu.ArgumentTypeError, match="steps must be an int"):
        vgpu.run_field(DECAY, h0, params=good, backend="cpu", steps=2.0)
    with pytest.raises(vgpu.ArgumentTypeError):
        vgpu.run_field(DECAY, h0.astype(complex), params=good, backend="cpu")
    # a plan made without h0 (every state has a start expression): h0 given is refused
    # as the full path refuses it (it was a TypeError from the plan's own check)
    started = DECAY.replace("state x, y", "state x = 1, y = 0")
    vgpu.run_field(started, params=good, backend="cpu", dims={"N": 6})
    vgpu.run_field(started, params=good, backend="cpu", dims={"N": 6})
    assert _plan(started) is not None
    with pytest.raises(vgpu.CallError, match="h0 was given"):
        vgpu.run_field(started, h0[:, 0], params=good, backend="cpu", dims={"N": 6})


def test_a_run_time_error_and_a_nonfinite_warning_of_a_replay_are_the_full_paths():
    src = """field f {
        input w[M]
        state x
        dx/dt = w[int(x)]
        solve euler(dt = 0.5, steps = 2)
    }"""
    w = np.zeros(3, np.float32)
    for _ in range(2):
        vgpu.run_field(src, np.zeros(4, np.float32), inputs={"w": w}, backend="cpu")
    assert _plan(src) is not None
    bad = np.array([0, 1, 5, 2], np.float32)
    with pytest.raises(vgpu.ProgramIndexError) as full:
        vgpu.solve(src, bad, inputs={"w": w}, backend="cpu")
    with pytest.raises(vgpu.ProgramIndexError) as replayed:
        vgpu.run_field(src, bad, inputs={"w": w}, backend="cpu")
    assert str(replayed.value) == str(full.value) and "w[5]" in str(full.value)
    assert _plan(src) is not None       # the plan stays: the next call is replayed
    got = vgpu.run_field(src, np.zeros(4, np.float32), inputs={"w": w + 1}, backend="cpu")
    np.testing.assert_array_equal(got, np.ones(4, np.float32))
    A = np.ones((4, 4), np.float32)
    for a in (A, A.copy()):
        vgpu.run_field(MATMUL, inputs={"A": a, "B": A}, backend="cpu")
    A[0, 0] = np.nan
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nan = vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="cpu")
    assert np.isnan(nan).sum() == 4 + 3
    [warning] = [x for x in seen if issubclass(x.category, vgpu.NonFiniteWarning)]
    assert "7 of 16 trajectories" in str(warning.message)
    assert warning.filename == __file__             # the caller's line, as the full path's


def test_evict_and_clear_cache_drop_the_plans_and_vgpu_no_cpu_is_read_per_call(monkeypatch):
    A = np.ones((4, 4), np.float32)
    for _ in range(2):
        vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="cpu")
    plan = _plan(MATMUL)
    assert plan is not None
    vgpu.evict(MATMUL)
    assert _plan(MATMUL) is None and replay.entries() == 0
    vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="cpu")
    assert _plan(MATMUL) not in (None, plan)
    vgpu.clear_cache(disk=False)
    assert replay.entries() == 0
    vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="cpu")
    monkeypatch.setenv("VGPU_NO_CPU", "1")
    with pytest.raises(vgpu.BackendError, match="VGPU_NO_CPU"):
        vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="cpu")
    monkeypatch.delenv("VGPU_NO_CPU")
    np.testing.assert_array_equal(vgpu.run_field(MATMUL, inputs={"A": A, "B": A},
                                                 backend="cpu"), A @ A)


def test_replays_on_two_threads_each_get_their_own_numbers():
    As = [RNG.standard_normal((8, 8)).astype(np.float32) for _ in range(8)]
    want = [vgpu.solve(MATMUL, inputs={"A": a, "B": a}, backend="cpu").states for a in As]
    bad = []

    def work(k):
        for i in range(200):
            j = (i + k) % len(As)
            got = vgpu.run_field(MATMUL, inputs={"A": As[j], "B": As[j]}, backend="cpu")
            if not np.array_equal(got, want[j]):
                bad.append(j)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
