"""A Simulation's life beyond advancing: interrupted (Ctrl-C), closed, forked, too
long, too large, restored from a damaged or foreign checkpoint, pickled, and fed arrays
the caller changes afterwards, on every backend.

An interrupt is a SIGINT raised inside a chosen dispatch (numpy: step) of an advance;
whatever it stops, the simulation's step, t, noise counter, flux and state agree with
a run of the steps it says it ran (the same backend bit for bit, numpy closely), and
the next advance goes on from there. What could abort the process runs in a child."""
from __future__ import annotations

import copy
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import vgpu

from conftest import COMPILED_BACKENDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LORENZ = open(os.path.join(ROOT, "examples/lorenz.field")).read()
OU = open(os.path.join(ROOT, "examples/ou.field")).read()
TSIT5 = open(os.path.join(ROOT, "examples/lorenz_tsit5.field")).read()
BASIN = """
field shrink {
    param k = 1.0
    output H[4]
    grid i < N
    basin l < 8
    state x, y = 0
    coupled s = x
    dx/dt = -k * x + 0.1 * mean(s)
    dy/dt = x - init(x) + t
    collapse when x < 0.9
    solve rk4(dt = 0.05, steps = 40)
    flux H[clamp(int(x * 4), 0, 3)] += 1 + step
}
"""
MIX = """
field mix {
    param k = 1.0
    input W[N]
    grid i < N
    state x
    dx/dt = -k * x + W[i]
    solve rk4(dt = 0.1, steps = 10)
}
"""


