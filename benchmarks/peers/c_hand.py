"""A hand-written C kernel called through ctypes: the baseline VGPU's cpu backend's
small repeated call is measured against.

The pattern of the hand-cached GPU baselines (glsl_hand, wgsl_hand): the library is
compiled and loaded once, its buffers made once; a call writes A and B into them,
runs the kernel (one C call, on the calling thread) and reads C.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

MATMUL_SRC = r"""
void matmul(const float *A, const float *B, float *C, int M, int K, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int s = 0; s < K; s++) c += A[i * K + s] * B[s * N + j];
            C[i * N + j] = c;
        }
}
"""


def _library(src: str, name: str) -> ctypes.CDLL:
    cc = os.environ.get("VGPU_CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler on PATH")
    folder = tempfile.mkdtemp(prefix="vgpu-hand-")
    c, so = os.path.join(folder, name + ".c"), os.path.join(folder, name + ".so")
    with open(c, "w") as f:
        f.write(src)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, c], check=True,
                   capture_output=True)
    return ctypes.CDLL(so)


class HandMatmul:
    """C = A @ B: library and buffers made once; a call writes A and B, runs, reads C."""

    def __init__(self, m: int, k: int, n: int):
        self.shape = (m, k, n)
        self.fn = _library(MATMUL_SRC, "matmul").matmul
        self.fn.restype = None
        self.a, self.b = np.empty((m, k), np.float32), np.empty((k, n), np.float32)
        self.c = np.empty((m, n), np.float32)
        self.ptrs = (self.a.ctypes.data_as(ctypes.c_void_p),
                     self.b.ctypes.data_as(ctypes.c_void_p),
                     self.c.ctypes.data_as(ctypes.c_void_p))
        self.dims = tuple(ctypes.c_int(x) for x in (m, k, n))

    def __call__(self, A, B):
        np.copyto(self.a, A)                # write
        np.copyto(self.b, B)
        self.fn(*self.ptrs, *self.dims)     # run
        return self.c.copy()                # read
