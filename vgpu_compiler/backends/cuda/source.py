"""The CUDA text of a field: the cpu backend's C kernel (cpu/kernel.py, templates/*.c.j2)
rendered with ``cuda`` in its context, so the algorithms exist once. NVRTC compiles it
as CUDA C++ with ``-default-device`` (every unannotated function and variable is
``__device__``): the prologue stands in for <math.h>, <stdbool.h> and <stdint.h> (CUDA's
device math is built in), C's spellings C++ lacks are macros, and one ``__global__``
entry takes the place of the OpenMP entry points: CUDA thread ``b`` runs the C kernel's
block ``b`` (one trajectory, or one basin's lanes). The templates leave out OpenMP's
pragmas and libmvec's declarations for this dialect; the rest of the text is the C's.
"""
from __future__ import annotations

from ..cpu import kernel as _c

VERSION = "cuda-1"
THREADS = 128               # threads per CUDA block (each runs one block of the C kernel)

PROLOGUE = """\
// CUDA C++ for NVRTC with -default-device: the C kernel below, unchanged but for this
// prologue and the __global__ entry at the end (CUDA's device math is built in).
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define restrict __restrict__
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)
#define __builtin_constant_p(x) 0       // (vg_powi's general loop: the same numbers)"""

ENTRY = """\
// Every block of this call: CUDA thread b runs the C kernel's block b.
extern "C" __global__ void vg_kernel(const double *vg_fu, const int *vg_iu, void **vg_buf,
                                     int vg_nblocks) {
    const int b = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    vg_err = (unsigned *)vg_buf[1];
    if (b < vg_nblocks) {
        vg_block(vg_fu, vg_iu, vg_buf, b);
    }
}"""

CONTEXT = {"prologue": PROLOGUE, "entry": ENTRY}


def source(field, dtype: str, per_trajectory=(), dense: bool = False,
           history: bool = False) -> tuple[str, dict, int, int]:
    """(CUDA text, meta, lanes per thread, int uniforms): cpu/kernel.source's, as CUDA."""
    text, meta, lanes, n_int = _c.source(field, dtype, per_trajectory, dense, history,
                                         cuda=CONTEXT)
    text = text.replace(f"({_c.VERSION}, C backend)", f"({VERSION}, CUDA backend)")
    meta["version"] = VERSION
    return text, meta, lanes, n_int
