"""The cpu backend's noise in a lane loop: the generator (Philox4x32-10 and Box-Muller,
templates/helpers.c.j2) vectorises across the lanes in both dtypes: log and cos are
libmvec's SIMD variants (elsewhere inline arithmetic), never one libm call per lane, and
where the target multiplies 64-bit lanes (AVX-512DQ) the Philox rounds keep their words in 64-bit lanes (with 32-bit
words gcc widened every 32x32->64 product into 64-bit lanes and packed the halves back:
four shuffles a product, about 80 a normal, and the generator ran at half the speed). The normals themselves are pinned bit for bit
in tests/conformance/test_noise_run.py."""
from __future__ import annotations

import platform
import re
import subprocess

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.cpu import kernel, toolchain
from vgpu_compiler.frontend.compile import compile_program
from test_noise_run import WORDS_C  # (the words of vg_philox_word, 4 a counter)

X86 = platform.machine() == "x86_64"
MVEC = X86 and platform.libc_ver()[0] == "glibc"

OU = """field ou {
    param theta = 1.5
    param sigma = 0.4
    noise xi
    state x
    dx/dt = -theta * x + sigma * xi
    solve euler(dt = 0.001, steps = 10)
}"""
PLAIN = OU.replace("noise xi\n", "").replace(" + sigma * xi", " + sigma")
# x86 instructions that move values between lanes or between lane widths
SHUFFLE = re.compile(r"^\s+(vpmovzx\w+|vpmovsx\w+|vpmov[qd][dwb]\w*|vperm\w+|vpshuf\w+|"
                     r"vpunpck\w+|vextract\w+|vinsert\w+|vpack\w+|vshuf\w+)\s", re.M)


def _defines(macro: str) -> bool:
    """Whether the kernels' compiler and flags (-march=native) define ``macro``."""
    cc = toolchain.compiler()
    out = subprocess.run([cc, "-march=native", "-dM", "-E", "-x", "c", "-"], input="",
                         capture_output=True, text=True)
    return f"#define {macro} " in out.stdout


def _asm(src: str, dtype: str, tmp_path, extra=()) -> str:
    field = compile_program(src, "f.field").select(None)
    c = tmp_path / f"k{len(src)}{dtype}.c"
    c.write_text(kernel.source(field, dtype)[0])
    flags = [f for f in toolchain.flags(toolchain.compiler()) if f != "-shared"] + list(extra)
    return subprocess.run([toolchain.compiler(), *flags, "-S", "-o", "-", str(c)],
                          capture_output=True, text=True, check=True).stdout


def _calls(asm: str) -> list[str]:
    return re.findall(r"(?:call|jmp)\s+(\S+?)(?:@PLT)?\n", asm)


@pytest.mark.skipif(not MVEC, reason="libmvec's SIMD functions are glibc's, on x86-64")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_noise_calls_the_simd_log_and_cos(dtype, cpu, tmp_path):
    calls = _calls(_asm(OU, dtype, tmp_path))
    assert any(f.startswith("_ZGV") and f.endswith("_logf") for f in calls), calls
    assert any(f.startswith("_ZGV") and f.endswith("_cosf") for f in calls), calls
    assert not [f for f in calls if f in ("logf", "cosf", "sqrtf", "log", "cos")], calls


@pytest.mark.skipif(not X86, reason="counts x86 shuffle instructions")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_philox_rounds_repack_no_lanes(dtype, cpu, tmp_path):
    """The noise adds fewer shuffles to the kernel than Philox has rounds (10): no round
    widens its products or packs their halves back (before: 78 and 79 more)."""
    if not _defines("__AVX512DQ__"):
        pytest.skip("this CPU has no 64-bit lane multiply (AVX-512DQ): the rounds keep "
                    "32-bit words, whose products gcc widens")
    noisy = len(SHUFFLE.findall(_asm(OU, dtype, tmp_path)))
    plain = len(SHUFFLE.findall(_asm(PLAIN, dtype, tmp_path)))
    assert noisy - plain < 10, (noisy, plain)


def test_without_libmvec_the_noise_calls_no_function(cpu, tmp_path):
    """... and without libmvec none: log and cos are inline (vg_log32, vg_cos32)."""
    for dtype in ("float32", "float64"):
        calls = _calls(_asm(OU, dtype, tmp_path, extra=[toolchain.NO_LIBMVEC]))
        assert not [f for f in calls if f.startswith("_ZGV") or "log" in f or "cos" in f], calls


def _helpers() -> str:
    """helpers.c.j2 with the generator (codegen/build/noise.py, vg_philox_word included)."""
    from vgpu_compiler.codegen.build import helpers, noise
    from vgpu_compiler.codegen.targets import TARGETS
    return kernel._environment().get_template("helpers.c.j2").render(
        F="float", noise=True, cuda=None,
        k={"helpers": (), "noise_text": noise.printed("c", tests=True),
           "built": helpers.printed(TARGETS["c"]["float32"])})


