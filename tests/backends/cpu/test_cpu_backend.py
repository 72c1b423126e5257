"""The cpu backend's own machinery: toolchain, caches, forks, threads, refusals.
(Its answers are tested against the reference with the other compiled backends in
test_glsl_equivalence.py and test_generated_programs.py.)"""
from __future__ import annotations

import multiprocessing as mp
import os
import platform
import re
import signal
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import kernel, toolchain

from field_examples import LORENZ

pytestmark = pytest.mark.usefixtures("cpu")
RNG = np.random.default_rng(7)
ROOT = Path(__file__).resolve().parents[3]


def test_a_missing_compiler_is_not_available_saying_why(monkeypatch):
    monkeypatch.setenv("VGPU_CC", "/nonexistent/cc")
    ok, why = toolchain._probe()
    assert not ok and "VGPU_CC=/nonexistent/cc is not an executable" in why


def test_auto_starts_the_probe_before_the_front_end_and_available_waits(monkeypatch):
    """Without GPU device nodes a call on auto (or cpu) starts the compiler probe in the
    background before it parses (it overlaps the front end); available() answers what
    that probe found. With a GPU device node, auto starts nothing (ranking would start
    a driver)."""
    from vgpu_compiler import backends as registry
    gate, ran = threading.Event(), []

    def probe():
        ran.append(threading.current_thread().name)
        gate.wait(30)
        return False, "the background probe's answer"
    for name, value in (("_probe", probe), ("_available", []), ("_pending", [])):
        monkeypatch.setattr(toolchain, name, value)
    monkeypatch.setattr(registry, "_probing", set())
    monkeypatch.setattr(registry, "no_gpu_devices", lambda: False)
    registry.start_probe("auto")
    assert not toolchain._pending and not ran       # a GPU machine: nothing started
    monkeypatch.setattr(registry, "_probing", set())
    monkeypatch.setattr(registry, "no_gpu_devices", lambda: True)
    registry.start_probe("auto")
    registry.start_probe("auto")
    assert len(toolchain._pending) == 1 and toolchain._pending[0].is_alive()
    gate.set()
    assert toolchain.available() == (False, "the background probe's answer")
    assert ran == ["vgpu-cpu-probe"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_during_a_background_probe_probes_for_itself(monkeypatch):
    """The probe thread does not survive a fork: the child neither waits for it nor
    takes its lock, it probes itself."""
    gate = threading.Event()

    def parents_probe():
        gate.wait(30)
        return False, "the parent's probe"
    monkeypatch.setattr(toolchain, "_probe", parents_probe)
    for name in ("_available", "_pending"):
        monkeypatch.setattr(toolchain, name, [])
    toolchain.start_probe()
    assert toolchain._pending[0].is_alive()
    pid = os.fork()
    if pid == 0:                        # the child: its own probe, within 20 s
        code = 1
        try:
            signal.alarm(20)
            toolchain._probe = lambda: (True, "the child's probe")
            code = 0 if toolchain.available() == (True, "the child's probe") else 2
        finally:
            os._exit(code)
    gate.set()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert toolchain.available() == (False, "the parent's probe")


def test_the_disk_cache_keeps_the_library(monkeypatch, tmp_path):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    h0 = RNG.normal(size=(100, 3)).astype(np.float32)
    src = LORENZ.replace("rk4", "heun")           # a kernel no other test compiled
    want = vgpu.run_field(src, h0, backend="cpu", steps=5)
    assert list((tmp_path / "cpu").glob("field-*.so"))
    kernel.clear_memory()
    vgpu.clear_cache(disk=False)

    def no_compiler(*a, **kw):
        raise AssertionError("compiled again")
    monkeypatch.setattr(toolchain, "_compile", no_compiler)
    again = src + "\n# a new text (prepared afresh), the same C kernel\n"
    np.testing.assert_array_equal(vgpu.run_field(again, h0, backend="cpu", steps=5), want)


def test_the_key_names_compiler_flags_and_cpu(monkeypatch):
    text = "int x;"
    k = toolchain.key(text)
    assert toolchain.key(text + " ") != k
    monkeypatch.setattr(toolchain, "FLAGS", toolchain.FLAGS + ("-O1",))
    assert toolchain.key(text) != k
    monkeypatch.undo()
    monkeypatch.setattr(toolchain, "cpu_features", lambda: "another cpu")
    assert toolchain.key(text) != k


def _child(q, src, h0):
    q.put(vgpu.run_field(src, h0, backend="cpu", steps=20))


def test_a_process_forked_after_a_run_still_runs():
    """OpenMP's threads do not survive fork: the child runs its kernels on one thread."""
    h0 = RNG.normal(size=(300, 3)).astype(np.float32)
    want = vgpu.run_field(LORENZ, h0, backend="cpu", steps=20)
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, LORENZ, h0))
    p.start()
    p.join(60)
    alive = p.is_alive()
    if alive:
        p.kill()
    assert not alive, "the forked child hung"
    np.testing.assert_array_equal(q.get(timeout=5), want)


