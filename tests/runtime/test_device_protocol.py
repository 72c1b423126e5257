"""The Device protocol (vgpu_compiler/runtime/device.py) and its implementation on wgpu:
a kernel compiled, buffers written, dispatched and read back, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from vgpu_compiler.runtime.device import OPERATIONS, Device

SAXPY_WGSL = """
struct U { a: f32, n: u32, }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> u: U;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= u.n) { return; }
    y[i] = u.a * x[i] + y[i];
}
"""


SAXPY_GLSL = """#version 430
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(std140, binding = 2) uniform U { float a; uint n; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    y[i] = a * x[i] + y[i];
}
"""


def _wgpu_device(request):
    request.getfixturevalue("wgpu")
    from vgpu_compiler.backends.wgpu.device import WgpuDevice
    return WgpuDevice(), SAXPY_WGSL


def _glsl_device(request):
    request.getfixturevalue("glsl")
    from vgpu_compiler.backends.glsl.device import GlDevice
    return GlDevice(), SAXPY_GLSL


def test_the_protocol_names_the_eight_operations():
    assert set(OPERATIONS) == {n for n in vars(Device) if not n.startswith("_")} - {
        "_is_protocol"}


@pytest.mark.parametrize("make", [_wgpu_device, _glsl_device], ids=["wgpu", "glsl"])
def test_a_device_runs_a_kernel_through_the_protocol(request, make):
    dev, source = make(request)
    assert isinstance(dev, Device)
    assert dev.limits()["max_storage_buffer_binding_size"] > 0
    assert isinstance(dev.software(), bool)
    n = 1000
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    prog = dev.compile(source)
    bx, by = dev.buffer(x.nbytes), dev.buffer(y.nbytes)
    dev.write(bx, x)
    dev.write(by, y)
    uniforms = np.array([2.5, 0, 0, 0], np.float32).view(np.uint32)
    uniforms[1] = n
    want = y.copy()
    for _ in range(3):          # the same bindings again: y accumulates
        dev.dispatch(prog, [bx, by], ((n + 63) // 64,), uniforms.tobytes())
        want = np.float32(2.5) * x + want
    got = np.frombuffer(dev.read(by, y.nbytes), np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)     # (a fused multiply-add)
    dev.release(bx, by, prog)
