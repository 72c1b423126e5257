"""vgpu.Pipeline when a stage's session is replaced (a ``set_params`` that changes the
call's signature) or an input is linked again: every backend gives what numpy gives,
and on glsl the link is one buffer on the device again where it can be."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu

from conftest import COMPILED_BACKENDS

# One Euler step of size 1 from 0: the states are k * A.
SCALE = """
field scale {
    input A[M, N]
    param k = 1.0
    grid i < M, j < N
    state c = 0
    dc/dt = k * A[i, j]
    solve euler(dt = 1, steps = 1)
}
"""
A = np.arange(12, dtype=np.float32).reshape(3, 4) - 4


@pytest.fixture(params=COMPILED_BACKENDS)
def backend(request):
    request.getfixturevalue(request.param)
    return request.param


def per_element(value) -> np.ndarray:
    """``value`` as a per-trajectory param: a new signature for a scalar one."""
    return np.full(A.shape, value, np.float32)


def destination_changes(backend) -> list:
    pipe = vgpu.Pipeline(backend)
    src = pipe.add(SCALE, inputs={"A": A})
    dst = pipe.add(SCALE, inputs={"A": np.zeros_like(A)}, params={"k": 5.0})
    pipe.link(dst, "A", src)
    pipe.run()
    seen = [dst.states]
    dst.sim.set_params(k=per_element(5.0))
    pipe.run()
    seen.append(dst.states)
    src.sim.set_input("A", 2 * A)         # the link still reads the source
    pipe.run()
    seen.append(dst.states)
    return seen, pipe


def source_changes(backend) -> list:
    pipe = vgpu.Pipeline(backend)
    src = pipe.add(SCALE, inputs={"A": A}, params={"k": 2.0})
    dst = pipe.add(SCALE, inputs={"A": np.zeros_like(A)})
    pipe.link(dst, "A", src)
    pipe.run()
    seen = [dst.states]
    src.sim.set_params(k=per_element(3.0))    # the source's buffers are new ones
    pipe.run()
    seen.append(dst.states)
    src.sim.set_params(k=per_element(4.0))    # the same signature again: values only
    dst.sim.set_params(k=per_element(1.5))    # the destination's session is new too
    pipe.run()
    seen.append(dst.states)
    return seen, pipe


def source_changes_before_destination(backend) -> list:
    """The source's session replaced, then the destination changed and advanced on its
    own before the next run: no released buffer is bound (what the input reads between
    runs is the backend's: the source's buffer as it is, or the array last handed
    over), and the run hands the source's states over again."""
    pipe = vgpu.Pipeline(backend)
    src = pipe.add(SCALE, inputs={"A": A}, params={"k": 2.0})
    dst = pipe.add(SCALE, inputs={"A": np.zeros_like(A)})
    pipe.link(dst, "A", src)
    pipe.run()
    src.sim.set_params(k=per_element(3.0))
    dst.sim.set_params(k=0.5)                 # a new signature (k given): a new session
    dst.sim.set_params(k=0.25)                # the same one: an advance of 0 steps
    dst.sim.advance(1)
    assert dst.outputs == {}
    pipe.run()
    return [src.states, dst.states], pipe


def backward_link_changes(backend) -> list:
    """A later stage's states feed an earlier stage at the next run; the later stage's
    signature changes."""
    pipe = vgpu.Pipeline(backend)
    first = pipe.add(SCALE, inputs={"A": A}, params={"k": 1.0})
    second = pipe.add(SCALE, inputs={"A": A}, params={"k": 3.0})
    pipe.link(first, "A", second)
    pipe.link(second, "A", first)
    seen = []
    for k in (3.0, 0.5):
        pipe.run()
        seen += [first.states, second.states]
        second.sim.set_params(k=per_element(k))
    pipe.run(2)
    seen += [first.states, second.states]
    return seen, pipe


def relinked(backend) -> list:
    """An input linked again, to a source that cannot share its buffer (another dtype,
    where the backend has float64): the new source, not the old one."""
    other = "float32" if backend == "wgpu" else "float64"
    pipe = vgpu.Pipeline(backend)
    shared = pipe.add(SCALE, inputs={"A": A}, params={"k": 2.0})
    apart = pipe.add(SCALE, inputs={"A": A}, params={"k": 7.0}, dtype=other)
    dst = pipe.add(SCALE, inputs={"A": np.zeros_like(A)})
    first = pipe.link(dst, "A", shared)
    pipe.run()
    seen = [dst.states]
    second = pipe.link(dst, "A", apart)
    pipe.run()
    seen.append(dst.states)
    third = pipe.link(dst, "A", shared)       # and back: one buffer again where it can
    shared.sim.set_input("A", 3 * A)
    pipe.run()
    seen.append(dst.states)
    assert len(pipe.links) == 1
    return seen, pipe, (first, second, third)


SCENARIOS = [destination_changes, source_changes, source_changes_before_destination,
             backward_link_changes]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_a_replaced_session_keeps_the_link(backend, scenario):
    want, _ = scenario("numpy")
    got, pipe = scenario(backend)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    if backend == "glsl":           # one buffer on the device again, not a copy
        assert not pipe.copies and pipe.on_device == len(pipe.links)
    pipe.close()


def test_the_first_run_is_the_closed_form():
    got, _ = destination_changes("numpy")
    np.testing.assert_array_equal(got[0], 5 * A)
    np.testing.assert_array_equal(got[1], 5 * A)
    np.testing.assert_array_equal(got[2], 10 * A)


def test_linking_again_replaces_the_link(backend):
    want, _, _ = relinked("numpy")
    np.testing.assert_array_equal(want[0], 2 * A)
    np.testing.assert_array_equal(want[1], 7 * A)
    np.testing.assert_array_equal(want[2], 6 * A)
    got, pipe, shared = relinked(backend)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    if backend == "glsl":
        assert shared == (True, False, True)
    pipe.close()


def test_states_after_set_input_are_the_runs(backend):
    """A new input does not change the state: reading it (and a checkpoint, and a new
    signature's session) gives the state the run reached."""
    want = got = None
    for b in ("numpy", backend):
        sim = vgpu.Simulation(SCALE, inputs={"A": A}, backend=b)
        sim.advance(3)
        sim.set_input("A", 2 * A)
        seen = [sim.states]
        sim.set_params(k=per_element(1.0))      # a new session from the state now
        seen.append(sim.advance(1).states)
        want, got = (seen, None) if b == "numpy" else (want, seen)
    np.testing.assert_array_equal(want[0], 3 * A)
    np.testing.assert_array_equal(want[1], 5 * A)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
