"""Runtime faults of issue 19: fork, Ctrl-C, progress callbacks that call back, -0.0.

Everything that could hang (fork, signals, re-entry through a lock) runs in a fresh
interpreter with a timeout, and the test asserts that it finished. Results are
compared with the numpy reference backend.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import vgpu

ROOT = Path(__file__).resolve().parents[2]
NEEDS_GL = pytest.mark.skipif(os.environ.get("VGPU_NO_GL", "") not in ("", "0"),
                              reason="VGPU_NO_GL is set")


def _python(code: str, timeout: int = 240, **env) -> dict:
    """Run ``code`` in a fresh interpreter (it must end within ``timeout``); its last
    stdout line is JSON."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    full.update(env)
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung: still running after {timeout} s\n{(e.stderr or b'')[-2000:]!r}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PRELUDE = """
import json, os, signal, sys, threading, time, warnings
import numpy as np
# Ctrl-C as at a terminal, even when the tests themselves were started where SIGINT is
# ignored (a shell's background job), which the child would otherwise inherit
signal.signal(signal.SIGINT, signal.default_int_handler)
import vgpu
from vgpu_compiler.backends.glsl import device as gl
from vgpu_compiler.backends.glsl import plan as glsl_plan
from field_examples import HEAT, LORENZ
warnings.simplefilter("ignore")
RNG = np.random.default_rng(19)
H0 = RNG.normal(size=(40, 3))
REF = vgpu.run_field(LORENZ, H0, steps=30, backend="numpy")
def same(a, b=REF):
    return bool(np.array_equal(a, b))
"""


# --- item 1: fork ------------------------------------------------------------------------
FORK_CHILD = PRELUDE + """
assert same(vgpu.run_field(LORENZ, H0, steps=30, backend="glsl"))     # the parent uses GL
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    import logging
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("vgpu").addHandler(handler)
    out = {"auto": [same(vgpu.run_field(LORENZ, H0, steps=30)) for _ in range(3)],
           "reason": gl.GL.error}
    out["warnings"] = [r.levelname for r in records]
    grandchild = os.fork()
    if grandchild == 0:
        os._exit(0 if same(vgpu.run_field(LORENZ, H0, steps=30)) and gl.GL.error else 3)
    out["grandchild"] = os.waitpid(grandchild, 0)[1]
    try:
        vgpu.run_field(LORENZ, H0, steps=30, backend="glsl")
        out["glsl"] = "ran"
    except vgpu.BackendError as e:
        out["glsl"] = "BackendError"
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
child = json.loads(os.read(r, 65536).decode())
_, status = os.waitpid(pid, 0)
child["status"] = status
child["parent_after"] = same(vgpu.run_field(LORENZ, H0, steps=30, backend="glsl"))
print(json.dumps(child))
"""


@NEEDS_GL
def test_a_forked_child_of_a_gl_process_runs_on_numpy_and_says_why():
    out = _python(FORK_CHILD, timeout=120, VGPU_NO_WGPU="1",    # GL's fork handling alone
                  VGPU_NO_CPU="1")
    assert out["status"] == 0
    assert out["auto"] == [True] * 3
    assert out["warnings"] == ["WARNING"] * 3   # one per compiled backend, for three calls
    assert out["grandchild"] == 0               # a fork of the child: the same
    assert out["glsl"] == "BackendError"
    assert "forked" in out["reason"] and "spawn" in out["reason"]
    assert out["parent_after"] is True          # the parent's own context still works


FORK_POOL = PRELUDE + """
import multiprocessing as mp
def work(k):
    h0 = np.random.default_rng(k).normal(size=(8 + k, 3))
    got = vgpu.run_field(LORENZ, h0, steps=20 + k)
    return k, os.getpid(), got.tolist(), gl.GL.error
assert same(vgpu.run_field(LORENZ, H0, steps=30, backend="glsl"))
with mp.get_context("fork").Pool(3) as pool:
    results = pool.map_async(work, range(12), chunksize=1).get(timeout=120)
equal = [same(np.array(got), vgpu.run_field(LORENZ, np.random.default_rng(k).normal(
    size=(8 + k, 3)), steps=20 + k, backend="numpy")) for k, _, got, _ in results]
print(json.dumps({"equal": equal, "pids": len({p for _, p, _, _ in results}),
                  "reasons": sorted({str(e) for _, _, _, e in results})}))
"""