@pytest.fixture(params=("numpy",) + COMPILED_BACKENDS)
def backend(request):
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def _child(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (this checkout's vgpu), its output captured."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# --- Ctrl-C -------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def python_sigint():
    """SIGINT has Python's own handler here (the one a user's Ctrl-C meets), whatever an
    earlier test or library in this process left in force."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def small_dispatches(backend, monkeypatch, request):
    """Dispatches of a few steps each (numpy takes one step at a time anyway)."""
    if backend == "cpu":
        from vgpu_compiler.backends.cpu import runner as cpu_runner
        monkeypatch.setattr(cpu_runner, "WORK_PER_CALL", 1)        # one step a call
    elif backend == "glsl":
        from vgpu_compiler.backends.glsl import plan
        old = plan.set_limits(max_steps=3)
        request.addfinalizer(lambda: plan.set_limits(**old))
    elif backend == "wgpu":
        from vgpu_compiler.backends.wgpu import runner
        old = runner.set_limits(max_steps=3)
        request.addfinalizer(lambda: runner.set_limits(**old))


def _sigint_in(backend, sim, monkeypatch, nth: int, adaptive: bool = False) -> list:
    """From now on, a SIGINT is raised inside the ``nth`` dispatch of ``sim`` (after its
    work, before it returns); returns the list counting dispatches."""
    calls = [0]

    def wrap(fn):
        def dispatch(*args, **kwargs):
            out = fn(*args, **kwargs)
            calls[0] += 1
            if calls[0] == nth:
                signal.raise_signal(signal.SIGINT)
            return out
        return dispatch

    session = sim._session
    if backend == "numpy":
        target = session.run if not adaptive else session
        name = "step" if not adaptive else "_advance_to"
        monkeypatch.setattr(target, name, wrap(getattr(target, name)))
    else:       # glsl, wgpu, cpu: runtime/fixed_session.py (adaptive_session.py) on the Target
        monkeypatch.setattr(session.target, "trip", wrap(session.target.trip))
    return calls


@pytest.mark.parametrize("field", ["basin", "noise"])
def test_an_interrupted_advance_counts_the_steps_it_ran(backend, field, monkeypatch,
                                                        small_dispatches):
    if field == "basin":
        src, h0 = BASIN, np.linspace(0.5, 3, 40).astype(np.float32)
        kw = dict(dims={"N": 40}, params={"k": np.linspace(0.2, 2, 40).astype(np.float32)})
    else:
        src, h0, kw = OU, np.linspace(-1, 2, 64).astype(np.float32), dict(seed=5)
    sim = vgpu.Simulation(src, h0, backend=backend, **kw)
    sim.advance(2)
    calls = _sigint_in(backend, sim, monkeypatch, nth=3)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(30)
    assert calls[0] == 3
    done = sim.step
    assert 2 < done < 32           # the dispatches that ran are counted, the rest not
    ran = vgpu.solve(src, h0, backend=backend, steps=done, **kw)
    np.testing.assert_array_equal(sim.states, ran.states)
    np.testing.assert_array_equal(sim.steps_taken, ran.steps_taken)
    np.testing.assert_array_equal(sim.t, ran.t)
    for name, value in ran.outputs.items():        # the flux on the state reached
        np.testing.assert_array_equal(sim.outputs[name], value)
    oracle = vgpu.solve(src, h0, backend="numpy", steps=done, **kw)
    np.testing.assert_allclose(sim.states, oracle.states, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(sim.steps_taken, oracle.steps_taken)
    sim.advance(32 - done)          # and it goes on as one run of all the steps
    np.testing.assert_array_equal(sim.states, vgpu.solve(src, h0, backend=backend,
                                                         steps=32, **kw).states)


def test_an_interrupted_advance_of_chunks_goes_back(glsl, monkeypatch):
    """A glsl run of several chunks runs each chunk's steps in turn: interrupted, the
    advance is undone (the host keeps the arrays of before it)."""
    from vgpu_compiler.backends.glsl import plan
    h0 = np.linspace(0.5, 3, 40).astype(np.float32)
    with plan.limits(max_steps=3, max_block=2 * 4 * 16):     # chunks of 16 (2 basins)
        sim = vgpu.Simulation(BASIN, h0, backend="glsl", dims={"N": 40})
    assert not sim._session.resident
    sim.advance(4)
    before = sim.states
    _sigint_in("glsl", sim, monkeypatch, nth=5)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(20)
    assert sim.step == 4
    np.testing.assert_array_equal(sim.states, before)
    ran = vgpu.solve(BASIN, h0, backend="glsl", dims={"N": 40}, steps=4)
    np.testing.assert_array_equal(sim.outputs["H"], ran.outputs["H"])
    sim.advance(21)
    np.testing.assert_array_equal(sim.states, vgpu.run_field(BASIN, h0, backend="glsl",
                                                             dims={"N": 40}, steps=25))


def test_an_interrupted_wgpu_advance_of_chunks_goes_back(wgpu, monkeypatch, request):
    from vgpu_compiler.backends.wgpu import runner
    h0 = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    # chunks of 24 trajectories (3 states x 4 bytes each): (0, 24), (24, 40)
    old = runner.set_limits(max_steps=3, max_block=24 * 3 * 4)
    request.addfinalizer(lambda: runner.set_limits(**old))
    sim = vgpu.Simulation(LORENZ, h0, backend="wgpu")
    assert sim._session.target.chunks == [(0, 24), (24, 40)]
    assert not sim._session.resident
    sim.advance(4)
    before = sim.states
    _sigint_in("wgpu", sim, monkeypatch, nth=9)         # (chunk 0 took 7 dispatches)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(20)
    assert sim.step == 4
    np.testing.assert_array_equal(sim.states, before)
    sim.advance(21)
    np.testing.assert_array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend="wgpu",
                                                             steps=25))


def test_an_interrupted_adaptive_advance_is_finished_by_the_next(backend, monkeypatch):
    h0 = np.tile(np.float32([1, 0, 0]), (16, 1))
    kw = dict(params={"rho": np.linspace(0, 21, 16).astype(np.float32)})
    sim = vgpu.Simulation(TSIT5, h0, backend=backend, **kw)
    sim.advance(until=0.25)
    _sigint_in(backend, sim, monkeypatch, nth=1, adaptive=True)
    with pytest.raises(KeyboardInterrupt):
        sim.advance(until=0.75)
    for read in ("states", "t", "status", "steps_taken"):
        with pytest.raises(vgpu.CallError, match="interrupted"):
            getattr(sim, read)
    with pytest.raises(vgpu.CallError, match="interrupted"):
        sim.advance(until=0.5)       # some trajectories may be past 0.5 already
    sim.advance(until=0.75)
    sol = vgpu.solve(TSIT5, h0, backend=backend, save_at=[0.25, 0.75], **kw)
    np.testing.assert_array_equal(sim.states, sol.history[1])
    sim.advance(until=1.0)
    whole = vgpu.solve(TSIT5, h0, backend=backend, **kw)
    np.testing.assert_array_equal(sim.states, whole.states)
    np.testing.assert_array_equal(sim.steps_taken, whole.steps_taken)


def test_ctrl_c_in_a_wgpu_read_back_leaves_the_session_usable(wgpu):
    """A Ctrl-C while a dispatch's read-back is being mapped: before, the staging buffer
    stayed mapped and the next advance made wgpu-native abort the process."""
    proc = _child("""
        import signal, numpy as np, vgpu
        from vgpu_compiler.backends.wgpu import dispatch, runner
        LORENZ = open("examples/lorenz.field").read()
        h0 = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
        runner.set_limits(max_steps=10)                 # an advance of many dispatches
        sim = vgpu.Simulation(LORENZ, h0, backend="wgpu")
        sim.advance(3)
        start, calls = dispatch._map_read, [0]
        def interrupted(staging):
            promise = start(staging)        # the mapping is under way: Ctrl-C now
            calls[0] += 1
            if calls[0] == 2:
                signal.raise_signal(signal.SIGINT)
            return promise
        dispatch._map_read = interrupted
        try:
            sim.advance(1000)
        except KeyboardInterrupt:
            print("interrupted at", sim.step)
        dispatch._map_read = start
        sim.advance(5)
        assert np.array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend="wgpu",
                                                         steps=sim.step))
        print("went on to", sim.step)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted at" in proc.stdout and "went on to" in proc.stdout


