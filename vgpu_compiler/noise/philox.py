"""Philox4x32-10, the counter-based generator of stochastic fields, in numpy.

Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3"
(SC'11), and Random123's reference implementation (philox.h): a 128-bit counter
and a 64-bit key give 128 random bits, with no state to carry between draws.
A trajectory's draws therefore depend only on the key (the seed) and the
counter (its index, the step, the noise), never on how an ensemble is split.

One round maps the counter (c0, c1, c2, c3) with key (k0, k1) to
    (hi(M1 * c2) ^ c1 ^ k0,  lo(M1 * c2),  hi(M0 * c0) ^ c3 ^ k1,  lo(M0 * c0))
and the key is bumped by the Weyl constants (W0, W1) before every round but
the first. This is the reference every other backend's generator is tested
against, word for word; tests/conformance/test_philox.py checks it against Random123's
published known-answer vectors.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentTypeError

ROUNDS = 10
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)     # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85                           # key schedule (Weyl) increments
MASK = np.uint64(0xFFFFFFFF)
SHIFT = np.uint64(32)


def philox(counters, key) -> np.ndarray:
    """Philox4x32-10 of ``counters`` (a ``(..., 4)`` array of uint32 words) under ``key``
    (two uint32 words); returns the ``(..., 4)`` uint32 outputs."""
    ctr = _words("counters", counters)
    if ctr.ndim == 0 or ctr.shape[-1] != 4:
        raise ArgumentTypeError(f"counters must have shape (..., 4), got {ctr.shape}")
    k = _words("key", key)
    if k.shape != (2,):
        raise ArgumentTypeError(f"key must be two uint32 words, got shape {k.shape}")
    return philox_words(ctr, int(k[0]), int(k[1]))


def philox_words(ctr: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """The generator on already checked uint32 words (no argument checks)."""
    c = [ctr[..., j].astype(np.uint64) for j in range(4)]
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
        p0, p1 = M0 * c[0], M1 * c[2]             # exact in uint64
        c = [(p1 >> SHIFT) ^ c[1] ^ np.uint64(k0), p1 & MASK,
             (p0 >> SHIFT) ^ c[3] ^ np.uint64(k1), p0 & MASK]
    return np.stack(c, axis=-1).astype(np.uint32)


def _words(what: str, value) -> np.ndarray:
    """``value`` as uint32 words, refusing anything that is not an int in [0, 2^32)."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(f"{what} must be uint32 words ({e})") from None
    if a.dtype == object:
        try:
            a = np.asarray(value, dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            raise ArgumentTypeError(f"{what} must be ints in [0, 2^32)") from None
    if a.dtype.kind not in "iu":
        raise ArgumentTypeError(f"{what} must be ints in [0, 2^32), got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise ArgumentTypeError(f"{what} must be ints in [0, 2^32)")
    return a.astype(np.uint32)