def _generator(words32: bool):
    """helpers.c.j2's generator as a library: words(c, k, n) and normals(z, i, n, step, k0, k1)
    (a lane loop over n counters (i[l], step, 0, 0)); with ``words32`` its 32-bit words."""
    import ctypes
    helpers = _helpers()
    source = (("#define VG_PHILOX32\n" if words32 else "") +
              "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n" + helpers + WORDS_C +
              "void normals(float *z, const unsigned *g, int n, unsigned step, unsigned k0,\n"
              "             unsigned k1) {\n"
              "#pragma omp simd\n"
              "    for (int l = 0; l < n; l++) z[l] = vg_normal(g[l], step, 0u, 0u, k0, k1);\n}\n")
    lib = toolchain.build(source, "noise-simd-test")
    for f in (lib.words, lib.normals):
        f.restype = None
    lib.normals.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint,
                            ctypes.c_uint, ctypes.c_uint]
    return lib


@pytest.mark.parametrize("words32", [False, True], ids=["native", "32-bit words"])
def test_both_word_widths_give_vgpu_philox_bit_for_bit(words32, cpu, tmp_path, monkeypatch):
    """Both forms of the rounds (64-bit lanes where AVX-512DQ is, 32-bit words elsewhere)
    give vgpu.philox's words, and normals equal in every bit to each other's and within the
    rounding of log and cos (docs/language.md) of numpy's float32 transform of them."""
    import ctypes
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    lib = _generator(words32)
    rng = np.random.default_rng(3)
    n = 256
    ctr = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    ctr[0], keys[0] = 0, 0
    ctr[1], keys[1] = 0xFFFFFFFF, 0xFFFFFFFF
    got = ctr.copy()
    lib.words(ctypes.c_void_p(got.ctypes.data), ctypes.c_void_p(keys.ctypes.data), n)
    np.testing.assert_array_equal(got, np.stack([vgpu.philox(ctr[i], keys[i]) for i in range(n)]))

    n = 4096
    lanes = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
    key, step = (0x9E3779B9, 0x7F4A7C15), 12345
    z = np.empty(n, np.float32)
    lib.normals(ctypes.c_void_p(z.ctypes.data), ctypes.c_void_p(lanes.ctypes.data), n, step,
                *key)
    c = np.zeros((n, 4), np.uint32)
    c[:, 0], c[:, 1] = lanes, step
    w = vgpu.philox(c, np.array(key, np.uint32))
    u1 = ((w[:, 0] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)
    u2 = ((w[:, 1] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)
    want = np.sqrt(np.float32(-2) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)
    np.testing.assert_allclose(z, want, rtol=2e-6, atol=1.5e-4)
    other = np.empty(n, np.float32)
    _generator(not words32).normals(ctypes.c_void_p(other.ctypes.data),
                                    ctypes.c_void_p(lanes.ctypes.data), n, step, *key)
    np.testing.assert_array_equal(z, other)


Z2 = """field z {
    noise xi, eta
    grid i < N
    state x = 0, y = 0
    dx/dt = xi
    dy/dt = 2 * eta
    solve euler(dt = 1, steps = 3)
}"""


def test_a_steps_normals_are_drawn_before_its_lane_loop():
    """A fixed-step kernel draws a step's normals of all its lanes first (vg_normals: the
    Philox words of every lane, then their Box-Muller), one call per noise used; the lane
    loop reads them (before: each lane's draw inside the lane loop, a Philox chain and then
    libmvec's log waiting on it, lane after lane)."""
    field = compile_program(Z2, "z.field").select(None)
    text = kernel.source(field, "float32")[0]
    step = text[text.index("--- the step loop"):text.index("--- store ---")]
    assert step.count("vg_normals(") == 2 and "vg_normal(" not in step
    assert step.index("vg_normals(") < step.index("#pragma omp simd")


def test_the_drawn_first_normals_are_the_lane_loops_bit_for_bit(cpu):
    """The kernel's normals are those of vg_normal called lane by lane in one vectorised
    loop (the generator before its phases were split), bit for bit: the same Philox words
    and the same libmvec calls."""
    import ctypes
    from vgpu_compiler.noise.normal import key_of
    helpers = _helpers()
    source = ("#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#define VG_W 64\n" + helpers +
              "void lanes(float *z, const unsigned *tr, int n, unsigned s, unsigned k,\n"
              "           unsigned k0, unsigned k1) {\n"
              "    for (int b = 0; b < n; b += VG_W) {\n"
              "#pragma omp simd\n"
              "        for (int l = 0; l < VG_W; l++)\n"
              "            z[b + l] = vg_normal(tr[b + l], s, k, 0u, k0, k1);\n    }\n}\n")
    lib = toolchain.build(source, "normal-lanes-test")
    n, seed = 1024, 11
    key = key_of(seed)
    sol = vgpu.solve(Z2.replace("steps = 3", "steps = 1"), dims={"N": n}, backend="cpu",
                     seed=seed)
    for k, col, scale in ((0, 0, 1), (1, 1, 2)):
        want = np.zeros(n, np.float32)
        traj = np.arange(n, dtype=np.uint32)
        lib.lanes(ctypes.c_void_p(want.ctypes.data), ctypes.c_void_p(traj.ctypes.data),
                  ctypes.c_int(n), ctypes.c_uint(0), ctypes.c_uint(k),
                  ctypes.c_uint(int(key[0])), ctypes.c_uint(int(key[1])))
        np.testing.assert_array_equal(sol.states[:, col], np.float32(scale) * want)


@pytest.mark.parametrize("lanes", [64, 32])
def test_the_vector_philox_gives_the_lane_loops_normals_bit_for_bit(lanes, cpu):
    """vg_normals' Philox in vector code (vg_uniforms32: vpmuludq on words never masked,
    with gcc and AVX-512) gives vg_normal's numbers called lane by lane, bit for bit, for
    any counter and key (all-ones words included), at 64 lanes (float32 kernels) and 32
    (float64); where the CPU has AVX-512 the vector path is the one compiled."""
    import ctypes
    helpers = _helpers()
    source = ("#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#define VG_W %d\n" % lanes + helpers +
              "#ifdef VG_PHILOX_X16\nint vector_path = 1;\n#else\nint vector_path = 0;\n#endif\n"
              "void blocks(float *z, const unsigned *tr, int n, unsigned s, unsigned k,\n"
              "            unsigned k0, unsigned k1) {\n"
              "    for (int b = 0; b < n; b += VG_W) vg_normals(z + b, tr + b, s, k, k0, k1);\n}\n"
              "void lanes(float *z, const unsigned *tr, int n, unsigned s, unsigned k,\n"
              "           unsigned k0, unsigned k1) {\n"
              "#pragma omp simd\n"
              "    for (int l = 0; l < n; l++) z[l] = vg_normal(tr[l], s, k, 0u, k0, k1);\n}\n")
    lib = toolchain.build(source, "normal-blocks-test")
    if X86 and _defines("__AVX512F__") and not _defines("__clang__"):
        assert ctypes.c_int.in_dll(lib, "vector_path").value == 1
    rng = np.random.default_rng(5)
    n = 64 * 40
    traj = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    traj[:3] = 0, 0xFFFFFFFF, 1
    for s, k, k0, k1 in ((0, 0, 0, 0), (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
                         (12345, 2, 0x9E3779B9, 0x7F4A7C15),
                         *(tuple(int(v) for v in rng.integers(0, 2**32, 4)) for _ in range(3))):
        got, want = np.zeros(n, np.float32), np.ones(n, np.float32)
        for f, out in ((lib.blocks, got), (lib.lanes, want)):
            f(ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(traj.ctypes.data),
              ctypes.c_int(n), *(ctypes.c_uint(v) for v in (s, k, k0, k1)))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_normals_log_and_cos_on_their_arguments(cpu):
    """vg_log32 and vg_cos32 (without libmvec: the inline code) on the arguments Box-Muller
    gives them: log of u1 = (j + 0.5) 2^-23 and cos of 2 pi u2 (rounded to float32, as
    every backend computes it), every eighth j of the 2^23 and both ends, within 0.9 ulp
    of the exact value (long double; measured on every third: log 0.83, cos 0.51)."""
    import ctypes
    from vgpu_compiler.noise.normal import SCALE, TWO_PI
    lib = toolchain.build(
        "#define VG_NO_LIBMVEC\n#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n"
        + _helpers() + "void lc(float *y, const float *x, int n, int c) {\n"
        "    for (int i = 0; i < n; i++) y[i] = c ? vg_cos32(x[i]) : vg_log32(x[i]);\n}\n",
        "noise-log-cos-test")
    lib.lc.restype = None
    j = np.concatenate([np.arange(0, 1 << 23, 8), [1, (1 << 23) - 1]])
    u = (j.astype(np.float32) + np.float32(0.5)) * SCALE
    L = np.longdouble
    for c, x, exact in ((0, u, lambda v: np.log(v)), (1, TWO_PI * u, lambda v: np.cos(v))):
        got = np.empty_like(x)
        lib.lc(ctypes.c_void_p(got.ctypes.data), ctypes.c_void_p(x.ctypes.data), len(x), c)
        want = exact(x.astype(L))
        ulp = np.spacing(np.abs(want.astype(np.float32))).astype(L)
        err = float(np.max(np.abs(got.astype(L) - want) / ulp))
        assert err <= 0.9, (c, err)