@pytest.mark.parametrize("compiled", COMPILED_BACKENDS)
def test_ctrl_c_at_any_time_then_more_advances(compiled, request):
    """Real SIGINTs from a timer, at times that land anywhere in a long advance."""
    request.getfixturevalue(compiled)
    proc = _child(f"""
        import os, signal, threading, numpy as np, vgpu
        from vgpu_compiler.backends.cpu import runner
        runner.WORK_PER_CALL = 1 << 20                  # cpu: calls of ~16k steps
        OU = open("examples/ou.field").read()
        h0 = np.linspace(-1, 2, 64).astype(np.float32)
        sim = vgpu.Simulation(OU, h0, backend={compiled!r}, seed=3)
        for i in range(5):
            threading.Timer(0.02 + 0.031 * i, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                sim.advance(10 ** 8)
            except KeyboardInterrupt:
                pass
            assert sim.step < 10 ** 8 * (i + 1)
        sim.advance(7)
        n = sim.step
        whole = vgpu.run_field(OU, h0, backend={compiled!r}, seed=3, steps=n)
        assert np.array_equal(sim.states, whole), n
        print("steps", n)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "steps" in proc.stdout


# --- closed ----------------------------------------------------------------------------------
USES = {
    "advance": lambda s: s.advance(1), "advance until": lambda s: s.advance(until=0.5),
    "states": lambda s: s.states, "steps_taken": lambda s: s.steps_taken,
    "outputs": lambda s: s.outputs, "t": lambda s: s.t, "status": lambda s: s.status,
    "steps_rejected": lambda s: s.steps_rejected, "until": lambda s: s.until,
    "step": lambda s: s.step, "solution": lambda s: s.solution(),
    "set_params": lambda s: s.set_params(k=2.0), "set_input": lambda s: s.set_input(
        "W", np.ones(8, np.float32)), "set_state": lambda s: s.set_state(np.ones(8)),
    "save": lambda s: s.save(s._probe_path),
}


@pytest.mark.parametrize("kind", ["fixed", "adaptive"])
def test_a_closed_simulation_says_so(backend, kind, tmp_path):
    if kind == "fixed":
        sim = vgpu.Simulation(MIX, np.ones(8, np.float32), backend=backend,
                              inputs={"W": np.ones(8, np.float32)})
        sim.advance(2)
    else:
        sim = vgpu.Simulation(TSIT5, np.ones((8, 3), np.float32), backend=backend)
        sim.advance(until=0.25)
    sim.states
    sim.close()
    sim._probe_path = tmp_path / "closed.npz"
    for name, use in USES.items():
        with pytest.raises(vgpu.CallError, match="closed") as caught:
            use(sim)
        assert "Simulation" in str(caught.value), name
    sim.close()                     # again: nothing
    with sim:
        pass
    assert "closed" in repr(sim) and not sim._probe_path.exists()


# --- a forked child ----------------------------------------------------------------------------
def test_a_forked_child_is_told_or_runs(backend):
    """GPU buffers do not survive a fork: on glsl and wgpu the child gets a BackendError
    (before: a hang on wgpu, a raw NoContext on glsl); numpy and cpu run there."""
    proc = _child(f"""
        import os, time, numpy as np, vgpu
        LORENZ = open("examples/lorenz.field").read()
        h0 = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
        sim = vgpu.Simulation(LORENZ, h0, backend={backend!r})
        sim.advance(3)
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                sim.advance(2)
                ok = np.array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend={backend!r},
                                                                steps=5))
                code = 0 if ok else 4
            except vgpu.BackendError as e:
                code = 2 if "fork" in str(e) and "save()" in str(e) else 5
            finally:
                os._exit(code)
        for _ in range(600):            # a child that hangs is killed after a minute
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = None
        print("child", "hung" if status is None else os.waitstatus_to_exitcode(status))
        sim.advance(2)                  # the parent's simulation is untouched
        assert np.array_equal(sim.states, vgpu.run_field(LORENZ, h0, backend={backend!r},
                                                         steps=5))
    """, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = 2 if backend in ("glsl", "wgpu") else 0
    assert f"child {want}" in proc.stdout, (proc.stdout, proc.stderr[-3000:])


# --- the step counter's width -------------------------------------------------------------------
def test_steps_past_the_32_bit_counter_are_refused_at_once(backend):
    sim = vgpu.Simulation(LORENZ, np.ones((4, 3), np.float32), backend=backend)
    sim.advance(1)
    for steps in (2 ** 31, 2 ** 31 - 1, 2 ** 40):
        with pytest.raises(vgpu.CallError, match="2147483647"):
            sim.advance(steps)
    with pytest.raises(vgpu.CallError, match="2147483647"):
        sim.advance(until=1e12)
    assert sim.step == 1
    sim.advance(2)
    np.testing.assert_array_equal(sim.states, vgpu.run_field(
        LORENZ, np.ones((4, 3), np.float32), backend=backend, steps=3))


# --- checkpoints --------------------------------------------------------------------------------
def _rewrite(src, dst, **change):
    """A copy of checkpoint ``src`` with arrays changed (None: left out)."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    for k, v in change.items():
        k = k.replace("__", ":")
        if v is None:
            arrays.pop(k)
        else:
            arrays[k] = v(arrays[k]) if callable(v) else v
    np.savez(dst, **arrays)
    return dst


