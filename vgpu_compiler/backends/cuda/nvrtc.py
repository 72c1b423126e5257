"""NVRTC (the nvidia-cuda-nvrtc wheel, through cuda-bindings): CUDA text to a cubin for
one GPU architecture (``sm_80``, ``sm_90`` ...), or PTX for a virtual one
(``compute_90``). Needs no GPU and no CUDA toolkit; a refusal is a BackendError with
NVRTC's log."""
from __future__ import annotations

import functools

from ...errors import BackendError

# No fused multiply-add and IEEE division and square root: the numbers of the C kernel
# (gcc -ffp-contract=off) and the numpy reference.
OPTIONS = ("-default-device", "-std=c++17", "--fmad=false", "--prec-div=true",
           "--prec-sqrt=true", "--ftz=false", "-w")


@functools.lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise BackendError(f"NVRTC is not installed (pip install cuda-bindings "
                           f"nvidia-cuda-nvrtc-cu12): {e}") from None
    return nvrtc


def available() -> tuple[bool, str]:
    try:
        version()
    except BackendError as e:
        return False, str(e)
    return True, ""


@functools.lru_cache(maxsize=1)
def version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:      # noqa: BLE001 - the library itself did not load
        raise BackendError(f"NVRTC did not load: {e}") from None
    _check(err, "nvrtcVersion")
    return major, minor


def _check(err, what: str, log: str = "") -> None:
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise BackendError(f"NVRTC {what} failed ({err.name})" + (f":\n{log}" if log else ""))


def compile(text: str, arch: str = "sm_90", name: str = "field.cu") -> bytes:
    """The cubin (``sm_XY``) or PTX (``compute_XY``) of ``text``."""
    nvrtc = _nvrtc()
    version()
    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in OPTIONS + (f"--gpu-architecture={arch}",)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BackendError(f"NVRTC refused the CUDA kernel `{name}` for {arch}:\n"
                               f"{_log(prog)[:4000]}")
        ptx = arch.startswith("compute_")
        err, size = (nvrtc.nvrtcGetPTXSize if ptx else nvrtc.nvrtcGetCUBINSize)(prog)
        _check(err, "size")
        out = b" " * size
        (err,) = (nvrtc.nvrtcGetPTX if ptx else nvrtc.nvrtcGetCUBIN)(prog, out)
        _check(err, "output")
        return out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(prog) -> str:
    nvrtc = _nvrtc()
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0 ").decode(errors="replace")