def test_threads_calling_at_once_get_their_own_answers():
    h0s = [RNG.normal(size=(200 + 37 * i, 3)).astype(np.float32) for i in range(6)]
    want = [vgpu.run_field(LORENZ, h, backend="numpy", steps=30) for h in h0s]
    got = [None] * 6

    def work(i):
        got[i] = vgpu.run_field(LORENZ, h0s[i], backend="cpu", steps=30)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_float64_has_every_function():
    src = """field f { input w[N]
        grid i < N
        state y = sin(w[i]) + exp(w[i]) + log(1.5 + w[i]) + atan2(w[i], 0.3) + w[i] ^ 1.7
        dy/dt = 0
        solve euler(dt = 1, steps = 0) }"""
    w = np.linspace(0.1, 3, 500)
    ref = vgpu.run_field(src, inputs={"w": w}, backend="numpy", dtype="float64")
    got = vgpu.run_field(src, inputs={"w": w}, backend="cpu", dtype="float64")
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)


def test_clear_cache_drops_the_cpu_libraries(monkeypatch, tmp_path):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    vgpu.run_field(LORENZ.replace("rk4", "midpoint"), np.ones((4, 3), np.float32),
                   backend="cpu", steps=2)
    dropped = vgpu.clear_cache()
    assert dropped["cpu"]["memory"] >= 1 and dropped["cpu"]["disk"] == 1
    assert not list((tmp_path / "cpu").glob("*.so"))


def test_without_opengl_auto_runs_on_cpu(tmp_path):
    """A machine without a GL context: auto runs the cpu backend."""
    import os
    import subprocess
    import sys
    code = ("import numpy as np, vgpu; from vgpu_compiler.call.counters import COUNTERS\n"
            "src = vgpu.load('examples/lorenz.field')\n"
            "h0 = np.ones((50, 3), np.float32)\n"
            "a = vgpu.run_field(src, h0, steps=20); b = vgpu.run_field(src, h0, steps=20)\n"
            "ref = vgpu.run_field(src, h0, steps=20, backend='numpy')\n"
            "print(bool((a == ref).all() and (b == ref).all()), COUNTERS.snapshot()['compiles'])")
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, VGPU_NO_GL="1", VGPU_CACHE_DIR=str(tmp_path), PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "1"]
    # auto ranks a GPU backend without a device after the native CPU ones: cpu runs first,
    # and nothing falls back to the numpy reference
    assert "numpy reference" not in proc.stderr, proc.stderr