def test_a_checkpoint_of_another_run_is_refused(backend, tmp_path):
    h0 = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32)
    sim = vgpu.Simulation(LORENZ, h0, backend=backend)
    sim.advance(5)
    good = tmp_path / "good.npz"
    sim.save(good)
    one = _rewrite(good, tmp_path / "one.npz", snap__state=lambda a: a[:, :1],
                   snap__init=lambda a: a[:, :1])
    with pytest.raises(vgpu.CallError, match="one.npz.*state has shape \\(3, 1\\)"):
        vgpu.Simulation.load(one)
    back = _rewrite(good, tmp_path / "back.npz", snap__step=np.int64(-3))
    with pytest.raises(vgpu.CallError, match="back.npz.*step -3"):
        vgpu.Simulation.load(back)
    again = vgpu.Simulation.load(good)
    np.testing.assert_array_equal(again.states, sim.states)


def test_a_damaged_checkpoint_is_a_call_error_naming_it(tmp_path):
    sim = vgpu.Simulation(TSIT5, np.ones((8, 3), np.float32), backend="numpy")
    sim.advance(until=0.5)
    good = tmp_path / "good.npz"
    sim.save(good)
    raw = good.read_bytes()
    cases = {
        "cut.npz": lambda p: p.write_bytes(raw[:len(raw) // 2]),
        "empty.npz": lambda p: p.write_bytes(b""),
        "text.npz": lambda p: p.write_text("not a checkpoint"),
        "nostate.npz": lambda p: _rewrite(good, p, snap__state=None),
        "noctl.npz": lambda p: _rewrite(good, p, **{"snap__ad:k0": None}),
        "badctl.npz": lambda p: _rewrite(good, p, **{"snap__ad:dt": np.zeros(3)}),
        "format.npz": lambda p: _rewrite(good, p, format=np.str_("abc")),
        "seed.npz": lambda p: _rewrite(good, p, seed=np.str_("x")),
        "objects.npz": lambda p: np.savez(p, format=np.array([object()], dtype=object)),
    }
    for name, make in cases.items():
        path = tmp_path / name
        make(path)
        with pytest.raises(vgpu.CallError, match=name):
            vgpu.Simulation.load(path)
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:       # a member not .npy
        z.writestr("format.npy", b"\x93NUMPY garbage")
    with pytest.raises(vgpu.CallError, match="bad.npz"):
        vgpu.Simulation.load(tmp_path / "bad.npz")
    vgpu.Simulation.load(good)


# --- the caller's arrays ------------------------------------------------------------------------
def test_the_caller_changing_its_arrays_changes_nothing(backend, tmp_path):
    rng = np.random.default_rng(2)
    h0, W = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    k = np.linspace(0.5, 2, 8).astype(np.float32)
    keep = h0.copy(), W.copy(), k.copy()
    sim = vgpu.Simulation(MIX, h0, backend=backend, params={"k": k}, inputs={"W": W})
    for a in (h0, W, k):
        a[:] = 100.0                # after construction, before the first step
    sim.advance(6)
    whole = vgpu.run_field(MIX, keep[0], backend=backend, params={"k": keep[2]},
                           inputs={"W": keep[1]}, steps=6)
    np.testing.assert_array_equal(sim.states, whole)
    sim.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as z:
        np.testing.assert_array_equal(z["h0"], keep[0])
        np.testing.assert_array_equal(z["inputs:W"], keep[1])
        np.testing.assert_array_equal(z["params:k"], keep[2])
    W2, k2, s2 = keep[1] * 2, keep[2] / 2, sim.states + 1
    sim.set_input("W", W2)
    sim.set_params(k=k2)
    sim.set_state(s2)
    want = sim.states
    for a in (W2, k2, s2):
        a[:] = -7.0
    np.testing.assert_array_equal(sim.states, want)
    sim.advance(3)
    ref = vgpu.Simulation.load(tmp_path / "c.npz", backend=backend)     # the same calls,
    ref.set_input("W", keep[1] * 2)                                      # of arrays no one
    ref.set_params(k=keep[2] / 2)                                        # changes
    ref.set_state(want)
    ref.advance(3)
    np.testing.assert_array_equal(sim.states, ref.states)


# --- too large; pickling ------------------------------------------------------------------------
def test_a_simulation_too_large_for_memory_is_a_call_error(monkeypatch):
    from vgpu_compiler.backends.numpy import session as numpy_session

    def no_memory(self, data):
        raise MemoryError()

    monkeypatch.setattr(numpy_session.Session, "_open", no_memory)
    with pytest.raises(vgpu.CallError, match=r"out of memory running field lorenz on a grid "
                                             r"of shape \(1000,\) \(1000 trajectories, "
                                             r"0\.00 GiB of states alone\)"):
        vgpu.Simulation(LORENZ, np.ones((1000, 3), np.float32), backend="numpy")


def test_pickling_says_save_and_load(backend, tmp_path):
    sim = vgpu.Simulation(LORENZ, np.ones((4, 3), np.float32), backend=backend)
    for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(vgpu.VgpuError, match=r"save\(path\).*load\(path\)") as caught:
            attempt(sim)
        assert isinstance(caught.value, TypeError)
    sim.advance(2)
    np.testing.assert_array_equal(sim.states, vgpu.run_field(
        LORENZ, np.ones((4, 3), np.float32), backend=backend, steps=2))


def test_a_read_back_interrupted_in_its_wait_still_unmaps():
    """A second Ctrl-C (the first is held) in the wait for a wgpu mapping: the mapping is
    still waited for and undone before the interrupt goes on."""
    from vgpu_compiler.backends.wgpu.dispatch import _mapped
    calls = []

    class Staging:
        map_state = "unmapped"

        def map_async(self, mode):
            self.map_state = "pending"
            return self

        def sync_wait(self):
            calls.append("wait")
            if len(calls) == 1:
                raise KeyboardInterrupt
            self.map_state = "mapped"

        def unmap(self):
            calls.append("unmapped")
            self.map_state = "unmapped"
    staging = Staging()
    with pytest.raises(KeyboardInterrupt):
        _mapped(staging, 16)
    assert calls == ["wait", "wait", "unmapped"] and staging.map_state == "unmapped"
