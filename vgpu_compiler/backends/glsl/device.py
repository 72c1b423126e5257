"""The one OpenGL context of the process, and the one way to use it: ``call(fn, *args)``.

A worker thread makes the context (headless: EGL first, then moderngl's
default; ``VGPU_NO_GL=1`` forces "no context"). An OpenGL context is current on
one thread at a time, so calls from any thread are safe and run one at a time,
in one of two ways, chosen once when the context is made:
- *direct* (where the context can be made current on another thread, as EGL's
  can): the caller takes the context's lock, makes the context current on its
  own thread (moderngl's ``ctx.__enter__``, about 1.4 us with its ``__exit__``),
  runs ``fn`` there and releases it. No hand-off between threads: on a repeated
  small call that hand-off was most of the time spent outside the GL work;
- *worker*: ``fn`` is handed to the worker thread, and the caller waits.

A child made by ``os.fork`` (or a multiprocessing "fork" pool) has no worker
thread. If the parent never started GL, the child makes its own context when it
first wants one. If it had, the child has no context: llvmpipe's threads do not
survive a fork, and a second context made in the child hangs at its first
dispatch, so ``error`` says why and ``backend="auto"`` runs on numpy there.

A caller interrupted (Ctrl-C) while its job runs still lets the job end before
the KeyboardInterrupt goes on, so the locks it holds cover the GL work (execute
keeps every job to one dispatch or less); a second interrupt does not wait. In
direct mode the main thread holds a first SIGINT back while it runs a job.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import queue
import threading

from typing import Any, Callable

from ...call.interrupt import held

log = logging.getLogger("vgpu")

REQUIRE = 430


class NoContext(RuntimeError):
    """No OpenGL 4.3 context can be made here."""


class _Job:
    """One call handed to the worker. A plain lock signals completion: on small problems
    the hand-off is a visible part of a call, and this is the cheapest one Python has."""

    __slots__ = ("fn", "args", "done", "result", "error", "over")

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args
        self.done = threading.Lock()
        self.done.acquire()
        self.result: Any = None
        self.error: BaseException | None = None
        self.over = False               # set just before ``done`` is released

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args)
        except BaseException as exc:    # handed to the caller, re-raised there
            self.error = exc
        finally:
            self.over = True
            self.done.release()

    def wait(self):
        try:
            self.done.acquire()
        except BaseException:
            # KeyboardInterrupt: let the job in flight end first, so that the locks the
            # caller holds still cover its GL work when they are released (a second
            # interrupt does not wait). The interrupt may come after ``done`` was taken.
            if not self.over:
                self.done.acquire()
            raise
        if self.error is not None:
            raise self.error
        return self.result


class GLThread:
    prefer_direct = True            # False: always hand calls to the worker (measurements)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gl_lock = threading.Lock()    # direct mode: held while a thread has the context
        self._holder: int | None = None      # the thread that has it (a job's own gl.call)
        self._worker: int | None = None      # the worker thread's ident, once it runs
        self.direct = False
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._ready: threading.Event | None = None
        self.ctx = None
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        # The context's storage-buffer binding points: (kernel, its buffer generation)
        # whose buffers they hold (execute binds again only when another's are wanted).
        self.bound_buffers: tuple | None = None

    # --- the worker -------------------------------------------------------------
    def _start(self) -> None:
        ready = self._ready
        if ready is not None and ready.is_set():    # started: the check of every call
            return
        with self._lock:
            if self._thread is None:
                self._ready = threading.Event()
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="vgpu-gl")
                self._thread.start()
        self._ready.wait()          # every caller, not only the first, waits for the context

    def _loop(self) -> None:
        self._worker = _get_ident()
        try:
            self._create()
            if self.ctx is not None and self.prefer_direct:
                self.direct = _release(self.ctx)
        finally:
            self._ready.set()
        while True:
            job = self._queue.get()
            if job is None:
                break
            job.run()

    # --- fork --------------------------------------------------------------------
    def _before_fork(self) -> None:
        self._lock.acquire()            # the child sees a whole start, or none

    def _after_fork_parent(self) -> None:
        self._lock.release()

    def _after_fork_child(self) -> None:
        self._lock = threading.Lock()
        self._gl_lock = threading.Lock()
        self._holder = None
        if self._thread is None:        # GL never started (the child starts its own), or
            return                      # this process is a settled child itself
        if self.ctx is not None or self.error is None:
            self.ctx = None             # the parent's context is not usable here
            self.error = (f"this process was forked from process {os.getppid()}, which had "
                          f"already started OpenGL, and a forked child cannot use OpenGL "
                          f"(start it with multiprocessing's 'spawn' or 'forkserver' "
                          f"method to use GLSL there)")
        self.info = {}
        self.bound_buffers = None
        self._queue = None
        self._thread = None
        self._worker = None
        self._ready = threading.Event()
        self._ready.set()               # settled: unavailable, for good

    def _create(self) -> None:
        if os.environ.get("VGPU_NO_GL", "") not in ("", "0"):
            self.error = "VGPU_NO_GL is set"
            return
        try:
            import moderngl
        except ImportError as exc:
            self.error = f"moderngl cannot be imported ({exc})"
            return
        errors = []
        for kwargs in ({"backend": "egl"}, {}):
            try:
                self.ctx = moderngl.create_standalone_context(require=REQUIRE, **kwargs)
                break
            except Exception as exc:        # noqa: BLE001 - any driver failure means "no"
                errors.append(f"{kwargs.get('backend', 'default')}: {exc}".splitlines()[0])
        if self.ctx is None:
            self.error = "; ".join(errors)
            return
        self.info = _describe(self.ctx)

    # --- the public face -----------------------------------------------------------
    def available(self) -> bool:
        self._start()
        return self.ctx is not None

    def call(self, fn: Callable, *args):
        """Run ``fn(ctx, *args)`` with the context current, alone, and return its result."""
        me = _get_ident()
        if me == self._holder or me == self._worker:    # inside a job already
            return fn(self.ctx, *args)
        ready = self._ready
        if ready is None or not ready.is_set():
            self._start()
        ctx = self.ctx
        if ctx is None:
            raise NoContext(self.error or "no OpenGL context")
        if self.direct and not _other_context_current():
            if me == _MAIN:                 # where SIGINT lands: hold it back
                return _holding_sigint(self._direct, fn, args)
            return self._direct(fn, args)
        # worker mode; or a thread with a GL context of its own current, which making ours
        # current would release: the worker runs the job (direct: making ours current there)
        job = _Job(self._direct, (fn, args)) if self.direct else _Job(fn, (ctx, *args))
        self._queue.put(job)
        return job.wait()

    def _direct(self, fn: Callable, args: tuple):
        """Run ``fn`` on this thread with the context current here, alone."""
        ctx = self.ctx
        with self._gl_lock:
            try:
                ctx.__enter__()
                self._holder = _get_ident()
                return fn(ctx, *args)
            finally:
                self._holder = None
                ctx.__exit__(None, None, None)


_MAIN = threading.main_thread().ident
_get_ident = threading.get_ident


def _release(ctx) -> bool:
    """Make ``ctx`` current on no thread (it is on the one that made it); True when it can
    then be made current on another (the worker checks on itself)."""
    try:
        ctx.__exit__(None, None, None)
        ctx.__enter__()
        ctx.__exit__(None, None, None)
    except Exception as exc:       # noqa: BLE001 - any failure: stay on the worker
        log.debug("OpenGL context stays on its thread: %s", exc)
        try:
            ctx.__enter__()
        except Exception:          # noqa: BLE001
            pass
        return False
    return True


def _other_context_current() -> bool:
    """True when this thread has a GL context current (the user's own: EGL, or GLX where
    the process loaded it). moderngl's EGL ``__exit__`` releases the current context
    rather than restoring the one before, so such a thread hands its job to the worker."""
    for get in _current_context_getters():
        if get():
            return True
    return False


@functools.lru_cache(maxsize=1)
def _current_context_getters() -> tuple:
    getters = []
    for lib, name in (("libEGL.so.1", "eglGetCurrentContext"),
                      ("libGLX.so.0", "glXGetCurrentContext"),
                      ("libGL.so.1", "glXGetCurrentContext")):
        try:        # only libraries the process has loaded already (RTLD_NOLOAD)
            fn = getattr(ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LAZY), name)
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_void_p, []
        address = ctypes.cast(fn, ctypes.c_void_p).value
        if all(address != ctypes.cast(g, ctypes.c_void_p).value for g in getters):
            getters.append(fn)          # (libGL's may be libGLX's own, under glvnd)
    return tuple(getters)


def _holding_sigint(run: Callable, fn: Callable, args: tuple):
    """``run(fn, args)`` on the main thread with a first SIGINT held back until it ends
    (a second one raises at once), then delivered as the handler in force would."""
    with held():
        return run(fn, args)


def _describe(ctx) -> dict[str, Any]:
    info = ctx.info
    return {
        "vendor": info.get("GL_VENDOR", ""),
        "renderer": info.get("GL_RENDERER", ""),
        "version": info.get("GL_VERSION", ""),
        "max_block": int(info.get("GL_MAX_SHADER_STORAGE_BLOCK_SIZE", 1 << 27)),
        "max_groups": tuple(int(x) for x in info.get("GL_MAX_COMPUTE_WORK_GROUP_COUNT",
                                                     (65535, 65535, 65535))),
        "max_blocks": int(info.get("GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS", 8)),
        "native_float_atomic": "GL_NV_shader_atomic_float" in ctx.extensions,
    }


GL = GLThread()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: GL._before_fork(),
                        after_in_parent=lambda: GL._after_fork_parent(),
                        after_in_child=lambda: GL._after_fork_child())


def available() -> bool:
    return GL.available()


def call(fn: Callable, *args):
    return GL.call(fn, *args)


def device_info() -> dict[str, Any]:
    """vendor, renderer, version and limits of the context ({} without one)."""
    return dict(GL.info) if GL.available() else {}


class GlDevice:
    """runtime/device.py's Device over the process's GL context (``GL``): a program is a
    compute shader, a buffer a GL buffer; a dispatch binds the buffers to storage
    bindings 0, 1, ... and the uniforms, when given, to the uniform block binding after
    them (``layout(std140, binding = N) uniform ...``), runs, and puts a memory barrier
    before anything that follows. Each operation is one trip to the context (``call``);
    the drivers batch a dispatch's GL calls into one trip instead."""

    def __init__(self):
        if not available():
            raise NoContext(GL.error or "no OpenGL context")
        self._ubufs: dict = {}          # id(program) -> its uniform buffer

    def compile(self, source: str, entry: str = "main"):
        return call(lambda ctx: ctx.compute_shader(source))

    def buffer(self, nbytes: int):
        return call(lambda ctx: ctx.buffer(reserve=max(16, -(-nbytes // 16) * 16)))

    def write(self, buffer, data) -> None:
        call(lambda ctx: buffer.write(data))

    def dispatch(self, program, buffers: list, groups: tuple, uniforms: bytes = b"") -> None:
        def run(ctx):
            for i, b in enumerate(buffers):
                b.bind_to_storage_buffer(i)
            if uniforms:
                ubuf = self._ubufs.get(id(program))
                if ubuf is None or ubuf.size < len(uniforms):
                    ubuf = self._ubufs[id(program)] = ctx.buffer(
                        reserve=max(16, -(-len(uniforms) // 16) * 16))
                ubuf.write(uniforms)
                ubuf.bind_to_uniform_block(len(buffers))
            program.run(*groups)
            ctx.memory_barrier()
        call(run)

    def read(self, buffer, nbytes: int) -> bytes:
        return call(lambda ctx: buffer.read(size=nbytes))

    def release(self, *objects) -> None:
        def run(ctx):
            for o in objects:
                ubuf = self._ubufs.pop(id(o), None)
                if ubuf is not None:
                    ubuf.release()
                o.release()
        call(run)

    def limits(self) -> dict:
        info = device_info()
        return {"max_storage_buffer_binding_size": info.get("max_block", 1 << 27),
                "max_compute_workgroups_per_dimension": min(info.get("max_groups", (65535,))),
                "max_storage_buffers_per_shader_stage": info.get("max_blocks", 8)}

    def software(self) -> bool:
        from .. import get          # the registry's glsl backend says (its renderer test)
        return bool(get("glsl").software())
