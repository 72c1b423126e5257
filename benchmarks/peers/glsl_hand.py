"""Hand-written GLSL compute shaders run with raw moderngl: the baselines VGPU's
generated GLSL is measured against.

Each kernel is what a careful engineer would write by hand: the program is
compiled once and cached, buffers are created once and reused, and a call is
buffer writes + one dispatch + one read. The "fresh" variants rebuild the
program (and buffers) on every call: the recompile anti-pattern.

All GL work happens inside ``with ctx:`` so that this benchmark's context is
current even when VGPU's runtime has its own context in the same process.
"""
from __future__ import annotations

import numpy as np

_CTX = None


def context():
    """One headless OpenGL 4.3+ context (EGL) for all hand kernels of this process."""
    global _CTX
    if _CTX is None:
        import moderngl
        _CTX = moderngl.create_standalone_context(backend="egl", require=430)
    return _CTX


LORENZ_SRC = """
#version 430
layout(local_size_x = {wg}) in;
layout(std430, binding = 0) readonly buffer Rho {{ float rho[]; }};
layout(std430, binding = 1) buffer State {{ float s[]; }};   // x[0..n), y[n..2n), z[2n..3n)
uniform uint n;
uniform float dt;
uniform int steps;
uniform float sigma;
uniform float beta;

vec3 f(vec3 u, float r) {{
    return vec3(sigma * (u.y - u.x), u.x * (r - u.z) - u.y, u.x * u.y - beta * u.z);
}}

void main() {{
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    float r = rho[i];
    vec3 u = vec3(s[i], s[n + i], s[2u * n + i]);
    float h = 0.5 * dt;
    for (int k = 0; k < steps; ++k) {{
        vec3 k1 = f(u, r);
        vec3 k2 = f(u + h * k1, r);
        vec3 k3 = f(u + h * k2, r);
        vec3 k4 = f(u + dt * k3, r);
        u = u + dt * (k1 * (1.0 / 6.0) + k2 * (1.0 / 3.0) + k3 * (1.0 / 3.0) + k4 * (1.0 / 6.0));
    }}
    s[i] = u.x; s[n + i] = u.y; s[2u * n + i] = u.z;
}}
"""


class HandLorenz:
    """Lorenz RK4, one invocation per trajectory, the step loop inside the shader."""

    def __init__(self, n: int, wg: int = 64):
        self.ctx, self.n, self.wg = context(), n, wg
        with self.ctx:
            self.prog = self.ctx.compute_shader(LORENZ_SRC.format(wg=wg))
            self.rho = self.ctx.buffer(reserve=4 * n)
            self.state = self.ctx.buffer(reserve=12 * n)

    def __call__(self, rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0):
        n = self.n
        with self.ctx:
            self.rho.write(np.ascontiguousarray(rho, np.float32).tobytes())
            self.state.write(np.ascontiguousarray(np.asarray(u0, np.float32).T).tobytes())
            p = self.prog
            p["n"].value, p["dt"].value, p["steps"].value = n, dt, steps
            p["sigma"].value, p["beta"].value = sigma, beta
            self.rho.bind_to_storage_buffer(0)
            self.state.bind_to_storage_buffer(1)
            p.run((n + self.wg - 1) // self.wg)
            out = np.frombuffer(self.state.read(), np.float32).reshape(3, n)
        return np.ascontiguousarray(out.T)

    def release(self):
        with self.ctx:
            for o in (self.prog, self.rho, self.state):
                o.release()


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0, wg: int = 64):
    k = HandLorenz(len(rho), wg)
    return lambda: k(rho, u0, dt, steps, sigma, beta)


MATMUL_SRC = """
#version 430
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer A_ {{ float A[]; }};
layout(std430, binding = 1) readonly buffer B_ {{ float B[]; }};
layout(std430, binding = 2) writeonly buffer C_ {{ float C[]; }};
const uint M = {m}u, K = {k}u, N = {n}u;
void main() {{
    uint i = gl_GlobalInvocationID.y, j = gl_GlobalInvocationID.x;
    if (i >= M || j >= N) return;
    float c = 0.0;
    for (uint s = 0u; s < K; ++s) c += A[i * K + s] * B[s * N + j];
    C[i * N + j] = c;
}}
"""


