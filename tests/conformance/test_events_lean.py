"""The plain steps of a fixed-step method's event kernel (templates' fixed_lean; shader/
events.LEAN_STEPS) change no number: on GLSL, wgpu and cpu, a kernel with them and one
without (LEAN_STEPS = 0: every step through the event code) give the same states,
times, step and event counts, status, flux (a shared float output to its atomics'
rounding) and save_every history, bit for bit; and so
does a run cut into many dispatches (or calls). Both are checked against the numpy
reference as the other event tests do (counts exactly, states to rounding)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.shader import events as shader_events
from vgpu_compiler.errors import StatusWarning

from event_fields import ball, lif, reference

HEIGHTS = np.array([1.0, 1.3, 1.9, 2.4, 0.7, 1.1, 3.0, 0.4, 2.2])

# derivatives that read t and step, an event that fires often and one that stops,
# flux at each firing into a float output of the lane's own (ends) and a shared one
CLOCKED = """field clocked {
    param w = 1.0
    output ends[N], hits[10]
    state x = 0, n = 0
    dx/dt = w * (1 + 0.5 * sin(3 * t)) + 0.001 * float(step % 7)
    dn/dt = 0
    when x > 0.3 { x = x - 0.3; n = n + 1; flux hits[clamp(int(t), 0, 9)] += 0.1 * w; flux ends[i] += t }
    stop when n >= 25
    solve rk4(dt = 0.01, steps = 900)
}"""


def _cases():
    current = np.linspace(0.6, 4.0, 70)
    return {
        "lif-euler": (lif("euler(dt = 2e-4, steps = 3000)"), None,
                      {"params": {"I": current}, "dims": {"N": 70}}),
        "lif-rk4-save-every": (lif("rk4(dt = 5e-4, steps = 1200)"), None,
                               {"params": {"I": current}, "dims": {"N": 70},
                                "save_every": 50}),
        "ball-rk4": (ball("rk4(dt = 0.01, steps = 1000)"), HEIGHTS,
                     {"params": {"K": np.arange(3, 12, dtype=float)}}),
        "clocked": (CLOCKED, None, {"params": {"w": np.linspace(0.5, 3.0, 33)},
                                    "dims": {"N": 33}}),
    }


CASES = _cases()


def _solve(src, h0, backend, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StatusWarning)
        return vgpu.solve(src, h0, backend=backend, **kw)


def _same(a, b, rtol=0.0):
    """Bit for bit (``rtol``: states, times, outputs and history to it, counts exactly)."""
    if rtol:
        np.testing.assert_allclose(a.states, b.states, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(a.t, b.t, rtol=rtol)
    else:
        np.testing.assert_array_equal(a.states, b.states)
        np.testing.assert_array_equal(a.t, b.t)
    np.testing.assert_array_equal(a.event_counts, b.event_counts)
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    np.testing.assert_array_equal(a.status, b.status)
    for name in a.outputs:          # (hits: float sums from every lane, in atomics' order)
        if name == "hits" or rtol:
            np.testing.assert_allclose(a.outputs[name], b.outputs[name], rtol=max(rtol, 1e-6))
        else:
            np.testing.assert_array_equal(a.outputs[name], b.outputs[name])
    if a.history is not None and rtol:
        np.testing.assert_allclose(a.history, b.history, rtol=rtol, atol=rtol)
    elif a.history is not None:
        np.testing.assert_array_equal(a.history, b.history)


@pytest.fixture
def fresh_kernels():
    """Kernels made in this test are dropped after it (and the old ones before it): a
    kernel printed with another LEAN_STEPS keeps its cache key."""
    vgpu.clear_cache()
    yield
    vgpu.clear_cache()


def _split(backend, monkeypatch):
    """Run the next solve in many dispatches (calls) of a few attempts each."""
    if backend == "glsl":
        from vgpu_compiler.backends.glsl import adaptive_run, plan
        monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
        return plan.limits(max_steps=7, work_per_dispatch=1)   # (first dispatch: 1 attempt)
    if backend == "wgpu":
        from vgpu_compiler.backends.wgpu import adaptive_run, runner
        monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
        return runner.limits(max_steps=7, work_per_dispatch=1)  # (first dispatch: 1 attempt)
    from vgpu_compiler.backends.cpu import runner
    monkeypatch.setattr(runner, "WORK_PER_CALL", 1 << 11)
    return None


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["glsl", "wgpu", "cpu"])
def test_plain_steps_change_no_number(backend, case, request, monkeypatch, fresh_kernels):
    request.getfixturevalue(backend)             # fails (not skips) on CI without it
    src, h0, kw = CASES[case]
    ref = reference(src, h0, **kw)             # (once for the three backends)
    lean = _solve(src, h0, backend, **kw)
    assert ref.event_counts.sum() > 50
    np.testing.assert_array_equal(lean.event_counts, ref.event_counts)
    np.testing.assert_array_equal(lean.steps_taken, ref.steps_taken)
    np.testing.assert_array_equal(lean.status, ref.status)
    np.testing.assert_allclose(lean.states, ref.states, rtol=1e-4, atol=1e-4)

    monkeypatch.setattr(shader_events, "LEAN_STEPS", 0)     # every step: the event code
    vgpu.clear_cache()
    full = _solve(src, h0, backend, **kw)
    # cpu, a field calling a math function (clocked: sin): the lane loops that vectorise
    # call libmvec's SIMD variant and the others libm's scalar one (templates/helpers.c.j2),
    # which may differ in the last bit, and the plain steps vectorise other loops than the
    # event code: the same to rounding there (bit for bit with VGPU_CPU_LIBMVEC=0)
    _same(lean, full, 1e-5 if backend == "cpu" and case == "clocked" else 0.0)

    monkeypatch.setattr(shader_events, "LEAN_STEPS", 64)
    vgpu.clear_cache()
    before = vgpu.cache_stats()["dispatches"]
    cut = _split(backend, monkeypatch)
    if cut is None:
        split = _solve(src, h0, backend, **kw)
    else:
        with cut:
            split = _solve(src, h0, backend, **kw)
    if backend != "cpu":
        assert vgpu.cache_stats()["dispatches"] - before > 40
    _same(lean, split)


def test_the_kernel_has_plain_steps_only_where_they_apply():
    """Fixed-step kernels without a basin get them; a basin (its barriers) does not."""
    from vgpu_compiler.backends.glsl import emit_glsl
    from vgpu_compiler.frontend.compile import compile_program

    def text(src):
        return emit_glsl(compile_program(src, "f.field").select(None), dtype="float32")

    mark = "an event in this step: fixed_events takes it"
    assert mark in text(lif("euler(dt = 1e-3, steps = 10)"))
    assert mark not in text(ball("rk4(dt = 0.01, steps = 10)", "basin l < 4"))
    assert mark not in text(ball("dopri5(t1 = 1)"))
