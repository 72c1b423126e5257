"""The CUDA Device: the driver API through cuda-bindings (cuInit, the primary context,
cuModuleLoadData of NVRTC's cubin for this GPU's compute capability, kept by
cubin_cache.py in memory and on disk, cuMemAlloc and copies, cuLaunchKernel),
and the cpu backend's host drivers (cpu/runner.py, cpu/adaptive_run.py) over it.

The drivers keep every buffer as a numpy array and read them between kernel calls
(the error record, the status and counter rows, the event log), so this first form
mirrors them: each kernel call copies the host arrays to their device buffers, launches
one CUDA thread per block of the C kernel (cuda/source.py), and copies them back. The
arithmetic is the C kernel's; only where the buffers live differs. Device-resident
buffers (and CuPy/PyTorch arrays in place) are the next step.

Untested without an NVIDIA GPU: CI compiles every kernel with NVRTC (tests/
test_cuda_nvrtc.py); benchmarks/device_h200.sh runs the equivalence suite on one.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from ...call.counters import COUNTERS
from ...errors import BackendError
from ...runtime.kernel_cache import KernelCache
from ..cpu.adaptive_run import AdaptiveCall
from ..cpu.kernel import CpuKernel
from ..cpu.runner import _Call
from . import cubin_cache, nvrtc, source

# The loaded modules, by (text, arch, NVRTC's version): a str's hash is computed once, so
# a call that finds its module hashes no text (cubin_cache keys by the text's SHA-256 on a
# miss only). One that goes is not unloaded: a run may still hold its function (the
# reference goes, not the module: no release hook). The kernel cache every backend shares
# (runtime/kernel_cache.py), beside cubin_cache.MEMORY (the binaries, by text digest).
_modules = KernelCache(cubin_cache.MEMORY_CAPACITY)


def _driver():
    from cuda.bindings import driver
    return driver


def _check(result, what: str):
    """The values of a driver call's (CUresult, ...) answer; a BackendError otherwise."""
    err, rest = result[0], result[1:]
    if int(err) != 0:
        d = _driver()
        name = d.cuGetErrorName(err)[1]
        raise BackendError(f"CUDA {what} failed: "
                           f"{name.decode() if isinstance(name, bytes) else err}")
    return rest[0] if len(rest) == 1 else rest


@functools.lru_cache(maxsize=1)
def context():
    """(device, primary context, "sm_XY") of GPU 0, made current on the calling thread."""
    d = _driver()
    _check(d.cuInit(0), "cuInit")
    if _check(d.cuDeviceGetCount(), "cuDeviceGetCount") < 1:
        raise BackendError("no CUDA device")
    dev = _check(d.cuDeviceGet(0), "cuDeviceGet")
    attr = d.CUdevice_attribute
    major = _check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          dev), "cuDeviceGetAttribute")
    minor = _check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          dev), "cuDeviceGetAttribute")
    ctx = _check(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return dev, ctx, f"sm_{major}{minor}"


def _current():
    dev, ctx, arch = context()
    _check(_driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent")   # (any calling thread)
    return arch


def available() -> tuple[bool, str]:
    ok, why = nvrtc.available()
    if not ok:
        return False, why
    try:
        name = _check(_driver().cuDeviceGetName(64, context()[0]), "cuDeviceGetName")
    except Exception as e:      # noqa: BLE001 - no libcuda, no driver, no GPU
        return False, f"no CUDA driver or GPU here ({str(e).splitlines()[0][:160]})"
    return True, name.split(b"\0")[0].decode(errors="replace")


def kernel(field, dtype: str, per_trajectory=(), dense: bool = False) -> CpuKernel:
    """The field's CUDA kernel for this GPU (its compute capability), loaded: the cubin
    from cubin_cache (memory, disk, or NVRTC); ``fn`` is the CUfunction of ``vg_kernel``."""
    arch = _current()
    text, meta, lanes, n_int = source.source(field, dtype, per_trajectory, dense)
    key = (text, arch, nvrtc.version())
    hit = _modules.get(key)
    if hit is not None:
        COUNTERS.add("memory_hits")
        return hit
    cubin = cubin_cache.binary(text, arch, f"{field.name}.cu")
    COUNTERS.add("compiles")        # (as on cpu: every kernel made ready, from disk or not)
    d = _driver()
    module = _check(d.cuModuleLoadData(cubin), "cuModuleLoadData")
    fn = _check(d.cuModuleGetFunction(module, b"vg_kernel"), "cuModuleGetFunction")
    return _modules.put(CpuKernel(text, meta, lanes, n_int, fn, module), key)


def forget() -> int:
    """Drop the loaded modules' references (vgpu.clear_cache); how many there were."""
    return _modules.clear()


def loaded() -> int:
    return len(_modules)


class _Buffer:
    """Device memory of ``nbytes`` (at least one byte), freed with the object."""

    def __init__(self, nbytes: int):
        self.nbytes = max(1, int(nbytes))
        self.ptr = _check(_driver().cuMemAlloc(self.nbytes), "cuMemAlloc")

    def write(self, a: np.ndarray) -> None:
        if a.nbytes:
            _check(_driver().cuMemcpyHtoD(self.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")

    def read(self, a: np.ndarray) -> None:
        if a.nbytes:
            _check(_driver().cuMemcpyDtoH(a.ctypes.data, self.ptr, a.nbytes), "cuMemcpyDtoH")

    def __del__(self):
        try:
            _driver().cuMemFree(self.ptr)
        except Exception:       # noqa: BLE001 - at interpreter exit
            pass


class Mirrored:
    """A cpu runner whose kernel call runs on the GPU: its arrays copied there and back."""

    def _arrays(self) -> list[np.ndarray]:
        """The host arrays in the order of the kernel's pointer table (runner.py)."""
        arrays = list(self.buffers) + [self.dep_at, self.dep_value]
        if getattr(self, "ev_outputs", None):       # the event log (adaptive_run.py)
            arrays += [self.ev_at, self.ev_value]
        return arrays

    def _launch(self, fu: np.ndarray, iu: np.ndarray) -> None:
        _current()
        arrays = self._arrays()
        sizes = [a.nbytes for a in arrays] + [fu.nbytes, iu.nbytes]
        if getattr(self, "_sizes", None) != sizes:      # (the first call, or new arrays)
            self._sizes = sizes
            self._dev = [_Buffer(n) for n in sizes]
            table = np.array([int(b.ptr) for b in self._dev[:len(arrays)]], np.uint64)
            self._table = _Buffer(table.nbytes)
            self._table.write(table)
        for a, b in zip(arrays + [fu, iu], self._dev):
            b.write(np.ascontiguousarray(a))
        dfu, diu = self._dev[-2:]
        d = _driver()
        attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        threads = min(source.THREADS, _check(d.cuFuncGetAttribute(attr, self.k.fn),
                                             "cuFuncGetAttribute"))
        grid = -(-self.nblocks // threads)
        args = ((int(dfu.ptr), int(diu.ptr), int(self._table.ptr), self.nblocks),
                (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
        _check(d.cuLaunchKernel(self.k.fn, grid, 1, 1, threads, 1, 1, 0, 0, args, 0),
               "cuLaunchKernel")
        _check(d.cuCtxSynchronize(), "the kernel")
        for a, b in zip(arrays, self._dev):
            b.read(a)


class FixedCall(Mirrored, _Call):
    pass


class AdaptiveCudaCall(Mirrored, AdaptiveCall):
    pass


CALLS = (FixedCall, AdaptiveCudaCall)
