"""vgpu.philox: Philox4x32-10 against Random123's published known-answer vectors."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu

# Random123 kat_vectors: "philox4x32 10 CTR[4] KEY[2] EXPECTED[4]"
KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr, key, want", KAT)
def test_known_answers(ctr, key, want):
    out = vgpu.philox(np.array(ctr, np.uint32), key)
    assert out.dtype == np.uint32
    assert tuple(int(w) for w in out) == want


def test_batched_equals_one_by_one():
    rng = np.random.default_rng(3)
    ctr = rng.integers(0, 2**32, size=(5, 7, 4), dtype=np.uint64).astype(np.uint32)
    out = vgpu.philox(ctr, (12345, 678))
    assert out.shape == (5, 7, 4)
    for idx in np.ndindex(5, 7):
        assert np.array_equal(out[idx], vgpu.philox(ctr[idx], (12345, 678)))


def test_counter_and_key_change_every_word():
    base = vgpu.philox(np.zeros(4, np.uint32), (0, 0))
    for j in range(4):
        ctr = np.zeros(4, np.uint32)
        ctr[j] = 1
        assert np.all(vgpu.philox(ctr, (0, 0)) != base)
    assert np.all(vgpu.philox(np.zeros(4, np.uint32), (1, 0)) != base)


@pytest.mark.parametrize("ctr, key", [
    (np.zeros(3, np.uint32), (0, 0)),          # not 4 words
    (np.zeros(4), (0, 0)),                      # floats
    (np.array([0, 0, 0, -1]), (0, 0)),          # negative
    (np.array([0, 0, 0, 2**32]), (0, 0)),       # too large
    (np.zeros(4, np.uint32), (0,)),             # key of one word
    (np.zeros(4, np.uint32), (0, 2**32)),       # key word too large
    (np.zeros(4, np.uint32), "ab"),
])
def test_bad_arguments_are_vgpu_errors(ctr, key):
    with pytest.raises(vgpu.VgpuError):
        vgpu.philox(ctr, key)
