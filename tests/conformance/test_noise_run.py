"""Stochastic fields on both backends: the generator's words and normals exactly as the
language defines them, reproducibility (ensemble size, dispatches, chunks, basins),
seeds, and the two backends against each other. Statistics: test_noise_statistics.py."""
from __future__ import annotations

import re

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.noise.normal import box_muller

# |Z_glsl - Z_numpy| on llvmpipe: 65% of draws bit-identical, 99th percentile 2.4e-7,
# at most 8.6e-5 over 2,000,000 draws (where Z is near 0: the driver's cos near its
# zero crossing); a margin above that
ZTOL = 1.5e-4


@pytest.fixture(params=["numpy", "glsl", "wgpu", "cpu"])
def backend(request):
    """Each backend; the compiled ones need their fixtures (conftest)."""
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


Z_FIELD = """field z {
  noise xi, eta
  grid i < N, j < M
  state x = 0, y = 0
  dx/dt = xi
  dy/dt = eta
  solve euler(dt = 1, steps = 1)
}"""

OU = """field ou {
  param theta = 1.0
  param sigma = 0.3
  noise xi
  state x
  dx/dt = -theta * x + sigma * xi
  solve euler(dt = 0.01, steps = 50)
}"""


def z_ref(flat, step, k, seed):
    """Z of the language's definition, straight from vgpu.philox (float32)."""
    ctr = np.zeros(np.shape(flat) + (4,), np.uint32)
    ctr[..., 0], ctr[..., 1], ctr[..., 2] = flat, step, k
    w = vgpu.philox(ctr, (seed % 2**32, seed >> 32))
    u1 = (np.float32(1) * (w[..., 0] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)
    u2 = ((w[..., 1] >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)
    return np.sqrt(np.float32(-2) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)


def test_reference_transform_is_the_documented_one():
    w0 = np.array([0, 1 << 9, 0xFFFFFFFF], np.uint32)
    w1 = np.array([0, 0x80000000, 0xFFFFFFFF], np.uint32)
    z = box_muller(w0, w1)
    assert z.dtype == np.float32
    u1 = (np.array([0, 1, (1 << 23) - 1], np.float64) + 0.5) * 2.0**-23
    u2 = (np.array([0, 1 << 22, (1 << 23) - 1], np.float64) + 0.5) * 2.0**-23
    np.testing.assert_allclose(z, np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2), rtol=1e-6)
    assert np.isfinite(z).all()            # u1 > 0: never log(0)


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7, 2**64 - 1])
def test_dx_equals_xi_gives_z_itself(backend, seed):
    """dt = 1, one step: x is Z of counter (flat index, 0, 0, 0), y of (flat, 0, 1, 0)."""
    sol = vgpu.run_field(Z_FIELD, dims={"N": 5, "M": 77}, steps=1, backend=backend, seed=seed)
    flat = np.arange(5 * 77).reshape(5, 77)
    want_x, want_y = z_ref(flat, 0, 0, seed), z_ref(flat, 0, 1, seed)
    if backend == "numpy":          # the oracle: bit for bit
        np.testing.assert_array_equal(sol[..., 0], want_x)
        np.testing.assert_array_equal(sol[..., 1], want_y)
    else:                           # log/cos/sqrt of the driver (ZTOL above)
        np.testing.assert_allclose(sol[..., 0], want_x, rtol=2e-6, atol=ZTOL)
        np.testing.assert_allclose(sol[..., 1], want_y, rtol=2e-6, atol=ZTOL)


FOUR = """field four {
  noise a, b, c, d
  grid i < N
  state x = 0, y = 0, z = 0, w = 0
  dx/dt = a
  dy/dt = b
  dz/dt = c
  dw/dt = d
  solve euler(dt = 1, steps = 1)
}"""


def test_every_noise_takes_its_index_as_counter_word_2(backend):
    """Noises 2 and 3 too: the counter's word 2 is a constant in the kernel, and Mesa's
    llvmpipe folds umulExtended of constants wrong (its high word 0), which only a
    product of 2^32 or more shows: the third noise on."""
    sol = vgpu.run_field(FOUR, dims={"N": 200}, steps=1, backend=backend, seed=77)
    flat = np.arange(200)
    for k in range(4):
        want = z_ref(flat, 0, k, 77)
        if backend == "numpy":
            np.testing.assert_array_equal(sol[:, k], want)
        else:
            np.testing.assert_allclose(sol[:, k], want, rtol=2e-6, atol=ZTOL)


