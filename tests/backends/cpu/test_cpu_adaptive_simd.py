"""The cpu backend's adaptive kernel (templates/adaptive.c.j2) in lane loops the compiler
vectorises: every loop of a step attempt, the controller's too (its pow is libmvec's SIMD
variant, not one libm call per lane), and a block of several vectors (kernel.STEPPED_LANES) where
it has no events and no Jacobian. Before, the controller, the acceptance and the status
loops were scalar code with branches (a chain of choices on bools), one `powf` call per
lane and attempt, and a block was one vector: the tsit5 Lorenz sweep ran at 0.5-0.75x
GLSL on llvmpipe. The statuses those loops give are checked against the reference here,
the lanes of one block ending in different ways."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import kernel, toolchain
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir import controller as C

MVEC = platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc"

LORENZ = """field lorenz {
    param sigma = 10.0
    param rho = 28.0
    param beta = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve METHOD(t1 = 1, rtol = 1e-6, atol = 1e-6)
}"""


def _source(method: str, dtype: str) -> tuple[str, int]:
    field = compile_program(LORENZ.replace("METHOD", method), "f.field").select(None)
    text, _, lanes, _ = kernel.source(field, dtype)
    return text, lanes


def _gcc() -> bool:
    cc = toolchain.compiler()
    return bool(cc) and "Free Software Foundation" in toolchain._version_text(cc)


def _compile(text: str, tmp_path, extra) -> subprocess.CompletedProcess:
    c = tmp_path / "k.c"
    c.write_text(text)
    flags = [f for f in toolchain.flags(toolchain.compiler()) if f not in ("-shared", "-w")]
    return subprocess.run([toolchain.compiler(), *flags, *extra, "-S", "-o", "-", str(c)],
                          capture_output=True, text=True, check=True)


@pytest.mark.skipif(not MVEC, reason="libmvec's SIMD functions are glibc's, on x86-64")
def test_the_controller_calls_the_simd_pow_in_float32(cpu, tmp_path):
    """float32: libmvec's vector powf. float64 keeps libm's pow, one call a lane (libmvec's
    is within an ulp of it, and an ulp of a step size shows in float64 states: the event
    tests that compare float64 runs with the reference bit for bit,
    tests/backends/cpu/test_cpu_events.py::test_derivatives_reading_step_with_events)."""
    text, _ = _source("tsit5", "float32")
    asm = _compile(text, tmp_path, ()).stdout
    calls = re.findall(r"(?:call|jmp)\s+(\S+?)(?:@PLT)?\n", asm)
    assert any(f.startswith("_ZGV") and f.endswith("_powf") for f in calls), calls
    text64, _ = _source("tsit5", "float64")
    assert "vg_pow_libm(vg_err[l]" in text64


@pytest.mark.skipif(shutil.which("gcc") is None, reason="reads gcc's vectoriser report")
@pytest.mark.parametrize("method", ["tsit5", "dopri5", "bs3"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_lane_loop_of_an_attempt_vectorises(method, dtype, cpu, tmp_path):
    """gcc's report (-fopt-info-vec-missed) names no lane loop of the attempt loop that it
    could not vectorise, but those of the save_at times inside a step (a while loop per
    lane, run only where there are save_at times)."""
    if not _gcc():
        pytest.skip("the kernels' compiler is not gcc")
    text, lanes = _source(method, dtype)
    assert lanes == kernel.STEPPED_LANES[dtype]     # several vectors per block
    lines = text.splitlines()
    start = next(i for i, s in enumerate(lines) if "the step attempts of this call" in s)
    end = next(i for i, s in enumerate(lines) if "--- store ---" in s)
    saves = [i for i, s in enumerate(lines) if "if (u_nsave > 0) {" in s and start < i < end]
    skip = set()
    for i in saves:                                 # the save_at block: up to its closing brace
        depth, j = 0, i
        while True:
            depth += lines[j].count("{") - lines[j].count("}")
            skip.add(j)
            if depth == 0:
                break
            j += 1
    loops = {i + 1 for i in range(start, end)          # (float64's libm pow: one call a lane)
             if "for (int l = 0; l < VG_W; l++)" in lines[i] and i not in skip
             and "vg_pow_libm" not in lines[i + 1]}
    assert len(loops) >= 8
    report = _compile(text, tmp_path, ("-fopt-info-vec-missed",)).stderr
    failed = {int(m) for m in re.findall(r"k\.c:(\d+):\d+: missed: couldn't vectorize loop",
                                         report)}
    assert not loops & failed, [lines[i - 1].strip() for i in sorted(loops & failed)]


def test_events_and_rodas4_keep_one_vector_blocks(cpu):
    bounce = compile_program("""field ball {
        state y, v
        dy/dt = v
        dv/dt = -9.81
        when y < 0 {
            v = -0.9 * v
        }
        solve tsit5(t1 = 1)
    }""", "b.field").select(None)
    assert kernel.source(bounce, "float32")[2] == kernel.ADAPTIVE_LANES
    stiff = compile_program(LORENZ.replace("METHOD", "rodas4"), "s.field").select(None)
    assert kernel.source(stiff, "float64")[2] == kernel.ADAPTIVE_LANES


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lanes_of_one_block_end_as_the_reference_says(dtype, cpu):
    """One 64-lane block whose lanes end differently: at t1, at max_steps, by a step that
    underflows (x' = x^2 from x0 = 1 blows up at t = 1) and by a NaN; statuses, times,
    counts and states are the reference's."""
    src = """field mix {
        param k
        param c
        state x
        dx/dt = k * x * x - c * x
        solve dopri5(t1 = 2)
    }"""
    n = 80
    k, c, x0 = np.zeros(n), np.full(n, 0.5), np.ones(n)
    k[1::4] = 1.0                                   # blows up: status underflow
    c[2::4] = 1e4                                   # stiff: many steps, max_steps
    x0[3::8] = np.nan                               # NaN from the start
    kw = dict(params={"k": k, "c": c}, dtype=dtype, max_steps=40)
    with pytest.warns(vgpu.StatusWarning):
        ref = vgpu.solve(src, x0.astype(dtype), backend="numpy", **kw)
    with pytest.warns(vgpu.StatusWarning):
        got = vgpu.solve(src, x0.astype(dtype), backend="cpu", **kw)
    seen = set(ref.status.tolist())
    assert {0, C.MAX_STEPS, C.STEP_UNDERFLOW} <= seen, seen
    np.testing.assert_array_equal(got.status, ref.status)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(got.steps_rejected, ref.steps_rejected)
    np.testing.assert_allclose(got.t, ref.t, rtol=1e-5 if dtype == "float32" else 1e-12)
    # (the lanes near the blow-up and the stiff ones amplify an ulp of pow's: float32's
    # states agree to ~1e-4 there, before this kernel's changes too)
    np.testing.assert_allclose(got.states, ref.states, equal_nan=True,
                               rtol=1e-3 if dtype == "float32" else 1e-9)


def test_kept_step_arrays_are_zeroed_and_never_shared_with_a_solution(monkeypatch):
    """adaptive_run._scratch: a solve's b_ad and b_cnt are kept for the next solve of
    that shape, zeroed again. A kept array dirtied here still gives the same numbers, bit
    for bit, as the first solve's fresh arrays (the kernel's first call writes every row
    of every lane, so the zeroing is np.zeros' meaning kept, not relied on), the second
    solve takes the kept arrays and keeps them again, and no array of a Solution is a kept
    array's memory."""
    from vgpu_compiler.backends.cpu import adaptive_run
    monkeypatch.setattr(adaptive_run, "_scratch", {})
    src = """field decay {
        state x
        dx/dt = -x * x
        solve tsit5(t1 = 4, rtol = 1e-6, atol = 1e-6)
    }"""
    h0 = np.linspace(0.1, 20.0, 200).astype(np.float32)

    def solve():
        return vgpu.solve(src, h0, backend="cpu", dtype="float32")
    first = solve()
    kept = [a for arrays in adaptive_run._scratch.values() for a in arrays]
    assert len(kept) == 2
    for a in kept:
        a.fill(7)                   # what a stale array would hold
        for got in (first.states, first.t, first.steps_taken, first.steps_rejected,
                    first.status):
            assert not np.shares_memory(a, got)
    second = solve()
    assert [id(a) for arrays in adaptive_run._scratch.values() for a in arrays] == \
        [id(a) for a in kept]       # (taken, then kept again)
    for name in ("states", "t", "steps_taken", "steps_rejected", "status"):
        assert getattr(second, name).tobytes() == getattr(first, name).tobytes(), name
    assert first.steps_taken.min() > 3      # (steps were taken: the counters were used)