@NEEDS_GL
def test_a_fork_pool_after_the_parent_used_glsl():
    out = _python(FORK_POOL, timeout=180)       # wgpu too refuses in the forked workers
    assert out["equal"] == [True] * 12
    assert out["pids"] >= 2                     # several workers, several calls each
    assert len(out["reasons"]) == 1 and "forked" in out["reasons"][0]


FORK_FRESH = PRELUDE + """
pid = os.fork()          # GL never started in the parent: the child makes its own context
if pid == 0:
    ok = same(vgpu.run_field(LORENZ, H0, steps=30, backend="glsl"))
    os._exit(0 if ok and gl.GL.error is None else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": status,
                  "parent": same(vgpu.run_field(LORENZ, H0, steps=30, backend="glsl"))}))
"""


@NEEDS_GL
def test_a_child_forked_before_any_gl_use_makes_its_own_context():
    assert _python(FORK_FRESH, timeout=120) == {"status": 0, "parent": True}


FORK_BUSY = PRELUDE + """
stop = threading.Event()
runs = []
def busy():             # another thread keeps a many-dispatch GLSL run in flight
    with glsl_plan.limits(max_steps=5):
        while not stop.is_set():
            runs.append(same(vgpu.run_field(LORENZ, H0, steps=400, backend="glsl"),
                             vgpu.run_field(LORENZ, H0, steps=400, backend="numpy")))
t = threading.Thread(target=busy)
t.start()
statuses = []
for _ in range(6):
    time.sleep(0.15)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if same(vgpu.run_field(LORENZ, H0, steps=30)) else 3)
    statuses.append(os.waitpid(pid, 0)[1])
stop.set()
t.join()
print(json.dumps({"statuses": statuses, "runs": runs}))
"""


@NEEDS_GL
def test_forks_while_another_thread_runs_glsl():
    out = _python(FORK_BUSY, timeout=240)       # the children run on numpy (both GPU backends
                                                # refuse in a fork of a process that used one)
    assert out["statuses"] == [0] * 6
    assert out["runs"] and all(out["runs"])


# --- item 7: Ctrl-C ----------------------------------------------------------------------
CTRL_C = PRELUDE + """
from vgpu_compiler.call.counters import COUNTERS
big = RNG.normal(size=(256, 3)) * 0.01
vgpu.run_field(LORENZ, big, steps=10, backend="glsl")       # compiled before the clock
glsl_plan.set_limits(max_steps=20)
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
began = time.perf_counter()
try:        # without the interrupt: 10**7 steps in 500,000 dispatches (hours)
    vgpu.run_field(LORENZ, big, steps=10**7, backend="glsl")
    interrupted = False
except KeyboardInterrupt:
    interrupted = True
stopped = time.perf_counter() - began
glsl_plan.set_limits(max_steps=None)
d0 = COUNTERS.snapshot()["dispatches"]
began = time.perf_counter()
small = vgpu.run_field(LORENZ, H0, steps=30, backend="glsl")   # waits for no one
small_s = time.perf_counter() - began
time.sleep(0.5)
print(json.dumps({"interrupted": interrupted, "stopped": stopped, "small_s": small_s,
                  "small": same(small), "dispatches": COUNTERS.snapshot()["dispatches"] - d0}))
"""


@NEEDS_GL
def test_ctrl_c_stops_a_long_glsl_run_and_leaves_the_runtime_ready():
    out = _python(CTRL_C, timeout=240)
    assert out["interrupted"] is True
    assert out["stopped"] < 60
    assert out["small"] is True
    assert out["dispatches"] == 1               # nothing of the long run goes on
    assert out["small_s"] < 30