def test_vgpu_no_cpu_switches_it_off(monkeypatch):
    monkeypatch.setenv("VGPU_NO_CPU", "1")
    ok, why = toolchain.available()
    assert not ok and "VGPU_NO_CPU" in why
    with pytest.raises(vgpu.BackendError, match="cpu backend is not available"):
        vgpu.run_field(LORENZ, np.ones((2, 3)), backend="cpu", steps=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_flux_sums_are_the_references_bit_for_bit(dtype):
    """Deposits are summed on the host in the reference's lane order: the same float sums
    (GLSL's float32 atomics add in whatever order lanes arrive)."""
    src = """field f {
        output h[7]
        grid i < N
        basin l < 5
        state x
        dx/dt = -0.3 * x
        solve rk4(dt = 0.1, steps = 20)
        flux h[i % 7] += x * 1.37 + 0.01 * float(i)
    }"""
    h0 = RNG.normal(size=1003)
    ref = vgpu.solve(src, h0, backend="numpy", dtype=dtype)
    got = vgpu.solve(src, h0, backend="cpu", dtype=dtype)
    np.testing.assert_array_equal(got.states, ref.states)
    np.testing.assert_array_equal(got.outputs["h"], ref.outputs["h"])


def test_a_field_too_large_to_compile_is_refused_and_auto_moves_on(monkeypatch):
    monkeypatch.setenv("VGPU_CPU_MAX_STATES", "3")
    src = "field f {\n state a, b, c, d\n da/dt = -a\n db/dt = -b\n dc/dt = -c\n" \
          " dd/dt = -d\n solve euler(dt = 0.1, steps = 2)\n}"
    h0 = np.ones((5, 4), np.float32)
    with pytest.raises(vgpu.BackendError, match="at most 3 .*VGPU_CPU_MAX_STATES"):
        vgpu.run_field(src, h0, backend="cpu")
    np.testing.assert_array_equal(vgpu.run_field(src, h0),
                                  vgpu.run_field(src, h0, backend="numpy"))


def test_a_long_run_is_several_calls_with_the_same_answer(monkeypatch):
    """Ctrl-C stops a long run at the next call: the same numbers, however it is cut."""
    from vgpu_compiler.backends.cpu import runner
    from vgpu_compiler.call.counters import COUNTERS
    h0 = RNG.normal(size=(500, 3)).astype(np.float32)
    whole = vgpu.solve(LORENZ, h0, backend="cpu", steps=97, save_every=10)
    monkeypatch.setattr(runner, "WORK_PER_CALL", 512 * 7)       # 7 steps a call
    before = COUNTERS.snapshot()["dispatches"]
    cut = vgpu.solve(LORENZ, h0, backend="cpu", steps=97, save_every=10)
    assert COUNTERS.snapshot()["dispatches"] - before >= 97 // 7
    np.testing.assert_array_equal(cut.states, whole.states)
    np.testing.assert_array_equal(cut.history, whole.history)


def test_an_adaptive_run_cut_into_calls_has_the_same_answer(monkeypatch):
    """An adaptive run is kernel calls of a few step attempts each (Ctrl-C, progress):
    every trajectory resumes where it stopped, so the numbers do not depend on the cut."""
    from vgpu_compiler.backends.cpu import runner
    src = LORENZ.replace("rk4(dt = 0.01, steps = 1000)", "dopri5(t1 = 1)")
    assert "dopri5" in src
    h0 = RNG.normal(size=(70, 3))
    kw = dict(backend="cpu", dtype="float64", save_at=np.linspace(0, 1, 7), rtol=1e-7)
    whole = vgpu.solve(src, h0, **kw)
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1)            # one attempt a call
    seen = []
    cut = vgpu.solve(src, h0, progress=lambda done, total: seen.append((done, total)), **kw)
    assert len(seen) >= whole.steps_taken.max() and seen[-1] == (70, 70)
    for name in ("states", "history", "t", "steps_taken", "steps_rejected", "status"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(whole, name), err_msg=name)


