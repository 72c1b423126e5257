"""Which calls get their ``save_every`` history from the shader (describe(history=True)):
fixed-step methods without ``collapse``, events or an observer ``first`` (which runs
the events' kernel) (a collapsed basin repeats its final state in
the history, which its stopped step loop does not write: those keep a dispatch per
saved step).

Such a call runs the field's kernel built with ``history=True`` (shader/lower.py: the
step loop stores every saved step's state into ``b_hist`` inside the dispatch), cached
beside the plain kernel under its own slot and key (the plain one's plus ``-h``), on
each shader backend's full path (glsl/ and wgpu/runner.run: no fast path) through
runtime/fixed.py's driver: a dispatch ends where ``b_hist`` is full, and its saved
steps are read back with it."""
from __future__ import annotations

from ...ir.observers import located


def fits(bound) -> bool:
    """``bound``: a call's Bound (or its Prepared's template)."""
    return (bool(bound.save_every) and bound.field.collapse is None
            and not located(bound.field) and bound.adaptive is None and bound.save_at is None)
