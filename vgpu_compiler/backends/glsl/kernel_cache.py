"""The GLSL backend's compiled kernels: GpuKernel, each owning its GL objects, kept in
the kernel cache every backend shares (runtime/kernel_cache.py; ``release`` is its hook).

A GpuKernel is a compiled compute program plus the storage buffers it runs
on, allocated once and grown only when a call needs more room. OpenGL binding
points are global state, so the runner binds a kernel's buffers before a
dispatch unless they are the ones bound last. Every GL object is made and
released on the GL thread (gl.call).

Kernel keys leave source positions out, so texts that differ only in comments
or spacing share a kernel; such a text runs it through a FieldView, which
reports run-time errors at that text's own lines.
"""
from __future__ import annotations

import contextlib
import os
import threading
from . import device as gl

DEFAULT_CAPACITY = 32


class GpuKernel:
    def __init__(self, key: str, source: str, meta: dict):
        self.key, self.source, self.meta = key, source, meta
        self.disk_key = key                   # the key of its GLSL on disk (shapes left out)
        self.field_id, self.dtype, self.pt = "", "", ()   # whose kernel it is (evict)
        self.err_dirty = True                 # the error slot needs a reset before a run
        self.lock = threading.Lock()          # one run at a time on these buffers (holding)
        self.retired = False                  # evicted during a run: that run frees it
        self.program = None
        self.uniform_names: frozenset[str] = frozenset()
        self.uniform_values: dict[str, object] = {}
        self.chunk_uniforms: dict | None = None
        self.uniform_owner = None             # see compile
        self.buffers: dict[str, object] = {}  # GLSL buffer name -> moderngl.Buffer
        self.capacity: dict[str, int] = {}
        self.generation = 0                   # bumped whenever a buffer is (re)made
        self.plans: dict = {}                 # limits -> its plan (shader/plan.py; shapes are fixed)
        self.specials: dict = {}              # fixed int uniforms -> Special or None (special.py)

    # --- on the GL thread ------------------------------------------------------
    def compile(self, ctx) -> None:
        self.program = ctx.compute_shader(self.source)
        self.uniform_names = frozenset(self.program)
        self.uniform_values = {}              # what the program's uniforms hold now
        self.chunk_uniforms = None            # the plan.py chunk whose uniforms it holds
        self.uniform_owner = None             # the OneDispatch whose fixed uniforms it holds

    def ensure(self, ctx, name: str, nbytes: int):
        """The buffer ``name`` with room for ``nbytes`` (grown, never shrunk)."""
        nbytes = max(16, int(nbytes))
        if self.capacity.get(name, 0) < nbytes:
            old = self.buffers.pop(name, None)
            if old is not None:
                old.release()
            self.buffers[name] = ctx.buffer(reserve=nbytes)
            self.capacity[name] = nbytes
            self.generation += 1
            if name == "b_err":
                self.err_dirty = True
        return self.buffers[name]

    def release(self, ctx=None) -> None:
        for buf in self.buffers.values():
            buf.release()
        self.buffers.clear()
        self.capacity.clear()
        if self.program is not None:
            self.program.release()
            self.program = None
        for special in self.specials.values():
            if special is not None:
                special.release()
        self.specials.clear()

    def nbytes(self) -> int:
        return sum(self.capacity.values())

    @property
    def base(self) -> "GpuKernel":
        return self


class FieldView:
    """A kernel as seen by a field whose text differs only in positions (comments,
    spacing) from the one that built it: everything is the kernel's, except the
    run-time error table (``meta["errors"]``), which names the field's own lines."""

    def __init__(self, kernel: GpuKernel, errors):
        object.__setattr__(self, "base", kernel)
        object.__setattr__(self, "meta", {**kernel.meta, "errors": errors})

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.base, name, value)


# Guards the hand-over between a run that holds a kernel and an eviction of it: the
# eviction frees the kernel at once when no run holds it, else marks it retired, and the
# run frees it as it lets go. So an eviction never waits for a run (a progress callback
# that evicts the kernel of its own run, on the run's thread, would wait for ever).
_RETIRE = threading.Lock()


@contextlib.contextmanager
def holding(kernel):
    """Hold ``kernel`` (a GpuKernel or a FieldView) for one run."""
    base = kernel.base
    base.lock.acquire()
    try:
        yield base
    finally:
        let_go(base)


def let_go(base: GpuKernel) -> None:
    """End a run on ``base`` (whose lock the caller holds): free it first if it was
    retired meanwhile. The GL work happens outside _RETIRE, under the kernel's own lock."""
    with _RETIRE:
        if not base.retired:
            base.lock.release()
            return
    try:
        _free(base)
    finally:
        base.lock.release()


def release(kernel: GpuKernel) -> None:
    """The release hook of the backend's KernelCache (lookup.MEMORY): free a dropped
    kernel now, or mark it retired when a run holds it (that run frees it)."""
    with _RETIRE:
        if not kernel.lock.acquire(blocking=False):
            kernel.retired = True       # the run holding it frees it when it ends
            return
    try:
        _free(kernel)
    finally:
        kernel.lock.release()


def _free(kernel: GpuKernel) -> None:
    try:
        gl.call(kernel.release)
    except gl.NoContext:
        pass


def _after_fork_in_child() -> None:
    """A forked child cannot wait on locks that a parent thread held at the fork (the
    kernels themselves are forgotten by runtime/kernel_cache.py, unreleased)."""
    global _RETIRE
    _RETIRE = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