JOB_WAIT = """
import json, os, signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)    # as at a terminal
from vgpu_compiler.backends.glsl import device as gl
finished = []
def slow(ctx):
    time.sleep(1.0)
    finished.append(time.perf_counter())
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    gl.call(slow)
except KeyboardInterrupt:
    seen = time.perf_counter()
print(json.dumps({"done_first": bool(finished) and finished[0] <= seen}))
"""


@NEEDS_GL
def test_an_interrupted_caller_waits_for_its_gl_job_to_end():
    """The KeyboardInterrupt goes on only once the GL thread is done with the job, so
    the kernel lock the caller releases no longer covers GL work in flight."""
    assert _python(JOB_WAIT, timeout=60) == {"done_first": True}


# --- item 8: progress callbacks that call run_field -----------------------------------------
REENTRY = PRELUDE + """
main = threading.current_thread()
seen = {"threads": set(), "nested": []}
def callback(other):
    def progress(done, total):
        seen["threads"].add(threading.current_thread() is main)
        if len(seen["nested"]) < 2:         # a few nested calls: each may compile
            src, h0, steps = other
            got = vgpu.run_field(src, h0, steps=steps, backend="glsl")
            seen["nested"].append(same(got, vgpu.run_field(src, h0, steps=steps,
                                                           backend="numpy")))
    return progress
h_heat = RNG.uniform(size=128)
out = {}
with glsl_plan.limits(max_steps=7):
    for name, other in (("same", (LORENZ, H0, 30)), ("other", (HEAT, h_heat, 10)),
                        ("same_shape_other_steps", (LORENZ, H0, 12))):
        seen["nested"] = []
        sol = vgpu.solve(LORENZ, H0, steps=30, backend="glsl", progress=callback(other))
        out[name] = [same(sol.states)] + seen["nested"]
out["on_caller_thread"] = sorted(seen["threads"])
print(json.dumps(out))
"""


@NEEDS_GL
def test_a_progress_callback_may_call_run_field():
    out = _python(REENTRY, timeout=240)
    for name in ("same", "other", "same_shape_other_steps"):
        assert out[name] == [True, True, True], name    # outer run, then two nested
    assert out["on_caller_thread"] == [True]


# --- item 10: -0.0 -------------------------------------------------------------------------
RECIPROCAL = """
field reciprocal {
    param p
    state x
    dx/dt = 1 / p
    solve euler(dt = 1, steps = 1)
}
"""


