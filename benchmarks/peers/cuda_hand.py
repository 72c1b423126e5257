"""A hand-written CUDA Lorenz RK4 kernel (NVRTC + the driver API, through VGPU's cuda
backend's nvrtc.py and device.py helpers): one thread per trajectory, the step loop
inside, compiled once; a call is two copies in, one launch and one copy out (as the
hand GLSL kernel's). Needs an NVIDIA GPU."""
from __future__ import annotations

import ctypes

import numpy as np

LORENZ_SRC = r"""
extern "C" __global__ void lorenz(const float *rho, float *s, int n, float dt, int steps,
                                  float sigma, float beta) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float r = rho[i], h = 0.5f * dt;
    float x = s[i], y = s[n + i], z = s[2 * n + i];
#define F(X, Y, Z, DX, DY, DZ) DX = sigma * (Y - X); DY = X * (r - Z) - Y; DZ = X * Y - beta * Z;
    for (int k = 0; k < steps; ++k) {
        float a1, b1, c1, a2, b2, c2, a3, b3, c3, a4, b4, c4;
        F(x, y, z, a1, b1, c1)
        F(x + h * a1, y + h * b1, z + h * c1, a2, b2, c2)
        F(x + h * a2, y + h * b2, z + h * c2, a3, b3, c3)
        F(x + dt * a3, y + dt * b3, z + dt * c3, a4, b4, c4)
        x += dt * (a1 / 6.0f + a2 / 3.0f + a3 / 3.0f + a4 / 6.0f);
        y += dt * (b1 / 6.0f + b2 / 3.0f + b3 / 3.0f + b4 / 6.0f);
        z += dt * (c1 / 6.0f + c2 / 3.0f + c3 / 3.0f + c4 / 6.0f);
    }
    s[i] = x; s[n + i] = y; s[2 * n + i] = z;
}
"""


def make(rho, u0, dt, steps, sigma=10.0, beta=8.0 / 3.0, threads: int = 128):
    from vgpu_compiler.backends.cuda import device, nvrtc
    ok, why = device.available()
    if not ok:
        raise ImportError(f"skipped (no CUDA GPU here: {why[:60]})")
    d, arch = device._driver(), device._current()
    module = device._check(d.cuModuleLoadData(nvrtc.compile(LORENZ_SRC, arch, "lorenz.cu")),
                           "cuModuleLoadData")
    fn = device._check(d.cuModuleGetFunction(module, b"lorenz"), "cuModuleGetFunction")
    n = len(rho)
    d_rho, d_s = device._Buffer(4 * n), device._Buffer(12 * n)
    out = np.empty((3, n), np.float32)

    def call():
        device._current()
        d_rho.write(np.ascontiguousarray(rho, np.float32))
        d_s.write(np.ascontiguousarray(np.asarray(u0, np.float32).T))
        args = ((int(d_rho.ptr), int(d_s.ptr), n, dt, steps, sigma, beta),
                (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_int,
                 ctypes.c_float, ctypes.c_float))
        device._check(d.cuLaunchKernel(fn, -(-n // threads), 1, 1, threads, 1, 1, 0, 0,
                                       args, 0), "cuLaunchKernel")
        d_s.read(out)
        return out.T.copy()
    call.keep = (module, d_rho, d_s)
    return call
