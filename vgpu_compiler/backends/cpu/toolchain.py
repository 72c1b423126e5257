"""The system C compiler with OpenMP: finding it, compiling a kernel, loading it.

Why C through the system compiler (and not Numba): a printed C kernel is the shared
kernel description spelled by one more dialect (the GLSL printer and its index
arithmetic unchanged), gcc/clang vectorise its lane loops (``#pragma omp simd``)
for the CPU they run on (``-march=native``), OpenMP runs the blocks on every core,
and a kernel compiles in a fraction of a second with nothing added to the Python
environment (Numba pins LLVM and numpy versions and adds ~1 s of import). Where no
compiler with OpenMP is found the backend is unavailable, saying why, and ``auto``
moves on.

Floats keep IEEE meaning: no ``-ffast-math``, ``-ffp-contract=off`` (no fused
multiply-add: numpy rounds every product), ``-fwrapv`` (ints wrap, as int32 does
in numpy). ``VGPU_CC`` names another compiler.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from ...errors import BackendError, VgpuError
from . import library_cache

FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fwrapv",
         "-fno-math-errno", "-fno-trapping-math", "-fno-builtin-sin", "-fno-builtin-cos",
         "-fno-builtin-sinf", "-fno-builtin-cosf",
         "-fPIC", "-shared", "-std=gnu11", "-w")
# gcc only: no unroll-and-jam of the step loop into the lane loop. Two steps of one vector
# per iteration make one dependency chain twice as long, and the out-of-order core then
# overlaps half as many lanes: the Lorenz sweep (rk4, 262,144) ran at 2.6e9
# trajectory-steps/s with it, 3.4e9 without (2 cores).
GCC_FLAGS = ("-fno-loop-unroll-and-jam",)
CC_ENV = "VGPU_CC"
# VGPU_CPU_LIBMVEC=0: the kernels call libm's scalar functions, not libmvec's SIMD ones
# (templates/helpers.c.j2); the probe does the same where a library calling libmvec
# does not load (a C library without it).
LIBMVEC_ENV = "VGPU_CPU_LIBMVEC"
NO_LIBMVEC = "-DVG_NO_LIBMVEC"
_PROBE = """
#include <math.h>
#include <omp.h>
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) \\
    && !defined(VG_NO_LIBMVEC)
#if __GLIBC_PREREQ(2, 22)
extern double exp(double) __attribute__((simd("notinbranch"), const, nothrow, leaf));
#endif
#endif
double vg_probe_x[64];
int vg_probe(void) { int n = 0;
#pragma omp parallel reduction(+:n)
  n += 1;
#pragma omp simd
  for (int i = 0; i < 64; i++)
    vg_probe_x[i] = exp(vg_probe_x[i]);
  return n + (int)floor(0.5 * vg_probe_x[0]); }
"""
_no_libmvec: list = []      # [why] once the probe found that libmvec does not load


def compiler() -> str | None:
    name = os.environ.get(CC_ENV)
    if name:
        return shutil.which(name)
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


@functools.lru_cache(maxsize=None)
def _version_text(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout


def _version(cc: str) -> str:
    text = _version_text(cc)
    return text.splitlines()[0] if text else cc


def flags(cc: str) -> tuple[str, ...]:
    """FLAGS, and GCC_FLAGS where ``cc`` is gcc (clang does not take them), and
    -DVG_NO_LIBMVEC where libmvec is not to be called (VGPU_CPU_LIBMVEC=0, or the probe
    found it missing)."""
    text = _version_text(cc)
    gcc = "Free Software Foundation" in text and "clang" not in text.lower()
    scalar = _no_libmvec or os.environ.get(LIBMVEC_ENV, "") == "0"
    return FLAGS + (GCC_FLAGS if gcc else ()) + ((NO_LIBMVEC,) if scalar else ())


def cpu_features() -> str:
    """What the code is compiled for: the machine and its CPU's feature flags."""
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "model name", "Features")):
                    text += line
                    if line.startswith(("flags", "Features")):
                        break
    except OSError:
        text = platform.processor()
    return f"{platform.machine()} {text}"


_available: list = []
_lock = threading.Lock()
_pending: list = []         # the thread of a probe start_probe began, until it is joined


def _after_fork_in_child() -> None:
    """A probe thread does not survive a fork: the child probes for itself."""
    global _lock
    _lock = threading.Lock()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


NO_CPU_ENV = "VGPU_NO_CPU"


def start_probe() -> None:
    """Begin the probe in a background thread and return at once (the registry's
    start_probe: a call that will likely run here starts it before its front end, so
    that the compiler's 0.1 s on an empty cache overlaps the parse and the render);
    ``available()`` waits for it. Nothing when already probed or started."""
    if _available or _pending or os.environ.get(NO_CPU_ENV, "") not in ("", "0"):
        return
    with _lock:
        if _available or _pending:
            return
        thread = threading.Thread(target=_probe_into, name="vgpu-cpu-probe")
        _pending.append(thread)
        thread.start()


def _probe_into() -> None:
    try:
        result = _probe()
    except Exception:           # noqa: BLE001 - available() probes again, and says why
        return
    with _lock:
        if not _available:
            _available.append(result)