class HandMatmul:
    """C = A @ B: program and buffers made once; a call writes A and B, binds, runs and
    reads C, and nothing else (the seed's PersistentKernel pattern: no host copies of
    the data on the way in or out). With fresh=True every call compiles a new program
    and new buffers (the anti-pattern)."""

    def __init__(self, m: int, k: int, n: int, fresh: bool = False):
        self.ctx, self.shape, self.fresh = context(), (m, k, n), fresh
        self.src = MATMUL_SRC.format(m=m, k=k, n=n)
        if not fresh:
            with self.ctx:
                self._build()

    def _build(self):
        m, k, n = self.shape
        self.prog = self.ctx.compute_shader(self.src)
        self.a = self.ctx.buffer(reserve=4 * m * k)
        self.b = self.ctx.buffer(reserve=4 * k * n)
        self.c = self.ctx.buffer(reserve=4 * m * n)

    def _release(self):
        for o in (self.prog, self.a, self.b, self.c):
            o.release()

    def __call__(self, A, B):
        m, k, n = self.shape
        with self.ctx:
            if self.fresh:
                self._build()
            self.a.write(np.ascontiguousarray(A, np.float32))
            self.b.write(np.ascontiguousarray(B, np.float32))
            self.a.bind_to_storage_buffer(0)
            self.b.bind_to_storage_buffer(1)
            self.c.bind_to_storage_buffer(2)
            self.prog.run((n + 15) // 16, (m + 15) // 16)
            out = np.frombuffer(self.c.read(), np.float32).reshape(m, n)   # (fresh bytes)
            if self.fresh:
                self._release()
        return out


TREE = """    for (uint w = 128u; w > 0u; w >>= 1) {
        if (l < w) { ss[l] += ss[l + w]; sc[l] += sc[l + w]; }
        barrier();
    }"""
SERIAL = """    if (l == 0u) {
        float a = 0.0, b = 0.0;
        for (int j = 0; j < 256; ++j) { a += ss[j]; b += sc[j]; }
        ss[0] = a; sc[0] = b;
    }
    barrier();"""

KURAMOTO_SRC = """
#version 430
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Omega { float omega[]; };
layout(std430, binding = 1) buffer Theta { float theta[]; };
uniform float K;
uniform float dt;
uniform int steps;
shared float ss[256];
shared float sc[256];

// mean of sin and cos over the workgroup: shared memory + tree reduction
vec2 means(float th) {
    uint l = gl_LocalInvocationID.x;
    ss[l] = sin(th); sc[l] = cos(th);
    barrier();
{reduction}
    vec2 m = vec2(ss[0], sc[0]) * (1.0 / 256.0);
    barrier();
    return m;
}

float f(float th, float om) {
    vec2 m = means(th);
    return om + K * (m.x * cos(th) - m.y * sin(th));
}

void main() {
    uint i = gl_GlobalInvocationID.x;       // N is a multiple of 256: every lane is active
    float om = omega[i];
    float th = theta[i];
    float h = 0.5 * dt;
    for (int k = 0; k < steps; ++k) {
        float k1 = f(th, om);
        float k2 = f(th + h * k1, om);
        float k3 = f(th + h * k2, om);
        float k4 = f(th + dt * k3, om);
        th = th + dt * (k1 * (1.0 / 6.0) + k2 * (1.0 / 3.0) + k3 * (1.0 / 3.0) + k4 * (1.0 / 6.0));
    }
    theta[i] = th;
}
"""


class HandKuramoto:
    """Kuramoto populations of 256 (one workgroup each), the textbook GPU way: sin/cos
    into shared memory, then a reduction, every RK4 stage. reduction="tree" is the
    barrier-separated tree (8 levels, 10 barriers a stage); "serial" lets lane 0 add
    the 256 values (3 barriers a stage), which suits llvmpipe, where a barrier is a
    coroutine switch of every lane rather than a cheap hardware sync."""

    def __init__(self, n: int, reduction: str = "tree"):
        assert n % 256 == 0
        self.ctx, self.n = context(), n
        body = {"tree": TREE, "serial": SERIAL}[reduction]
        src = KURAMOTO_SRC.replace("{reduction}", body)
        with self.ctx:
            self.prog = self.ctx.compute_shader(src)
            self.omega = self.ctx.buffer(reserve=4 * n)
            self.theta = self.ctx.buffer(reserve=4 * n)

    def __call__(self, theta0, omega, K, dt, steps):
        with self.ctx:
            self.omega.write(np.ascontiguousarray(omega, np.float32).tobytes())
            self.theta.write(np.ascontiguousarray(theta0, np.float32).tobytes())
            p = self.prog
            p["K"].value, p["dt"].value, p["steps"].value = K, dt, steps
            self.omega.bind_to_storage_buffer(0)
            self.theta.bind_to_storage_buffer(1)
            p.run(self.n // 256)
            return np.frombuffer(self.theta.read(), np.float32).copy()