def test_a_run_time_error_in_an_adaptive_kernel_is_the_references():
    src = """field f {
        input w[M]
        state x
        dx/dt = w[int(x)]
        solve tsit5(t1 = 4)
    }"""
    w = np.ones(3)
    for backend in ("numpy", "cpu"):
        with pytest.raises(vgpu.ProgramIndexError, match=r"w\[3\] but input w has shape "
                                                         r"\(3,\) \(line 4\)"):
            vgpu.solve(src, np.zeros(2), inputs={"w": w}, backend=backend, dtype="float64")
    ok = vgpu.solve(src, np.zeros(2), inputs={"w": w}, backend="cpu", dtype="float64", t1=2.5)
    np.testing.assert_allclose(ok.states, 2.5)


@pytest.mark.skipif(not (platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc"),
                    reason="libmvec's SIMD functions are glibc's, on x86-64")
@pytest.mark.parametrize("name", ["kuramoto", "ou"])
def test_lane_loops_call_the_simd_functions(name, tmp_path):
    """Kuramoto's sin/cos (coupled values and derivative) and the noise's log/cos run as
    libmvec vector calls, not one libm call per lane (that was 7x slower on Kuramoto)."""
    from vgpu_compiler.frontend.compile import compile_program
    src = (ROOT / "examples" / f"{name}.field").read_text()
    field = compile_program(src, f"{name}.field").select(None)
    c = tmp_path / "k.c"
    c.write_text(kernel.source(field, "float32")[0])
    flags = [f for f in toolchain.FLAGS if f != "-shared"]
    asm = subprocess.run([toolchain.compiler(), *flags, "-S", "-o", "-", str(c)],
                         capture_output=True, text=True, check=True).stdout
    calls = re.findall(r"call\s+(\S+?)(?:@PLT)?\n", asm)
    scalar = [f for f in calls if f in {"sin", "cos", "sincos", "sinf", "cosf", "sincosf", "logf"}]
    vector = [f for f in calls if f.startswith("_ZGV")]
    assert vector and not scalar, (vector, scalar)


def test_a_small_call_runs_on_the_calling_thread_and_a_large_one_in_parallel(monkeypatch):
    """Waking OpenMP's team costs more than a call of a few thousand lane-steps (a 16x16
    matmul: 2.5 ms a call in parallel on a loaded machine, 0.1 ms serial): such a call runs
    vg_kernel_serial; a call of many blocks and steps runs vg_kernel."""
    from vgpu_compiler.backends.cpu import runner
    used = []
    real = runner._Call._run

    def spy(self, ints, nsteps):
        fn, serial = self.k.fn, self.k.serial
        calls = {"fn": 0, "serial": 0}

        class Entry:
            def __init__(self, name, f):
                self.name, self.f = name, f

            def __call__(self, *a):
                calls[self.name] += 1
                return self.f(*a)
        self.k = kernel.CpuKernel(self.k.source, self.k.meta, self.k.lanes, self.k.n_int,
                                  Entry("fn", fn), self.k.lib, Entry("serial", serial))
        try:
            return real(self, ints, nsteps)
        finally:
            used.append((self.nblocks, nsteps, "serial" if calls["serial"] else "fn"))
    monkeypatch.setattr(runner._Call, "_run", spy)
    h0 = RNG.random((256, 3)).astype(np.float32)
    small = vgpu.run_field(LORENZ, h0, steps=2, dt=0.01, backend="cpu")
    assert used and all(u[2] == "serial" for u in used)
    used.clear()
    h0 = RNG.random((65536, 3)).astype(np.float32)
    big = vgpu.run_field(LORENZ, h0, steps=20, dt=0.01, backend="cpu")
    assert any(u[2] == "fn" for u in used if u[1] > 0), used
    ref = vgpu.run_field(LORENZ, h0, steps=20, dt=0.01, backend="numpy")
    np.testing.assert_allclose(np.asarray(big), np.asarray(ref), rtol=1e-5, atol=1e-5)
    assert np.isfinite(np.asarray(small)).all()
