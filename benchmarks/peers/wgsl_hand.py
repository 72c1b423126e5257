"""Hand-written WGSL compute shaders run with raw wgpu: the baselines VGPU's wgpu
backend is measured against.

What a careful engineer writes by hand: the pipeline is compiled once, buffers and
the bind group are made once and reused, and a call is buffer writes + one
dispatch + one read. The device is this module's own (the adapter wgpu picks, with
the adapter's limits), so VGPU's caches play no part.
"""
from __future__ import annotations

import numpy as np

_DEV = None


def device():
    global _DEV
    if _DEV is None:
        import wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        want = {k: v for k, v in dict(adapter.limits).items()
                if k in ("max-storage-buffer-binding-size", "max-buffer-size")}
        _DEV = adapter.request_device_sync(required_limits=want)
    return _DEV


LORENZ_SRC = """
struct P { n: u32, steps: i32, dt: f32, sigma: f32, beta: f32, }
@group(0) @binding(0) var<storage, read> rho: array<f32>;
@group(0) @binding(1) var<storage, read_write> s: array<f32>;   // x[0..n), y[n..2n), z[2n..3n)
@group(0) @binding(2) var<uniform> p: P;

fn f(u: vec3<f32>, r: f32) -> vec3<f32> {
    return vec3<f32>(p.sigma * (u.y - u.x), u.x * (r - u.z) - u.y, u.x * u.y - p.beta * u.z);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let n = p.n;
    if (i >= n) { return; }
    let r = rho[i];
    var u = vec3<f32>(s[i], s[n + i], s[2u * n + i]);
    let dt = p.dt;
    let h = 0.5 * dt;
    for (var k: i32 = 0; k < p.steps; k++) {
        let k1 = f(u, r);
        let k2 = f(u + h * k1, r);
        let k3 = f(u + h * k2, r);
        let k4 = f(u + dt * k3, r);
        u = u + dt * (k1 * (1.0 / 6.0) + k2 * (1.0 / 3.0) + k3 * (1.0 / 3.0) + k4 * (1.0 / 6.0));
    }
    s[i] = u.x; s[n + i] = u.y; s[2u * n + i] = u.z;
}
"""


def _pipeline(dev, src):
    return dev.create_compute_pipeline(layout="auto", compute={
        "module": dev.create_shader_module(code=src), "entry_point": "main"})


def _storage(dev, size):
    import wgpu
    return dev.create_buffer(size=size, usage=wgpu.BufferUsage.STORAGE
                             | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)


def _group(dev, pipe, buffers):
    return dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
        for i, b in enumerate(buffers)])


def _dispatch(dev, pipe, group, *groups):
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, group)
    cp.dispatch_workgroups(*groups)
    cp.end()
    dev.queue.submit([enc.finish()])


class HandLorenz:
    """Lorenz RK4, one invocation per trajectory, the step loop inside the shader."""

    def __init__(self, n: int):
        import wgpu
        self.dev, self.n = device(), n
        self.pipe = _pipeline(self.dev, LORENZ_SRC)
        self.rho, self.state = _storage(self.dev, 4 * n), _storage(self.dev, 12 * n)
        self.uni = self.dev.create_buffer(size=32, usage=wgpu.BufferUsage.UNIFORM
                                          | wgpu.BufferUsage.COPY_DST)
        self.group = _group(self.dev, self.pipe, [self.rho, self.state, self.uni])

    def __call__(self, rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
        q, n = self.dev.queue, self.n
        q.write_buffer(self.rho, 0, np.ascontiguousarray(rho, np.float32).tobytes())
        q.write_buffer(self.state, 0, np.ascontiguousarray(np.asarray(u0, np.float32).T).tobytes())
        u = np.zeros(8, np.uint32)
        u[0], u[1] = n, steps
        u[2:5] = np.array([dt, sigma, beta], np.float32).view(np.uint32)
        q.write_buffer(self.uni, 0, u.tobytes())
        _dispatch(self.dev, self.pipe, self.group, (n + 63) // 64)
        out = np.frombuffer(q.read_buffer(self.state), np.float32).reshape(3, n)
        return np.ascontiguousarray(out.T)


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
    k = HandLorenz(len(rho))
    return lambda: k(rho, u0, dt, steps, sigma, beta)


MATMUL_SRC = """
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
const M = {m}u; const K = {k}u; const N = {n}u;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = gid.y; let j = gid.x;
    if (i >= M || j >= N) {{ return; }}
    var c: f32 = 0.0;
    for (var s: u32 = 0u; s < K; s++) {{ c += A[i * K + s] * B[s * N + j]; }}
    C[i * N + j] = c;
}}
"""


class HandMatmul:
    """C = A @ B: pipeline, buffers and bind group made once; a call writes A and B,
    dispatches and reads C."""

    def __init__(self, m: int, k: int, n: int):
        self.dev, self.shape = device(), (m, k, n)
        self.pipe = _pipeline(self.dev, MATMUL_SRC.format(m=m, k=k, n=n))
        self.a, self.b, self.c = (_storage(self.dev, 4 * x) for x in (m * k, k * n, m * n))
        self.group = _group(self.dev, self.pipe, [self.a, self.b, self.c])

    def __call__(self, A, B):
        m, k, n = self.shape
        q = self.dev.queue
        q.write_buffer(self.a, 0, np.ascontiguousarray(A, np.float32))     # write
        q.write_buffer(self.b, 0, np.ascontiguousarray(B, np.float32))
        _dispatch(self.dev, self.pipe, self.group, (n + 15) // 16, (m + 15) // 16)   # run
        return np.frombuffer(q.read_buffer(self.c), np.float32).reshape(m, n)     # read
