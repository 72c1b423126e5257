"""Ctrl-C between pieces of work, not inside one: ``with held(): ...``.

A SIGINT that lands while a ``held`` block runs on the main thread is held back until
the block ends, then delivered as the handler in force would deliver it (Python's
default raises KeyboardInterrupt there); a second one raises at once (a user who
insists is not kept waiting). So what a block does (a dispatch and the count of the
steps it ran, a GL job and the locks around it) is done whole or not at all. On any
other thread, where no signal lands, the block just runs. Blocks nest: an inner one
hands its held signal to the outer one's handler.
"""
from __future__ import annotations

import signal
import threading

import _signal      # signal.signal without the enum conversions (about 4 us a call)

_MAIN = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
_get_ident = threading.get_ident
_OFF = object()         # no handler of ours installed


class held:
    __slots__ = ("before", "frames")

    def __enter__(self) -> "held":
        self.before = _OFF
        if _get_ident() != _MAIN:
            return self
        if _signal.getsignal(_SIGINT) is None:  # a handler not set from Python: left alone
            return self
        self.frames = []
        try:
            self.before = _signal.signal(_SIGINT, self._hold)
        except ValueError:                  # not the main interpreter's main thread
            pass
        return self

    def _hold(self, signum, frame) -> None:
        if self.frames:
            raise KeyboardInterrupt
        self.frames.append(frame)

    def __exit__(self, *exc) -> bool:
        before = self.before
        if before is _OFF:
            return False
        _signal.signal(_SIGINT, before)
        if self.frames:
            if callable(before):
                before(signal.SIGINT, self.frames[0])
            elif before == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
        return False
