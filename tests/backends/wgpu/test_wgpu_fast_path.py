"""The one-dispatch fast path on wgpu (wgpu fast.OneDispatch, kept in a Prepared's
slots), and the writes a repeated dispatch skips (the uniform buffer when its bytes
are unchanged, the error slot while it holds no error).

A repeated call of a signature whose run is one chunk and one dispatch must give
exactly what the full path gives (the first call takes the full path), refuse what it
refuses, and step aside whenever the kernel, the limits, VGPU_REDUCTION or the
call's own shape of run (more steps than one dispatch, a history) changed.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import vgpu
from field_examples import COLLAPSE, HISTOGRAM, LORENZ, MATMUL
from test_fast_path import OOB, PARTIAL, SETTLE
from vgpu_compiler.backends.wgpu import fast as wgpu_fast
from vgpu_compiler.backends.wgpu import runner as wgpu_runner
from vgpu_compiler.call.bind import prepare
from vgpu_compiler.errors import ProgramIndexError

RNG = np.random.default_rng(6)
OU = """
field ou {
    param theta = 1.0
    noise xi
    state x
    dx/dt = -theta * x + 0.3 * xi
    solve euler(dt = 0.01, steps = 50)
}
"""


def _fast_of(src, *args, **kwargs):
    prepared, _ = prepare(vgpu.compile(src).select(None), *args, **kwargs)
    return prepared.slots.get("wgpu_fast")


@pytest.fixture
def counted(monkeypatch):
    """How many calls took the full path (_execute) and the fast one (OneDispatch.call,
    when it answered)."""
    seen = {"full": 0, "fast": 0}
    full, fast = wgpu_runner._execute, wgpu_fast.OneDispatch.call

    def count_full(*a, **k):
        seen["full"] += 1
        return full(*a, **k)

    def count_fast(self, data):
        sol = fast(self, data)
        seen["fast"] += sol is not None
        return sol
    monkeypatch.setattr(wgpu_runner, "_execute", count_full)
    monkeypatch.setattr(wgpu_fast.OneDispatch, "call", count_fast)
    return seen


def test_a_repeated_call_takes_the_fast_path_with_new_data(wgpu, counted):
    for _ in range(4):
        A = RNG.standard_normal((16, 16)).astype(np.float32)
        B = RNG.standard_normal((16, 16)).astype(np.float32)
        C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="wgpu")
        np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    A = np.zeros((16, 16), np.float32)
    assert _fast_of(MATMUL, inputs={"A": A, "B": A}) is not None
    assert counted["fast"] >= 3 and counted["full"] <= 1


def test_fast_calls_equal_full_calls(wgpu, monkeypatch):
    """h0 for some states (others start from their expression), per-trajectory and scalar
    params with new values each call, a new seed for a noisy field: the fast path's
    answer is the full path's, bit for bit."""
    cases = []
    for _ in range(3):
        h0 = RNG.normal(size=(50,)).astype(np.float32)
        k = RNG.uniform(0.5, 2.0, size=50).astype(np.float32)
        cases.append((h0, {"k": k, "g": float(RNG.uniform(0.1, 0.9))}))
    fast = [vgpu.solve(PARTIAL, h0, params=p, backend="wgpu") for h0, p in cases]
    noisy = [vgpu.solve(OU, np.ones(64, np.float32), params={"theta": th}, seed=s,
                        backend="wgpu") for th, s in ((1.0, 1), (0.5, 2), (2.0, 3))]
    monkeypatch.setattr(wgpu_runner, "_still", lambda fast, slots: False)   # full path only
    full = [vgpu.solve(PARTIAL, h0, params=p, backend="wgpu") for h0, p in cases]
    again = [vgpu.solve(OU, np.ones(64, np.float32), params={"theta": th}, seed=s,
                        backend="wgpu") for th, s in ((1.0, 1), (0.5, 2), (2.0, 3))]
    for a, b in zip(fast + noisy, full + again):
        np.testing.assert_array_equal(a.states, b.states)
        np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
        assert a.states.dtype == b.states.dtype and a.states.shape == b.states.shape
    assert not np.array_equal(noisy[0].states, noisy[1].states)
    assert _fast_of(PARTIAL, cases[0][0], params=cases[0][1]) is not None


def test_outputs_and_collapse_on_the_fast_path(wgpu, counted, monkeypatch):
    h = [vgpu.solve(HISTOGRAM, RNG.uniform(0, 2, 300).astype(np.float32), backend="wgpu")
         for _ in range(3)]
    h0s = [RNG.uniform(0.6, 3.0, 40).astype(np.float32) for _ in range(3)]
    c = [vgpu.solve(SETTLE, h0, backend="wgpu") for h0 in h0s]
    d = [vgpu.solve(COLLAPSE, backend="wgpu", dims={"M": 16, "P": 8}) for _ in range(3)]
    assert counted["fast"] >= 6
    for sol in h:
        assert sol.outputs["counts"].sum() == 300 and sol.outputs["counts"].flags.writeable
    monkeypatch.setattr(wgpu_runner, "_still", lambda fast, slots: False)
    for sol, h0 in zip(c, h0s):
        ref = vgpu.solve(SETTLE, h0, backend="wgpu")
        np.testing.assert_array_equal(sol.states, ref.states)
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)
        assert sol.steps_taken.dtype == np.int32 and sol.steps_taken.min() < 100
        assert len(set(sol.steps_taken.tolist())) > 1
    ref = vgpu.solve(COLLAPSE, backend="wgpu", dims={"M": 16, "P": 8})
    for sol in d:
        np.testing.assert_array_equal(sol.states, ref.states)
        np.testing.assert_array_equal(sol.steps_taken, ref.steps_taken)


