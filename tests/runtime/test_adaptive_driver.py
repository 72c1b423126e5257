"""runtime/adaptive.py, the one adaptive driver of glsl and wgpu: a run split into many
dispatches gives the whole run's answer bit for bit, with progress rising to (n, n); a
call made from a progress callback (the same kernel) runs on a private copy and gives
the same answer; a KeyboardInterrupt from a callback (Ctrl-C at a dispatch boundary)
stops the run, and the next call gives the same answer again."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import vgpu
from vgpu_compiler.runtime import pacing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TSIT5 = open(os.path.join(ROOT, "examples", "lorenz_tsit5.field")).read()
RHO = np.linspace(0, 21, 64)
U0 = np.tile([1.0, 0.0, 0.0], (64, 1))


def solve(backend, **kw):
    return vgpu.solve(TSIT5, U0, params={"rho": RHO}, backend=backend, dtype="float32",
                      t1=1.0, **kw)


@pytest.fixture(params=["glsl", "wgpu"])
def split(request, monkeypatch):
    """A backend whose adaptive runs take one attempt per dispatch."""
    request.getfixturevalue(request.param)          # (conftest: glsl / wgpu available)
    from vgpu_compiler.backends.glsl import adaptive_run as glsl_run
    from vgpu_compiler.backends.wgpu import adaptive_run as wgpu_run
    for module in (glsl_run, wgpu_run):
        monkeypatch.setattr(module, "FIRST_ATTEMPTS", 1)
    monkeypatch.setattr(pacing, "TARGET_SECONDS", 1e-9)
    monkeypatch.setattr(pacing, "TARGET_CPU_SECONDS", 1e-9)
    with _limits(request.param)(max_steps=1):
        yield request.param


def _limits(backend):
    """The backend's splitting limits' ``within`` (shader/plan.Limits)."""
    if backend == "glsl":
        from vgpu_compiler.backends.glsl.plan import limits
        return limits
    from vgpu_compiler.backends.wgpu.runner import limits
    return limits


@pytest.mark.parametrize("backend", ["glsl", "wgpu"])
def test_max_steps_per_dispatch_caps_an_adaptive_dispatch_on_both(backend, request):
    """The limits' max_steps (VGPU_MAX_STEPS_PER_DISPATCH) bounds the attempts of one
    adaptive dispatch on glsl as on wgpu (shader/adaptive_host.dispatch_cap), and the
    split run is the whole run."""
    request.getfixturevalue(backend)
    whole = solve(backend)
    attempts = int((whole.steps_taken + whole.steps_rejected).max())
    before = vgpu.cache_stats()["dispatches"]
    with _limits(backend)(max_steps=5):
        got = solve(backend)
    assert vgpu.cache_stats()["dispatches"] - before >= -(-attempts // 5) > 4
    for name in ("states", "t", "steps_taken", "steps_rejected", "status"):
        np.testing.assert_array_equal(getattr(got, name), getattr(whole, name), err_msg=name)


def test_a_split_run_is_the_whole_run_and_progress_rises_to_the_end(split):
    whole = solve(split)
    seen = []
    before = vgpu.cache_stats()["dispatches"]
    got = solve(split, progress=lambda done, total: seen.append((done, total)))
    assert vgpu.cache_stats()["dispatches"] - before >= whole.steps_taken.max()
    for name in ("states", "t", "steps_taken", "steps_rejected", "status"):
        np.testing.assert_array_equal(getattr(got, name), getattr(whole, name), err_msg=name)
    assert len(seen) >= whole.steps_taken.min() and seen[-1] == (64, 64)
    done = [d for d, _ in seen]
    assert done == sorted(done) and all(t == 64 for _, t in seen)


def test_a_call_from_a_progress_callback_runs_on_a_private_kernel(split):
    whole = solve(split)
    inner, out = [], []

    def callback(done, total):
        if len(inner) < 3:
            inner.append(solve(split))      # the same kernel, whose run is under way

    thread = threading.Thread(target=lambda: out.append(solve(split, progress=callback)),
                              daemon=True)
    thread.start()
    thread.join(120)
    assert out, "the run with a re-entrant progress callback did not finish"
    assert len(inner) == 3
    for sol in inner + out:
        np.testing.assert_array_equal(sol.states, whole.states)
        np.testing.assert_array_equal(sol.steps_taken, whole.steps_taken)


def test_an_interrupt_at_a_dispatch_boundary_stops_the_run_and_the_next_runs(split):
    whole = solve(split)
    calls = []

    def interrupt(done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve(split, progress=interrupt)
    assert len(calls) == 3                  # (stopped there: no dispatch after it)
    again = solve(split)
    np.testing.assert_array_equal(again.states, whole.states)
    np.testing.assert_array_equal(again.t, whole.t)
    np.testing.assert_array_equal(again.steps_taken, whole.steps_taken)