def test_steps_use_the_global_step_number(backend):
    """Three steps: x = Z(n=0) + Z(n=1) + Z(n=2), in that order, in float32."""
    x = vgpu.run_field(Z_FIELD, dims={"N": 2, "M": 50}, steps=3, backend=backend, seed=9)[..., 0]
    flat = np.arange(100).reshape(2, 50)
    want = np.zeros((2, 50), np.float32)
    for n in range(3):
        want = want + z_ref(flat, n, 0, 9)
    tol = 0 if backend == "numpy" else 1e-4
    np.testing.assert_allclose(x, want, rtol=tol, atol=tol)


def test_float64_converts_the_float32_normal():
    x = vgpu.run_field(Z_FIELD, dims={"N": 3, "M": 4}, steps=1, backend="numpy", dtype="float64")
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x[..., 0], z_ref(np.arange(12).reshape(3, 4), 0, 0, 0)
                                  .astype(np.float64))


def test_basins_keep_the_flat_grid_index(backend):
    """A basin lays lanes out in blocks; the counter still takes the row-major grid index."""
    src = Z_FIELD.replace("grid i < N, j < M", "grid i < N, j < M\n  basin a < 2, b < 8")
    x = vgpu.run_field(src, dims={"N": 5, "M": 21}, steps=1, backend=backend, seed=4)[..., 0]
    want = z_ref(np.arange(5 * 21).reshape(5, 21), 0, 0, 4)
    tol = 0 if backend == "numpy" else ZTOL
    np.testing.assert_allclose(x, want, rtol=tol, atol=tol)


def test_first_trajectories_do_not_depend_on_ensemble_size(backend):
    h_small = np.linspace(-1, 1, 1000, dtype=np.float32)
    h_big = np.concatenate([h_small, np.ones(199_000, np.float32)])
    small = vgpu.run_field(OU, h_small, backend=backend, seed=77)
    big = vgpu.run_field(OU, h_big, backend=backend, seed=77)
    np.testing.assert_array_equal(small, big[:1000])          # bit for bit