@pytest.mark.filterwarnings("ignore::vgpu.NonFiniteWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_param_of_minus_zero_after_zero_is_sent(glsl, dtype):
    h0 = np.zeros(3)
    for p in (0.0, -0.0, 0.0, -0.0, float("nan"), float("nan"), 2.0, -0.0):
        got = vgpu.run_field(RECIPROCAL, h0, params={"p": p}, dtype=dtype, backend="glsl")
        ref = vgpu.run_field(RECIPROCAL, h0, params={"p": p}, dtype=dtype, backend="numpy")
        np.testing.assert_array_equal(got, ref)     # inf signs; NaN where NaN


# --- a kernel evicted between being found and being run --------------------------------------
@pytest.mark.parametrize("many", [False, True])
def test_a_kernel_evicted_after_it_was_found_still_runs(glsl, fresh_cache, many):
    """Another thread may evict (and release) a kernel after a call found it and before it
    took the kernel's lock: the run compiles a private program and releases it after."""
    from field_examples import LORENZ
    from vgpu_compiler.call.bind import bind
    from vgpu_compiler.backends.glsl.execute import execute
    from vgpu_compiler.backends.glsl.lookup import kernel_of_call
    from vgpu_compiler.backends.glsl.plan import limits
    field = vgpu.compile(LORENZ).select(None)
    h0 = np.random.default_rng(5).normal(size=(30, 3))
    every = 10 if many else None
    ref = vgpu.solve(LORENZ, h0, steps=40, save_every=every, backend="numpy")
    bound = bind(field, h0, None, None, None, "float32", None, 40, None, every)
    kernel = kernel_of_call(bound)
    assert glsl.MEMORY.evict(kernel.key) and kernel.program is None
    with limits(max_steps=7 if many else None), kernel.lock:
        sol = execute(kernel, bound, None)
    np.testing.assert_array_equal(sol.states, ref.states)
    if many:
        np.testing.assert_array_equal(sol.history, ref.history)
    assert kernel.program is None and not kernel.buffers     # released again


@NEEDS_GL
def test_a_callback_that_evicts_its_own_runs_kernel_does_not_deadlock():
    """clear_cache() (or a nested call that evicts the outer kernel) inside a progress
    callback: the eviction cannot wait for the run holding the kernel on the same
    thread; the kernel is retired and freed when that run ends, and both results hold."""
    out = _python("""
        import json
        import numpy as np, vgpu
        from vgpu_compiler.backends.glsl import plan as glsl_plan
        from vgpu_compiler.backends.glsl import runner as glsl_runner
        src = "field f {\\n state x\\n dx/dt = -x\\n solve euler(dt = 0.01, steps = 40)\\n}"
        other = "field g {\\n state y\\n dy/dt = 1\\n solve euler(dt = 1, steps = 3)\\n}"
        h0 = np.ones(8, np.float32)
        want = vgpu.run_field(src, h0, backend="numpy")
        seen = []
        def cb(done, total):
            if done < total and not seen:
                seen.append(vgpu.clear_cache(disk=False))
                seen.append(vgpu.run_field(other, h0, backend="glsl"))
        glsl_plan.set_limits(max_steps=5)
        got = vgpu.solve(src, h0, backend="glsl", progress=cb).states
        glsl_runner.set_memory_capacity(1)
        nested = []
        def cb2(done, total):
            if done < total and not nested:      # evicts the outer kernel (capacity 1)
                nested.append(vgpu.run_field(other, h0, backend="glsl"))
        got2 = vgpu.solve(src, h0, backend="glsl", progress=cb2).states
        again = vgpu.run_field(src, h0, backend="glsl")     # rebuilt after the retirement
        print(json.dumps({"ok": [bool(np.allclose(x, want, rtol=1e-6))
                                 for x in (got, got2, again)],
                          "nested": [seen[1].tolist(), nested[0].tolist()]}))
    """, timeout=120)
    assert out["ok"] == [True, True, True]
    assert out["nested"] == [[4.0] * 8, [4.0] * 8]


@pytest.mark.parametrize("var, value", [
    ("VGPU_MAX_STEPS_PER_DISPATCH", "ten"), ("VGPU_WORK_PER_DISPATCH", "-5"),
    ("VGPU_MAX_BLOCK_BYTES", "1e6"), ("VGPU_REDUCTION", "bogus")])
def test_a_bad_environment_value_is_a_backend_error_and_auto_moves_on(var, value):
    """A typo in a GLSL tuning variable: backend="glsl" raises a BackendError naming the
    variable, auto runs on numpy with one warning; never a raw ValueError."""
    out = _python("""
        import json, logging
        import numpy as np, vgpu
        src = "field f {\\n state x\\n dx/dt = -x\\n solve euler(dt = 0.5, steps = 2)\\n}"
        seen = []
        logging.getLogger("vgpu").addHandler(logging.Handler())
        logging.getLogger("vgpu").handlers[-1].emit = lambda r: seen.append(r.getMessage())
        try:
            vgpu.run_field(src, np.ones(3), backend="glsl")
            err = None
        except vgpu.BackendError as e:
            err = str(e)
        got = [vgpu.run_field(src, np.ones(3)).tolist() for _ in range(2)]
        print(json.dumps({"err": err, "got": got, "warnings": seen}))
    """, timeout=120, VGPU_NO_CPU="1", **{var: value})     # (auto would run cpu first)
    assert out["err"] is not None and var in out["err"]
    assert out["got"] == [[0.25, 0.25, 0.25]] * 2
    # one warning per compiled backend it moves past, each naming the variable (the GLSL
    # tuning variables are GLSL's: auto runs on cpu or wgpu where they are available;
    # wgpu reads VGPU_REDUCTION too); then no more
    named = [w for w in out["warnings"] if var in w]
    assert 1 <= len(named) <= 2 and all("VGPU_NO_CPU" in w for w in out["warnings"]
                                        if var not in w)
