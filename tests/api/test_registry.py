"""The backend registry (vgpu_compiler/backends/__init__.py): one object per backend,
read by the API (choice, auto's order and fallback), `vgpuc info` and --backend."""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

import vgpu
from vgpu_compiler import pipeline
from vgpu_compiler import backends as registry
from vgpu_compiler.backends import Backend
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.cli.main import build_parser
from vgpu_compiler.cli.system import backends_report

from field_examples import LORENZ

SCALE = """
field scale {
    state x
    dx/dt = 0.0 * x
    solve euler(dt = 0.1, steps = 1)
}
"""


def _fake(name="fake", ok=True, why="", gpu=True, run=None, software=None):
    calls = []

    def default_run(prepared, data, progress=None):
        calls.append(prepared.grid_shape)
        sol = registry.get("numpy").run(prepared, data, progress)
        sol.states = sol.states * 2          # a mark: the result came from here
        return sol

    features = frozenset({"gpu"}) if gpu else frozenset()
    backend = Backend(name=name, description=f"a {name} backend for tests",
                      available=lambda: (ok, why), run=run or default_run,
                      dtypes=("float32",), features=features, software=software)
    return backend, calls


@pytest.fixture
def fake(monkeypatch):
    """Register fakes for one test, and forget the fallback warnings given so far."""
    added = []
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())

    def add(*args, **kw):
        backend, calls = _fake(*args, **kw)
        registry.register(backend)
        added.append(backend.name)
        return calls

    yield add
    for name in added:
        registry.unregister(name)


@pytest.fixture
def no_glsl():
    """The built-in GPU backends (CUDA, GLSL, wgpu), unavailable for one test (auto then
    tries the fakes): stand-ins registered under their names."""
    real = {n: registry.get(n) for n in ("cuda", "glsl", "wgpu")}
    for name, backend in real.items():
        registry.register(dataclasses.replace(backend, available=lambda: (False, "no GPU")))
    assert registry.get("glsl") is not real["glsl"] and registry.names()[0] == "cuda"
    yield
    for name in real:
        registry.unregister(name)
    assert registry.get("glsl") is real["glsl"]


@pytest.fixture
def no_cpu():
    """The cpu backend, unavailable for one test (a stand-in under its name)."""
    real = registry.get("cpu")
    registry.register(dataclasses.replace(real, available=lambda: (False, "no compiler")))
    yield
    registry.unregister("cpu")
    assert registry.get("cpu") is real


def test_builtin_order_puts_the_reference_last():
    assert registry.names() == ("cuda", "glsl", "wgpu", "cpu", "numpy")
    assert registry.choices() == ("auto", "cuda", "glsl", "wgpu", "cpu", "numpy")
    for name in registry.names():
        backend = registry.get(name)
        assert backend.name == name and backend.description and backend.dtypes
        ok, why = backend.available()
        assert isinstance(ok, bool) and (ok or why)
    assert registry.get("numpy").available() == (True, "")
    assert registry.get("glsl").gpu and registry.get("wgpu").gpu and registry.get("cuda").gpu
    assert not registry.get("numpy").gpu


def test_a_registered_gpu_backend_comes_before_the_cpu_ones(fake, no_glsl):
    calls = fake("fake", gpu=True)
    assert registry.names() == ("cuda", "glsl", "wgpu", "fake", "cpu", "numpy")
    want = vgpu.run_field(LORENZ, np.ones((3, 3)), backend="numpy", steps=2)
    got = vgpu.run_field(LORENZ, np.ones((3, 3)), steps=2)      # auto: glsl cannot, fake can
    np.testing.assert_array_equal(got, want * 2)
    assert calls == [(3,)]
    np.testing.assert_array_equal(vgpu.run_field(LORENZ, np.ones((3, 3)), backend="fake",
                                                 steps=2), want * 2)


def test_a_registered_cpu_backend_comes_before_numpy_only(fake):
    fake("slow", gpu=False)
    assert registry.names() == ("cuda", "glsl", "wgpu", "cpu", "slow", "numpy")


