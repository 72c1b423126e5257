"""Which calls get their ``save_every`` history from the shader (describe(history=True)):
fixed-step methods without ``collapse`` or events (a collapsed basin repeats its final state in
the history, which its stopped step loop does not write: those keep a dispatch per
saved step)."""
from __future__ import annotations


def fits(bound) -> bool:
    """``bound``: a call's Bound (or its Prepared's template)."""
    return (bool(bound.save_every) and bound.field.collapse is None
            and not bound.field.events and bound.adaptive is None and bound.save_at is None)
