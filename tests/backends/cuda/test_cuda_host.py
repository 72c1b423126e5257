"""The cuda Device's host side without a GPU: device.py's runners (the cpu runners whose
kernel call copies every buffer to the device, launches, and copies them back) over a
stand-in driver whose "device memory" is host memory and whose launch calls the cpu
backend's C kernel with the device pointer table. Every copy, the table's order (the
event log included) and the launch's arguments are exercised; the results must be the
cpu backend's own, bit for bit. (The driver calls themselves run only on a GPU:
tests/backends/cuda/test_cuda_equivalence.py.)"""
from __future__ import annotations

import ctypes
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends as registry
from vgpu_compiler.backends.cpu import dispatch

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class HostBuffer:
    """A stand-in for device memory: host bytes at their own address."""
    made: list = []

    def __init__(self, nbytes: int):
        self.data = np.zeros(max(1, int(nbytes)), np.uint8)
        self.ptr = self.data.ctypes.data
        HostBuffer.made.append(self)

    def write(self, a):
        self.data[:a.nbytes] = np.frombuffer(np.ascontiguousarray(a).tobytes(), np.uint8)

    def read(self, a):
        a.reshape(-1).view(np.uint8)[:] = self.data[:a.nbytes]


@pytest.fixture
def stand_in(cpu, monkeypatch):
    from vgpu_compiler.backends.cuda import device
    launches = []

    def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, args, extra):
        values, types = args
        assert types == (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        assert gx * bx >= values[3] and (gy, gz, by, bz, shared) == (1, 1, 1, 1, 0)
        launches.append(values[3])
        fn(*values)                 # the C kernel over the stand-in device buffers
        return (0,)

    attr = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK=1)
    fake = SimpleNamespace(CUfunction_attribute=attr, cuLaunchKernel=launch,
                           cuFuncGetAttribute=lambda a, f: (0, 1024),
                           cuCtxSynchronize=lambda: (0,))
    monkeypatch.setattr(device, "_driver", lambda: fake)
    monkeypatch.setattr(device, "_current", lambda: "sm_90")
    monkeypatch.setattr(device, "_Buffer", HostBuffer)
    real = registry.get("cuda")
    registry.register(dataclasses.replace(
        real, available=lambda: (True, ""),
        run=lambda p, d, progress=None: dispatch.run(p, d, progress, calls=device.CALLS)))
    yield launches
    registry.unregister("cuda")


def _same(src, dtype="float32", **kw):
    want = vgpu.solve(src, backend="cpu", dtype=dtype, **kw)
    got = vgpu.solve(src, backend="cuda", dtype=dtype, **kw)
    np.testing.assert_array_equal(got.states, want.states)
    for name in want.outputs:
        np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
    if want.history is not None:
        np.testing.assert_array_equal(got.history, want.history)
    return got


def test_a_fixed_step_run_with_a_history(stand_in):
    src = vgpu.load(EXAMPLES / "lorenz.field")
    h0 = np.tile(np.float32([1, 1, 20]), (300, 1))
    _same(src, h0=h0, params={"rho": np.linspace(0, 40, 300)}, save_every=100)
    assert len(stand_in) > 1         # the start values, then one call per saved step


def test_an_adaptive_run(stand_in):
    h0 = np.tile([2.0, 0.0], (100, 1))
    _same(vgpu.load(EXAMPLES / "vanderpol_adaptive.field"), "float64", h0=h0)


def test_events_with_flux_into_the_event_log(stand_in):
    got = _same(vgpu.load(EXAMPLES / "lif.field"), dims={"N": 64})
    assert got.outputs["raster"].sum() > 0


def test_a_run_time_error_is_read_back(stand_in):
    src = ("field f { input w[N]\n grid i < N\n state y\n dy/dt = w[i + 1]\n"
           " solve euler(dt = 1, steps = 1) }")
    with pytest.raises(vgpu.VgpuError, match="index out of range"):
        vgpu.run_field(src, np.zeros(4), inputs={"w": np.ones(4)}, backend="cuda")
