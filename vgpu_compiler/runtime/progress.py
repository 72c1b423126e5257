"""``progress(done, total)`` between dispatches, and re-entry from inside it.

A progress callback runs on the caller's thread between two dispatches of a run, with
no lock held, so it may call run_field again, also with the same kernel. ``Nesting``
remembers, per thread, which kernels this thread is inside a progress callback of; a
backend asks it before it reuses a kernel (a call made inside a callback of a run of
that kernel gets a private copy, and skips the one-dispatch fast path). Each backend
keeps its own ``Nesting`` (a glsl callback says nothing about wgpu's kernels).
"""
from __future__ import annotations

import threading


class Nesting(threading.local):
    """The kernels whose run's progress callback this thread is in (innermost last)."""

    kernels: tuple = ()

    def report(self, kernel, progress, done: int, total: int) -> None:
        """Call ``progress(done, total)`` with ``kernel`` marked as in a callback."""
        outer = self.kernels
        self.kernels = outer + (kernel,)
        try:
            progress(done, total)
        finally:
            self.kernels = outer

    def inside(self, kernel) -> bool:
        """Is this thread inside a progress callback of a run of ``kernel``?"""
        return any(k is kernel for k in self.kernels)