@pytest.mark.usefixtures("glsl")
def test_glsl_same_in_one_dispatch_or_many_and_in_chunks():
    h0 = np.linspace(-1, 1, 3000, dtype=np.float32)
    one = vgpu.run_field(OU, h0, backend="glsl", seed=5)
    with limits(max_steps=7):
        many = vgpu.run_field(OU, h0, backend="glsl", seed=5)
    with limits(max_block=4096, max_steps=11):              # several chunks too
        chunks = vgpu.run_field(OU, h0, backend="glsl", seed=5)
    np.testing.assert_array_equal(one, many)
    np.testing.assert_array_equal(one, chunks)
    sol = vgpu.solve(OU, h0, backend="glsl", seed=5, save_every=10)   # a dispatch per save
    np.testing.assert_array_equal(sol.states, one)
    ref = vgpu.solve(OU, h0, backend="numpy", seed=5, save_every=10)
    np.testing.assert_allclose(sol.history, ref.history, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["euler", "milstein"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_numpy_and_glsl_paths_agree(method, dtype, compiled_backend):
    src = """field gbm {
      param mu = 0.05
      param sigma = 0.4
      noise w
      state s, v
      ds/dt = mu * s + sigma * s * w
      dv/dt = -v + 0.1 * t * v
      solve %s(dt = 0.01, steps = 100)
    }""" % method
    h0 = np.stack([np.linspace(0.5, 2, 500), np.ones(500)], axis=-1)
    a = vgpu.solve(src, h0, backend="numpy", seed=11, dtype=dtype, save_every=25)
    b = vgpu.solve(src, h0, backend=compiled_backend, seed=11, dtype=dtype, save_every=25)
    np.testing.assert_allclose(b.history, a.history, rtol=2e-5, atol=1e-6)


def test_seeds(backend):
    h0 = np.zeros(256, np.float32)
    a = vgpu.run_field(OU, h0, backend=backend)                 # default seed 0
    b = vgpu.run_field(OU, h0, backend=backend, seed=0)
    c = vgpu.run_field(OU, h0, backend=backend, seed=1)
    d = vgpu.run_field(OU, h0, backend=backend, seed=2**32)     # the key's second word
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    again = vgpu.run_field(OU, h0, backend=backend, seed=1)     # a uniform: same kernel
    np.testing.assert_array_equal(c, again)


def test_a_new_seed_is_not_a_recompile(compiled_backend):
    h0 = np.zeros(100, np.float32)
    vgpu.run_field(OU, h0, backend=compiled_backend, seed=1)
    before = vgpu.cache_stats()["compiles"]
    for seed in range(2, 6):
        vgpu.run_field(OU, h0, backend=compiled_backend, seed=seed)
    assert vgpu.cache_stats()["compiles"] == before


@pytest.mark.parametrize("seed", [-1, 2**64, 1.0, True, "3", [1]])
def test_bad_seeds_are_call_errors(seed):
    with pytest.raises(vgpu.ArgumentTypeError, match="seed must be an int"):
        vgpu.run_field(OU, np.zeros(3, np.float32), backend="numpy", seed=seed)


def test_numpy_integer_seed():
    a = vgpu.run_field(OU, np.zeros(8, np.float32), backend="numpy", seed=np.uint64(2**63))
    b = vgpu.run_field(OU, np.zeros(8, np.float32), backend="numpy", seed=2**63)
    np.testing.assert_array_equal(a, b)
    none = vgpu.run_field(OU, np.zeros(8, np.float32), backend="numpy", seed=None)
    zero = vgpu.run_field(OU, np.zeros(8, np.float32), backend="numpy", seed=0)
    np.testing.assert_array_equal(none, zero)                  # None means the default 0


@pytest.mark.usefixtures("glsl")
def test_glsl_philox_words_bit_for_bit():
    """The GLSL generator (the kernel's rounds, codegen/build/noise.py, as vg_philox_word)
    against vgpu.philox, word for word."""
    import moderngl
    from vgpu_compiler.backends.glsl import emit_glsl
    from vgpu_compiler.codegen.build import noise
    glsl = emit_glsl(vgpu.compile(OU).program.fields[0])
    helper = noise.printed("glsl", tests=True)
    assert noise.printed("glsl") in glsl           # the kernel's generator, the same text
    shader = ("#version 430\nlayout(local_size_x = 64) in;\n"
              "layout(std430, binding = 0) buffer In { uvec4 c[]; } src;\n"
              "layout(std430, binding = 1) buffer Key { uvec2 k[]; } key;\n"
              "layout(std430, binding = 2) buffer Out { uvec4 w[]; } dst;\n"
              + helper + "void main() {\n  uint i = gl_GlobalInvocationID.x;\n"
              "  uvec4 c = src.c[i];\n  uvec2 k = key.k[i];\n"
              "  dst.w[i] = uvec4(" + ", ".join(
                  f"vg_philox_word(c.x, c.y, c.z, c.w, k.x, k.y, {j})" for j in range(4))
              + ");\n}\n")
    rng = np.random.default_rng(1)
    n = 256
    ctr = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    ctr[0], keys[0] = 0, 0                                  # Random123's first KAT
    ctr[1], keys[1] = 0xFFFFFFFF, 0xFFFFFFFF
    ctx = moderngl.create_standalone_context(require=430, backend="egl")
    try:
        prog = ctx.compute_shader(shader)
        bufs = [ctx.buffer(ctr.tobytes()), ctx.buffer(keys.tobytes()), ctx.buffer(reserve=n * 16)]
        for b, buf in enumerate(bufs):
            buf.bind_to_storage_buffer(b)
        prog.run(n // 64)
        got = np.frombuffer(bufs[2].read(), np.uint32).reshape(n, 4)
    finally:
        ctx.release()
    want = np.stack([vgpu.philox(ctr[i], keys[i]) for i in range(n)])
    np.testing.assert_array_equal(got, want)
    assert tuple(got[0]) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def test_kernel_key_holds_the_noise(compiled_backend):
    """Fields alike but for a noise coefficient or the method get kernels of their own."""
    h0 = np.ones(64, np.float32)
    runs = [vgpu.run_field(OU.replace("sigma * xi", text).replace("euler", method), h0,
                           backend=compiled_backend, seed=1)
            for text, method in (("sigma * xi", "euler"), ("2 * sigma * xi", "euler"),
                                 ("sigma * x * xi", "euler"), ("sigma * x * xi", "milstein"))]
    for a in range(4):
        for b in range(a):
            assert not np.array_equal(runs[a], runs[b]), (a, b)


def test_save_at_is_refused_with_noise_in_one_place():
    from vgpu_compiler.call.noise import refuse_with_noise
    noisy = vgpu.compile(OU).select()
    plain = vgpu.compile(OU.replace(" + sigma * xi", "").replace("noise xi", "")).select()
    with pytest.raises(vgpu.CallError, match="save_at cannot be used with field ou.*`xi`"):
        refuse_with_noise(noisy, "save_at", [0.1, 0.2])
    refuse_with_noise(noisy, "save_at", None)
    refuse_with_noise(plain, "save_at", [0.1])


def test_repeated_short_calls_take_each_seed(compiled_backend):
    """A short one-dispatch call takes the fast path (and a specialised program): the
    seed is still this call's."""
    src = Z_FIELD.replace("steps = 1", "steps = 3")
    runs = {}
    for seed in (1, 2, 1, 2**33 + 1, 2):
        got = vgpu.run_field(src, dims={"N": 4, "M": 40}, backend=compiled_backend, seed=seed)
        ref = vgpu.run_field(src, dims={"N": 4, "M": 40}, backend="numpy", seed=seed)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
        if seed in runs:
            np.testing.assert_array_equal(got, runs[seed])
        runs[seed] = got
    assert not np.array_equal(runs[1], runs[2]) and not np.array_equal(runs[1], runs[2**33 + 1])


@pytest.mark.parametrize("method", ["euler", "milstein"])
def test_noise_with_basin_coupling_and_collapse(backend, method):
    """Noise beside a basin's coupled mean and a collapse vote: the backends agree, and the
    collapse (on the step count) stops every basin after the same step."""
    src = """field f {
      param sigma = 0.2
      noise xi
      grid i < N
      basin l < 16
      state x
      coupled c = x
      dx/dt = mean(c) - x + sigma * x * xi
      collapse when step >= 7
      solve %s(dt = 0.05, steps = 20)
    }""" % method
    h0 = np.linspace(0.5, 1.5, 100, dtype=np.float32)
    sol = vgpu.solve(src, h0, backend=backend, seed=8)
    ref = vgpu.solve(src, h0, backend="numpy", seed=8)
    assert (sol.steps_taken == 7).all()
    np.testing.assert_allclose(sol.states, ref.states, rtol=1e-5, atol=1e-6)
    plain = vgpu.solve(src.replace(" + sigma * x * xi", "").replace("noise xi", ""), h0,
                       backend="numpy")
    assert not np.allclose(sol.states, plain.states, atol=1e-3)   # the noise did something


def test_three_axes_lower_rank_basin_and_row_chunks(backend):
    """A 3-D grid in basins along its last axis, split into chunks of rows on GLSL:
    the counter still takes the row-major index over the whole grid."""
    src = Z_FIELD.replace("grid i < N, j < M", "grid i < N, j < M, q < Q\n  basin l < 8")
    dims = {"N": 40, "M": 5, "Q": 13}
    want = z_ref(np.arange(40 * 5 * 13).reshape(40, 5, 13), 0, 0, 9)
    with limits(max_block=2048, max_steps=1):
        x = vgpu.run_field(src, dims=dims, backend=backend, seed=9)[..., 0]
    tol = 0 if backend == "numpy" else ZTOL
    np.testing.assert_allclose(x, want, rtol=tol, atol=tol)


WORDS_C = ("void words(uint32_t *c, const uint32_t *k, int n) {\n"
           "    for (int i = 0; i < n; i++) {\n"
           "        uint32_t *w = c + 4 * i, a = w[0], b = w[1], d = w[2], e = w[3];\n"
           "        for (int j = 0; j < 4; j++)\n"
           "            w[j] = vg_philox_word(a, b, d, e, k[2 * i], k[2 * i + 1], j);\n"
           "    }\n}\n")


@pytest.mark.usefixtures("cpu")
def test_cpu_philox_words_bit_for_bit():
    """The cpu backend's C generator (codegen/build/noise.py's rounds, as vg_philox_word)
    against vgpu.philox."""
    import ctypes
    from vgpu_compiler.backends.cpu import kernel, toolchain
    from vgpu_compiler.codegen.build import helpers as built_helpers, noise
    from vgpu_compiler.codegen.targets import TARGETS
    helpers = kernel._environment().get_template("helpers.c.j2").render(
        F="float", noise=True, cuda=None,
        k={"helpers": (), "noise_text": noise.printed("c", tests=True),
           "built": built_helpers.printed(TARGETS["c"]["float32"])})
    source = ("#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n" + helpers + WORDS_C)
    lib = toolchain.build(source, "philox-test")
    rng = np.random.default_rng(1)
    n = 256
    ctr = rng.integers(0, 2**32, (n, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    ctr[0], keys[0] = 0, 0                                  # Random123's first KAT
    ctr[1], keys[1] = 0xFFFFFFFF, 0xFFFFFFFF
    want = np.stack([vgpu.philox(ctr[i], keys[i]) for i in range(n)])
    got = ctr.copy()
    lib.words(ctypes.c_void_p(got.ctypes.data), ctypes.c_void_p(keys.ctypes.data), n)
    np.testing.assert_array_equal(got, want)
    assert tuple(got[0]) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