def test_auto_tries_real_gpus_before_cpu_renderers_and_says_which(fake, caplog, monkeypatch):
    """auto's order: GPU backends on a real GPU, then those on a CPU renderer (llvmpipe,
    lavapipe), registry order within each, numpy last; one INFO line says which it ran
    on and why."""
    fake("soft", software=lambda: True)
    fake("real", software=lambda: False)
    names = [b.name for b in registry.auto_order()]
    assert names.index("real") < names.index("cpu") < names.index("soft") and names[-1] == "numpy"
    for builtin in ("glsl", "wgpu"):        # here they run on llvmpipe / lavapipe
        if registry.get(builtin).available()[0] and registry.get(builtin).software():
            assert names.index("real") < names.index(builtin)
    monkeypatch.setattr(pipeline, "_chosen", set())
    with caplog.at_level(logging.INFO, logger="vgpu"):
        vgpu.run_field(SCALE, np.ones(2))
        vgpu.run_field(SCALE, np.ones(2))
    said = [r.getMessage() for r in caplog.records if "backend=auto" in r.getMessage()]
    assert said == ["backend=auto runs on real (a real GPU)"]


def test_auto_tries_a_real_gpu_then_cpu_then_a_software_rasteriser_then_numpy(fake):
    """A GPU backend on llvmpipe / lavapipe goes after the native CPU backends."""
    registry.register(dataclasses.replace(_fake("real")[0], software=lambda: False))
    registry.register(dataclasses.replace(_fake("soft")[0], software=lambda: True))
    try:
        order = [b.name for b in registry.auto_order()]
        assert order.index("real") < order.index("cpu") < order.index("soft") < \
            order.index("numpy") == len(order) - 1
        glsl = registry.get("glsl")
        if glsl.available()[0]:         # this machine's GL: where it goes says what it is
            soft = glsl.software()
            assert (order.index("glsl") > order.index("cpu")) == soft
            text = "\n".join(backends_report())
            assert ("glsl     available (on a software rasteriser here" in text) == soft
            assert text.index("cpu ") < text.index("glsl ") if soft else True
    finally:
        registry.unregister("real")
        registry.unregister("soft")


def test_a_registered_backend_shows_in_info_and_backend_choices(fake):
    fake("fake", ok=False, why="the fake device is unplugged")
    lines = backends_report()
    text = "\n".join(lines)
    assert "fake     not available: the fake device is unplugged" in text
    assert "a fake backend for tests" in text
    # an unavailable GPU backend is tried after the native CPU ones, before numpy
    assert text.index("cpu ") < text.index("fake ") < text.index("numpy ")
    assert text.index("glsl ") < text.index("numpy ")
    assert "numpy    available" in text
    args = build_parser().parse_args(["run", "x.field", "--backend", "fake"])
    assert args.backend == "fake"


def test_an_unavailable_backend_says_why(fake):
    fake("fake", ok=False, why="the fake device is unplugged")
    with pytest.raises(vgpu.BackendError, match=r"the fake backend is not available here "
                                                r"\(the fake device is unplugged\)"):
        vgpu.run_field(SCALE, np.ones(2), backend="fake")


def test_auto_moves_past_unavailable_backends_with_one_warning_each(fake, caplog, no_glsl,
                                                                   monkeypatch):
    monkeypatch.setenv("VGPU_NO_CPU", "1")      # else auto runs on cpu before the GPU fakes
    fake("fake", ok=False, why="the fake device is unplugged")
    want = vgpu.run_field(SCALE, np.ones(2), backend="numpy")
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        for _ in range(3):
            np.testing.assert_array_equal(vgpu.run_field(SCALE, np.ones(2)), want)
    said = [r.getMessage() for r in caplog.records if "FAKE" in r.getMessage()]
    assert len(said) == 1 and "the fake device is unplugged" in said[0]
    assert len([r for r in caplog.records if "GLSL" in r.getMessage()]) == 1


