"""The one OpenGL context of the process, owned by one worker thread.

OpenGL contexts are bound to a thread, so every GL call is submitted to the
worker (``call(fn, *args)``) and the caller waits for its result: calls from
any thread are safe, and they run one at a time. ``VGPU_NO_GL=1`` forces
"no context". The context is headless: EGL first, then moderngl's default.

A child made by ``os.fork`` (or a multiprocessing "fork" pool) has no worker
thread. If the parent never started GL, the child makes its own context when it
first wants one. If it had, the child has no context: llvmpipe's threads do not
survive a fork, and a second context made in the child hangs at its first
dispatch, so ``error`` says why and ``backend="auto"`` runs on numpy there.

A caller interrupted (Ctrl-C) while waiting for its job still waits for the job
to end before the KeyboardInterrupt goes on, so the locks it holds cover the GL
work (glsl_exec keeps every job to one dispatch or less).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any, Callable

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
    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        try:
            self._create()
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
    def on_worker(self) -> bool:
        return threading.current_thread() is self._thread

    def available(self) -> bool:
        self._start()
        return self.ctx is not None

    def call(self, fn: Callable, *args):
        """Run ``fn(ctx, *args)`` on the GL thread and return its result."""
        if self.on_worker():            # already there (a run calls its pieces so)
            return fn(self.ctx, *args)
        self._start()
        if self.ctx is None:
            raise NoContext(self.error or "no OpenGL context")
        job = _Job(fn, (self.ctx, *args))
        self._queue.put(job)
        return job.wait()


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
