"""Results the tests compute once per session: a numpy reference (or scipy's answer)
that several tests or backend params compare with is made by the first of them and
read by the others (the results are only read, never changed)."""
from __future__ import annotations

import numpy as np

_RESULTS = {}


def key(value):
    """A hashable image of a call's argument (arrays by dtype, shape and bytes)."""
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(key(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return value


def once(fn, *args, **kw):
    """fn(*args, **kw), computed the first time these arguments come."""
    k = (fn.__module__, fn.__qualname__, key(args), key(kw))
    if k not in _RESULTS:
        _RESULTS[k] = _frozen(fn(*args, **kw))
    return _RESULTS[k]


def _frozen(value, depth: int = 0):
    """``value`` with every array in it read-only (a test that would change a shared
    result fails there, instead of changing the next test's reference)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            _frozen(v, depth + 1)
    elif depth < 3 and isinstance(value, (list, tuple)):
        for v in value:
            _frozen(v, depth + 1)
    elif depth < 3 and hasattr(value, "__dict__"):
        for v in vars(value).values():
            _frozen(v, depth + 1)
    return value
