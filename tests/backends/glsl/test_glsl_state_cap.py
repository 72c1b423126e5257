"""The GLSL backend's cap on a field's states holds on a software renderer only (its
shader compiler is about quadratic in the states): a GPU's driver gets the field.
The renderer is told by GL_RENDERER; here the detection is replaced both ways."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends import glsl as glsl_backend
from vgpu_compiler.errors import BackendError

from test_deep_programs import chain


@pytest.fixture
def renderer(monkeypatch, glsl, fresh_cache):
    """``renderer(software)``: the runtime's view of the renderer from now on."""
    def set_to(software: bool) -> None:
        monkeypatch.setattr(glsl_backend, "device_software", lambda: software)
    return set_to


def h0_for(n: int) -> np.ndarray:
    return np.random.default_rng(n).uniform(size=(3, n)).astype(np.float32)


@pytest.mark.parametrize("history", [False, True], ids=["states", "save_every"])
def test_a_gpu_driver_gets_a_field_past_the_cap(renderer, monkeypatch, history):
    monkeypatch.setattr(glsl_backend, "MAX_STATES", 6)
    n = 9
    src, h0 = chain(n), h0_for(n)
    extra = {"save_every": 2} if history else {}
    want = vgpu.solve(src, h0, backend="numpy", **extra)
    renderer(True)
    with pytest.raises(BackendError, match=f"{n} states; the GLSL backend takes at most 6 "
                                           f"on a software renderer"):
        vgpu.solve(src, h0, backend="glsl", **extra)
    renderer(False)
    got = vgpu.solve(src, h0, backend="glsl", **extra)
    np.testing.assert_allclose(got.states, want.states, rtol=1e-5)
    if history:
        np.testing.assert_allclose(got.history, want.history, rtol=1e-5)


def test_the_real_cap_on_a_gpu_driver(renderer):
    """One state past MAX_STATES itself: refused on llvmpipe as before, run on a GPU's
    driver (the compile takes seconds here, on llvmpipe all the same)."""
    n = glsl_backend.MAX_STATES + 1
    src, h0 = chain(n), h0_for(n)
    renderer(True)
    with pytest.raises(BackendError, match=f"at most {glsl_backend.MAX_STATES}"):
        vgpu.run_field(src, h0, backend="glsl")
    renderer(False)
    np.testing.assert_allclose(vgpu.run_field(src, h0, backend="glsl"),
                               vgpu.run_field(src, h0, backend="numpy"), rtol=1e-5)


def test_the_limit_set_holds_on_every_renderer(renderer, monkeypatch):
    monkeypatch.setenv("VGPU_GLSL_MAX_STATES", "4")
    renderer(False)
    with pytest.raises(BackendError, match="at most 4 \\(the limit VGPU_GLSL_MAX_STATES"):
        vgpu.run_field(chain(5), h0_for(5), backend="glsl")


@pytest.mark.parametrize("name,software", [
    ("llvmpipe (LLVM 15.0.6, 256 bits)", True), ("softpipe", True),
    ("Google SwiftShader", True), ("D3D12 (Microsoft Basic Render Driver)", True),
    ("NVIDIA GeForce RTX 4090/PCIe/SSE2", False), ("AMD Radeon RX 7900 XTX (radeonsi)", False),
    ("Mesa Intel(R) UHD Graphics 630 (CFL GT2)", False), ("", False)])
def test_software_renderers_are_told_by_name(name, software):
    assert glsl_backend.software_renderer(name) is software