def test_auto_moves_past_a_backend_that_cannot_run_the_program(fake, caplog, no_glsl):
    def refuse(prepared, data, progress=None):
        raise vgpu.BackendError("the fake backend has no sin")

    registry.register(_fake("fake", run=refuse)[0])
    try:
        want = vgpu.run_field(SCALE, np.ones(2), backend="numpy")
        with caplog.at_level(logging.WARNING, logger="vgpu"):
            np.testing.assert_array_equal(vgpu.run_field(SCALE, np.ones(2)), want)
        assert "the fake backend has no sin" in caplog.text
        with pytest.raises(vgpu.BackendError, match="no sin"):
            vgpu.run_field(SCALE, np.ones(2), backend="fake")
    finally:
        registry.unregister("fake")


def test_an_unknown_backend_lists_the_choices():
    with pytest.raises(vgpu.ArgumentTypeError, match=r"backend must be one of 'auto', "
                                                     r"'cuda', 'glsl', 'wgpu', 'cpu', 'numpy', "
                                                     r"got 'metal'"):
        vgpu.run_field(SCALE, np.ones(2), backend="metal")


def test_fallback_to_numpy_is_counted(fake, no_glsl, no_cpu):
    calls = fake("fake")
    before = COUNTERS.snapshot()["cpu_fallbacks"]
    vgpu.run_field(SCALE, np.ones(2))                   # on the fake: not a CPU fallback
    assert calls and COUNTERS.snapshot()["cpu_fallbacks"] == before
    registry.unregister("fake")
    vgpu.run_field(SCALE, np.ones(2))                   # on numpy
    assert COUNTERS.snapshot()["cpu_fallbacks"] == before + 1


def test_no_backend_sees_an_empty_ensemble(fake):
    """The API answers an empty ensemble itself: the same Solution on every backend,
    and the backend's run is not called."""
    calls = fake("fake")
    for backend in ("fake", "numpy", "glsl"):
        if not registry.get(backend).available()[0]:
            continue
        sol = vgpu.solve(LORENZ, np.ones((0, 3)), backend=backend, steps=5, save_every=2)
        assert sol.states.shape == (0, 3) and sol.steps_taken.shape == (0,)
        assert sol.history.shape == (4, 0, 3)
        np.testing.assert_allclose(sol.times, [0.0, 0.02, 0.04, 0.05], rtol=1e-6)
    assert calls == []


@pytest.mark.parametrize("devices", [False, True], ids=["no-gpu-device", "gpu-device"])
def test_without_a_gpu_device_auto_orders_without_starting_a_gpu_backend(devices,
                                                                         monkeypatch):
    """On Linux without a GPU device node the built-in GPU backends go after cpu without
    being asked (starting wgpu took 2.9 s only to learn it runs on lavapipe); with one
    they are asked, as before."""
    asked = []
    for name in ("glsl", "wgpu"):
        real = registry.get(name)
        stand_in = dataclasses.replace(
            real, available=lambda n=name: (asked.append(n), (True, ""))[1],
            software=lambda n=name: (asked.append(n), True)[1])
        monkeypatch.setitem(registry._loaded, name, stand_in)
    monkeypatch.setattr(registry, "no_gpu_devices", lambda: not devices)
    registry._order.clear()
    try:
        order = [b.name for b in registry.auto_order()]
    finally:
        registry._order.clear()
    assert order.index("cpu") < order.index("glsl") < order.index("numpy")
    assert order.index("cpu") < order.index("wgpu") < order.index("numpy")
    assert bool(asked) == devices, asked


def test_a_fresh_process_on_auto_starts_no_gpu_backend_without_a_gpu_device(tmp_path):
    import os
    import subprocess
    import sys
    code = ("import sys, numpy as np, vgpu\n"
            "from vgpu_compiler import backends\n"
            f"sol = vgpu.solve({SCALE!r}, np.ones(3))\n"
            "print(backends.no_gpu_devices(), 'wgpu' in sys.modules, "
            "'moderngl' in sys.modules, vgpu.cache_stats()['dispatches'])\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, VGPU_CACHE_DIR=str(tmp_path),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    none, wgpu, gl, dispatches = out.stdout.split()
    if none == "True":          # (a machine with a GPU device asks its GPU backends)
        assert (wgpu, gl) == ("False", "False"), out.stdout