def test_histories_and_long_runs_keep_the_full_path(wgpu, counted):
    h0 = RNG.normal(size=(10, 3)).astype(np.float32)
    for _ in range(2):
        vgpu.solve(LORENZ, h0, backend="wgpu", steps=10, save_every=5)
    assert _fast_of(LORENZ, h0, steps=10, save_every=5) is None
    src = "field d { state x\n dx/dt = -x\n solve euler(dt = 0.001, steps = 10) }"
    x = np.ones(8, np.float32)
    vgpu.run_field(src, x, backend="wgpu"), vgpu.run_field(src, x, backend="wgpu")
    before = dict(counted)
    with wgpu_runner.limits(max_steps=4):       # three dispatches: the full path
        got = vgpu.run_field(src, x, backend="wgpu")
    np.testing.assert_allclose(got, vgpu.run_field(src, x, backend="numpy"), rtol=1e-6)
    assert counted["full"] == before["full"] + 1


def test_results_are_fresh_and_writable_each_call(wgpu):
    A = np.eye(4, dtype=np.float32)
    first = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="wgpu")
    second = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="wgpu")
    third = vgpu.solve(MATMUL, inputs={"A": A, "B": A}, backend="wgpu")
    for sol in (first, second, third):
        assert sol.states.flags.writeable and sol.steps_taken.flags.writeable
    second.states[:] = 7
    second.steps_taken[:] = -1
    np.testing.assert_array_equal(third.states, A)
    np.testing.assert_array_equal(third.steps_taken, np.full((4, 4), 4))
    assert not np.shares_memory(second.states, third.states)


def test_a_repeated_call_refuses_what_the_first_refuses_and_recovers(wgpu):
    A = np.arange(8, dtype=np.float32)
    ok = vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": 1.0},
                        backend="wgpu")
    np.testing.assert_array_equal(ok, A[1:5])
    messages = []
    for _ in range(2):
        with pytest.raises(ProgramIndexError) as info:
            vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": 6.0},
                           backend="wgpu")
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "A[" in messages[0] and "line" in messages[0]
    for at in (2.0, 3.0):       # the error slot was reset, and stays clean after
        again = vgpu.run_field(OOB, inputs={"A": A}, dims={"M": 4}, params={"at": at},
                               backend="wgpu")
        np.testing.assert_array_equal(again, A[int(at):int(at) + 4])


def test_signatures_sharing_a_kernel_set_their_own_uniforms(wgpu):
    """Two signatures (dt differs) share one kernel and its uniform buffer: each call,
    fast or full, must leave its own dt there (the buffer is written only when its
    bytes change)."""
    src = "field d { state x\n dx/dt = -x\n solve euler(dt = 0.1, steps = 10) }"
    h0 = np.ones(32, np.float32)
    want = {dt: vgpu.run_field(src, h0, backend="numpy", dt=dt) for dt in (0.1, 0.05, -0.0)}
    for dt in [0.1, 0.05, 0.1, 0.1, 0.05, 0.05, -0.0, 0.1, -0.0]:
        np.testing.assert_allclose(vgpu.run_field(src, h0, backend="wgpu", dt=dt), want[dt],
                                   rtol=1e-6)


def test_the_fast_path_steps_aside_when_anything_changed(wgpu, counted, monkeypatch):
    A = RNG.standard_normal((8, 8)).astype(np.float32)

    def call():
        C = vgpu.run_field(MATMUL, inputs={"A": A, "B": A}, backend="wgpu")
        np.testing.assert_allclose(C, A.astype(np.float64) @ A, rtol=1e-4, atol=1e-4)
    call(), call()
    before = counted["full"]
    vgpu.clear_cache(disk=False)            # the kernel is gone: found again, in full
    call()
    with wgpu_runner.limits(max_steps=3):   # other limits (three dispatches)
        call()
    monkeypatch.setenv("VGPU_REDUCTION", "serial")
    call()
    monkeypatch.delenv("VGPU_REDUCTION")
    call()
    assert counted["full"] - before == 4
    call()
    assert counted["full"] - before == 4    # and back on the fast path


def test_concurrent_fast_calls_each_get_their_own_answer(wgpu):
    A0 = np.ones((16, 16), np.float32)
    vgpu.run_field(MATMUL, inputs={"A": A0, "B": A0}, backend="wgpu")
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                A = rng.standard_normal((16, 16)).astype(np.float32)
                B = rng.standard_normal((16, 16)).astype(np.float32)
                C = vgpu.run_field(MATMUL, inputs={"A": A, "B": B}, backend="wgpu")
                np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
        except BaseException as exc:       # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_read_back_maps_without_an_extra_submission_or_falls_back():
    """dispatch._mapped maps through wgpu-py's "READ_NOSYNC" mode (no empty submission
    per mapping); a wgpu-py without it gets map_sync; either way the buffer is read once
    and unmapped."""
    from vgpu_compiler.backends.wgpu.dispatch import _mapped
    calls = []

    class Promise:
        def sync_wait(self):
            calls.append("waited")

    class Staging:
        map_state = "mapped"

        def __init__(self, known):
            self.known = known

        def map_async(self, mode):
            calls.append(mode)
            if not self.known:
                raise ValueError("unknown mode")
            return Promise()

        def map_sync(self, mode):
            calls.append(("map_sync", mode))

        def read_mapped(self, offset, size):
            calls.append("read")
            return bytes(size)

        def unmap(self):
            calls.append("unmapped")
    assert _mapped(Staging(True), 16) == bytes(16)
    assert calls == ["READ_NOSYNC", "waited", "read", "unmapped"]
    calls.clear()
    _mapped(Staging(False), 16)
    assert calls == ["READ_NOSYNC", ("map_sync", 1), "read", "unmapped"]