# os.environ's own mapping (POSIX: bytes -> bytes), read without its Mapping layers:
# ``disabled`` runs on every call (0.05 us, os.environ.get 0.4-0.9 us)
_ENVIRON = getattr(os.environ, "_data", None) if os.name == "posix" else None
_NO_CPU_KEY = NO_CPU_ENV.encode()


def disabled() -> bool:
    """``VGPU_NO_CPU`` is set (to anything but "" or "0"), read now."""
    if _ENVIRON is not None:
        return _ENVIRON.get(_NO_CPU_KEY, b"") not in (b"", b"0")
    return os.environ.get(NO_CPU_ENV, "") not in ("", "0")


def available() -> tuple[bool, str]:
    """Is there a C compiler with OpenMP here (probed once)? ``VGPU_NO_CPU`` set: no."""
    if disabled():
        return False, f"{NO_CPU_ENV} is set (unset it to use the cpu backend)"
    if _available and not _pending:     # probed, the probe's thread joined: every call
        return _available[0]
    for thread in list(_pending):       # (a background probe: its answer)
        thread.join()
    with _lock:
        if _available:                  # (start_probe sees _available first)
            _pending.clear()
        if not _available:
            _available.append(_probe())
        return _available[0]


def _probe() -> tuple[bool, str]:
    cc = compiler()
    if cc is None:
        wanted = os.environ.get(CC_ENV)
        return False, (f"{CC_ENV}={wanted} is not an executable" if wanted else
                       "no C compiler (cc, gcc or clang) on PATH; install gcc")
    try:
        try:
            lib = build(_PROBE, "probe")
        except OSError as e:            # "undefined symbol: _ZGV...": no libmvec here
            if "_ZGV" not in str(e):
                raise
            _no_libmvec.append(str(e))
            lib = build(_PROBE, "probe")
        fn = lib.vg_probe
        fn.restype = ctypes.c_int
        if fn() < 1:
            return False, f"{cc}: OpenMP probe ran no thread"
    except (OSError, RuntimeError, subprocess.SubprocessError, VgpuError) as e:
        return False, f"{cc} cannot build an OpenMP library: {str(e).strip()[:300]}"
    return True, ""


def key(source: str) -> str:
    """The disk key of a kernel: its text, the compiler, its flags and this CPU."""
    cc = compiler() or ""
    h = hashlib.sha256()
    for part in (source, cc, _version(cc) if cc else "", " ".join(flags(cc) if cc else FLAGS),
                 cpu_features()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def folder() -> Path:
    return library_cache.folder()


COMPILE_TIMEOUT = 300.0     # seconds: past it the compiler is stopped (a BackendError)


def build(source, name: str, on_disk=None, compiled=None,
          disk_key: str | None = None, tag=None) -> ctypes.CDLL:
    """The loaded library of ``source``: from the disk cache (library_cache.py: checked
    before it is loaded), or compiled in a private temporary folder and put into the
    cache (``on_disk()`` / ``compiled()`` are told which). With the cache off it is
    loaded from the temporary folder (its name holds the key, so the loader never
    takes one such library for another). ``source`` is the C text, or a function that
    returns it (called only when the library is not on disk); ``disk_key``: its key
    (by default ``key`` of the text); ``tag()``: whose kernel it is, in its name on disk
    (library_cache.tag_of; asked only when it is compiled)."""
    k = disk_key if disk_key is not None else key(source)
    lib = library_cache.load(name, k)
    if lib is not None:
        if on_disk:
            on_disk()
        return lib
    if compiled:
        compiled()
    text = source() if callable(source) else source
    with tempfile.TemporaryDirectory(prefix="vgpu-cc-") as tmp:
        so = Path(tmp) / f"{name}-{k}.so"
        _compile(text, Path(tmp) / "kernel.c", so)
        cached = library_cache.store(name, k, so.read_bytes(), tag() if tag else "")
        errors = []
        for path in (cached, so) if cached else (so,):
            try:
                return ctypes.CDLL(str(path))
            except OSError as e:        # (a cache folder mounted noexec: the private copy)
                errors.append(str(e))
        raise RuntimeError(f"cannot load the compiled library: {'; '.join(errors)}")


def _compile(source: str, c: Path, so: Path) -> None:
    """Compile ``source`` into the library ``so``: RuntimeError with the compiler's
    messages if it refuses; BackendError if it takes more than COMPILE_TIMEOUT (it is
    stopped, with every process it started)."""
    c.write_text(source)
    cc = compiler()
    proc = subprocess.Popen([cc, *flags(cc), "-o", str(so), str(c), "-lm"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)     # its own group: stopped as one
    try:
        out, err = proc.communicate(timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise BackendError(f"the C compiler ({cc}) took more than {COMPILE_TIMEOUT:g} s to "
                           f"build a kernel and was stopped (a loaded machine, or a very "
                           f"large field); use another backend") from None
    except BaseException:       # Ctrl-C: the compiler goes too
        _stop(proc)
        raise
    if proc.returncode != 0:
        raise RuntimeError(err or out)


def _stop(proc: subprocess.Popen) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:
        proc.kill()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pass
