"""One conformance suite for every backend in the registry (``backends.names()``): the
same handful of calls on each, against the numpy oracle. Each check runs where the
backend's declared capabilities (``backends.capabilities``) include what it needs,
so a backend added later, or registered at run time, gets the suite for free
(``test_a_backend_registered_at_run_time_gets_the_suite``)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends as registry
from event_fields import ball, bounce_times
from field_examples import LORENZ

OU = """field ou {
  param theta = 1.0
  param sigma = 0.3
  noise xi
  state x
  dx/dt = -theta * x + sigma * xi
  solve euler(dt = 0.01, steps = 50)
}"""

# float32 kernels against the float32 oracle: the same operations, the order of a few
# sums and the libm of a target apart
FIXED = dict(rtol=2e-5, atol=2e-5)
ADAPTIVE = dict(rtol=2e-4, atol=2e-4)


def _h0(n, k=3, seed=0):
    return np.random.default_rng(seed).normal(size=(n, k)).astype(np.float32)


def check_fixed_step(name):
    h0 = _h0(257)
    got = vgpu.run_field(LORENZ, h0, backend=name, steps=100)
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=100)
    np.testing.assert_allclose(got, ref, **FIXED)


def check_adaptive(name):
    src = LORENZ.replace("rk4(dt = 0.01, steps = 1000)", "dopri5(t1 = 0.5, rtol = 1e-5, atol = 1e-5)")
    h0 = _h0(65, seed=1)
    got = vgpu.solve(src, h0, backend=name)
    ref = vgpu.solve(src, h0, backend="numpy")
    np.testing.assert_allclose(got.states, ref.states, **ADAPTIVE)
    assert (got.status == 0).all() and (ref.status == 0).all()
    # the controller's accepted steps: within one of the oracle's per trajectory
    assert np.abs(got.steps_taken.astype(int) - ref.steps_taken.astype(int)).max() <= 1


def check_events(name):
    """A ball's bounces (``when``) and its stop at the K-th (``stop when``): the times
    against the oracle's and the closed form."""
    src = ball("tsit5(t1 = 10.0, rtol = 1e-6, atol = 1e-6)")
    heights = np.array([1.0, 2.0, 0.5, 3.0])
    K = np.array([3.0, 2.0, 4.0, 1.0])
    got = vgpu.solve(src, heights, params={"K": K}, backend=name)
    ref = vgpu.solve(src, heights, params={"K": K}, backend="numpy")
    assert (got.status == 1).all() and (ref.status == 1).all()             # stopped
    np.testing.assert_array_equal(got.states[:, 2], K)                      # bounces counted
    want = [bounce_times(h, 0.9, int(k))[-1] for h, k in zip(heights, K)]
    np.testing.assert_allclose(got.t, want, rtol=0, atol=1e-4)             # the closed form
    np.testing.assert_allclose(got.t, ref.t, rtol=0, atol=1e-4)


def check_save_every(name):
    h0 = _h0(33, seed=2)
    got = vgpu.solve(LORENZ, h0, backend=name, steps=60, save_every=20)
    ref = vgpu.solve(LORENZ, h0, backend="numpy", steps=60, save_every=20)
    assert got.history.shape == ref.history.shape == (4, 33, 3)
    np.testing.assert_allclose(got.history, ref.history, **FIXED)
    np.testing.assert_allclose(got.times, ref.times, rtol=1e-6)


def check_noise(name):
    h0 = np.linspace(-1, 2, 129).astype(np.float32)
    got = vgpu.run_field(OU, h0, backend=name, seed=11)
    ref = vgpu.run_field(OU, h0, backend="numpy", seed=11)
    np.testing.assert_allclose(got, ref, **FIXED)
    other = vgpu.run_field(OU, h0, backend=name, seed=12)
    assert not np.allclose(other, got)                      # the seed is the noise's key


def check_simulation(name):
    h0 = _h0(100, seed=3)
    sim = vgpu.Simulation(LORENZ, h0, backend=name)
    for piece in (7, 0, 13):
        sim.advance(steps=piece)
    assert sim.step == 20
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=20)
    np.testing.assert_allclose(sim.states, ref, **FIXED)


# check -> the capabilities (FEATURES) it needs
CHECKS = {check_fixed_step: (), check_adaptive: ("adaptive",), check_events: ("events",),
          check_save_every: ("history",), check_noise: ("noise",),
          check_simulation: ("simulation",)}


def _usable(request, name):
    """The backend, or a skip (a built-in one's own fixture decides skip or fail: on CI
    a missing device or compiler fails)."""
    if name in request.fixturenames or name in ("glsl", "wgpu", "cpu"):
        request.getfixturevalue(name)
    backend = registry.get(name)
    ok, why = backend.available()
    if not ok:
        pytest.skip(f"{name}: {why}")
    return backend


@pytest.mark.parametrize("check", list(CHECKS), ids=lambda c: c.__name__[len("check_"):])
@pytest.mark.parametrize("name", registry.names())
def test_conformance(request, name, check):
    backend = _usable(request, name)
    missing = set(CHECKS[check]) - registry.capabilities(backend)
    if missing:
        pytest.skip(f"{name} does not declare {', '.join(sorted(missing))}")
    check(name)


def test_a_backend_registered_at_run_time_gets_the_suite():
    """A backend registered while the process runs (here: the oracle under another
    name, as a backend package would register itself) runs every check it declares;
    names() (what the suite is parametrised over) holds it."""
    numpy_backend = registry.get("numpy")
    ran = []

    def run(prepared, data, progress=None):
        ran.append(prepared.template.field.name)
        return numpy_backend.run(prepared, data, progress)

    toy = dataclasses.replace(numpy_backend, name="toy", run=run)
    registry.register(toy)
    try:
        assert "toy" in registry.names()
        for check, needs in CHECKS.items():
            if set(needs) <= registry.capabilities(toy):
                check("toy")
        assert {"lorenz", "ball", "ou"} <= set(ran)     # the checks ran on it
    finally:
        registry.unregister("toy")


def test_a_wrong_backend_fails_the_suite():
    """The suite catches a backend that is off by a little."""
    numpy_backend = registry.get("numpy")

    def run(prepared, data, progress=None):
        sol = numpy_backend.run(prepared, data, progress)
        sol.states = sol.states * np.float32(1 + 1e-3)
        return sol

    registry.register(dataclasses.replace(numpy_backend, name="wrong", run=run))
    try:
        with pytest.raises(AssertionError):
            check_fixed_step("wrong")
    finally:
        registry.unregister("wrong")
