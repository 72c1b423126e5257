"""The standard normal variates of stochastic fields, from Philox4x32-10 words.

Every backend computes exactly this (docs/language.md, Noise): for trajectory
``i`` (its flat row-major index in the grid), step ``n`` and noise ``k`` (its
position in declaration order), under the key ``(seed mod 2^32, seed div 2^32)``,

    w0, w1, w2, w3 = philox4x32_10(counter = (i, n, k, 0), key)
    u1 = (float32(w0 >> 9) + 0.5) * 2^-23          # in (0, 1): log(u1) is finite
    u2 = (float32(w1 >> 9) + 0.5) * 2^-23
    Z  = sqrt(-2 * log(u1)) * cos(float32(2 pi) * u2)

all in float32 (GLSL has no double ``cos``), then converted to the
working dtype. The Box–Muller transform (Box and Muller, 1958) keeps one of
its two variates: one normal per counter, so a noise's draw at a step needs
no other draw.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentTypeError
from .philox import philox_words

SEED_LIMIT = 1 << 64
TWO_PI = np.float32(2.0 * np.pi)          # 6.2831855 in float32
HALF = np.float32(0.5)
SCALE = np.float32(2.0 ** -23)
MINUS_TWO = np.float32(-2.0)


def key_of(seed) -> tuple[int, int]:
    """The Philox key of a seed: ``(seed mod 2^32, seed div 2^32)``; a seed is an int in
    [0, 2^64) (bools and floats refused: a float seed would round)."""
    ok = isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_))
    if not ok or not 0 <= int(seed) < SEED_LIMIT:
        raise ArgumentTypeError(f"seed must be an int in [0, 2^64), got {seed!r}")
    seed = int(seed)
    return seed & 0xFFFFFFFF, seed >> 32


def uniforms(words: np.ndarray) -> np.ndarray:
    """float32 ``(float(w >> 9) + 0.5) * 2^-23`` of uint32 words: in (0, 1), exactly."""
    return (np.right_shift(words, np.uint32(9)).astype(np.float32) + HALF) * SCALE


def normals(index: np.ndarray, step: int, noise: int, key: tuple[int, int]) -> np.ndarray:
    """float32 Z of every trajectory ``index`` (uint32 array) at one step for one noise."""
    ctr = np.zeros(index.shape + (4,), np.uint32)
    ctr[..., 0] = index
    ctr[..., 1] = np.uint32(step & 0xFFFFFFFF)
    ctr[..., 2] = np.uint32(noise)
    w = philox_words(ctr, *key)
    return box_muller(w[..., 0], w[..., 1])


def box_muller(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    u1, u2 = uniforms(w0), uniforms(w1)
    with np.errstate(all="ignore"):
        return np.sqrt(MINUS_TWO * np.log(u1)) * np.cos(TWO_PI * u2)
