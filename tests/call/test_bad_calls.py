"""Bad and unusual call arguments, on both backends: a clear VgpuError or a correct
conversion, never a silently wrong answer.

tests/call/test_call_errors.py checks the messages of bind's errors on the numpy
backend. Here every case runs on numpy and GLSL: arrays of every dtype and
memory layout (int, float64, float16, big-endian, Fortran order, strides,
negative strides, broadcast views, read-only, lists) must give exactly what
a clean C-ordered float32 array gives; NaN and inf are counted, not errors,
and stay in their own trajectories; wrong shapes, lengths, kinds and names
are VgpuErrors; the caller's arrays are never written; empty ensembles work.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import vgpu

from field_examples import LORENZ, MATMUL

BACKENDS = ["numpy", "glsl"]
RNG = np.random.default_rng(31)

DECAY = """
field decay {
    param k
    param rate = 2 * k
    input w[N]
    state x, v
    dx/dt = -rate * x + w[i]
    dv/dt = sin(x) - v
    solve rk4(dt = 0.05, steps = 6)
}
"""

PLATE = """
field plate {
    param g = 0.5
    input A[M, P]
    grid i < M, j < P
    basin a < 2, b < 4
    state u
    coupled s = u edge wrap
    du/dt = -g * u + A[i, j] + 0.1 * s[a + 1, b - 1]
    solve heun(dt = 0.1, steps = 5)
    output H[M]
    flux H[i] += u
}
"""

N = 13
H0 = RNG.uniform(-1, 1, (N, 2))
W = RNG.uniform(-1, 1, N)
K = RNG.uniform(0.2, 1.0, N)


@pytest.fixture(autouse=True)
def _needs_gl(request):
    """GLSL cases need the context (the session fixture fails the test without one)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "glsl":
        request.getfixturevalue("glsl")


def run(backend, src=DECAY, h0=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", vgpu.NonFiniteWarning)
        return vgpu.solve(src, h0, backend=backend, **kw)


def clean(a):
    return np.ascontiguousarray(np.asarray(a), np.float32)


def same(a, b):
    np.testing.assert_array_equal(a.states, b.states)
    np.testing.assert_array_equal(a.steps_taken, b.steps_taken)
    for name in b.outputs:
        # flux deposits are float atomics on GLSL: their order, and so the last bit of
        # a sum, may change from run to run ("up to rounding" in the contract)
        np.testing.assert_allclose(a.outputs[name], b.outputs[name], rtol=1e-6, atol=1e-6)


# --- conversions: equal to a clean float32 call --------------------------------------------------
def _layouts(a: np.ndarray) -> dict:
    """The same numbers in many dtypes and memory layouts (each must equal ``clean(a)``
    after conversion; ints are rounded first)."""
    r = np.round(a * 4)
    twice = np.empty((a.shape[0] * 2,) + a.shape[1:], a.dtype)
    twice[::2] = a
    back = a[::-1].copy()
    return {
        "float64": a, "float32": a.astype(np.float32), "float16": a.astype(np.float16),
        "int32": r.astype(np.int32), "int64": r.astype(np.int64), "uint8": np.abs(r).astype(np.uint8),
        "int16 big-endian": r.astype(">i2"), "float32 big-endian": a.astype(">f4"),
        "float64 big-endian": a.astype(">f8"), "Fortran": np.asfortranarray(a),
        "strided": twice[::2], "negative strides": back[::-1],
        "read-only": _read_only(a), "list": a.tolist(),
        "transposed view": np.ascontiguousarray(a.T).T,
    }


def _read_only(a):
    b = a.copy()
    b.flags.writeable = False
    return b


LAYOUTS = list(_layouts(H0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_h0_of_any_dtype_and_layout(backend, layout):
    given = _layouts(H0)[layout]
    ref = run(backend, h0=clean(given), params={"k": 0.5}, inputs={"w": W})
    got = run(backend, h0=given, params={"k": 0.5}, inputs={"w": W})
    same(got, ref)
    assert got.states.dtype == np.float32 and got.states.flags.c_contiguous


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["float64", "int32", "float32 big-endian", "strided",
                                    "negative strides", "read-only", "list", "float16"])
def test_per_trajectory_params_and_inputs_of_any_layout(backend, layout):
    k, w = _layouts(K)[layout], _layouts(W)[layout]
    ref = run(backend, h0=H0, params={"k": clean(k)}, inputs={"w": clean(w)})
    got = run(backend, h0=H0, params={"k": k}, inputs={"w": w})
    same(got, ref)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["Fortran", "transposed view", "negative strides",
                                    "int64", "float64 big-endian"])
def test_two_dimensional_arrays_keep_their_index_order(backend, layout):
    """A Fortran-ordered (or transposed) 2-D input or h0 is still indexed [i, j]."""
    u0 = _layouts(RNG.uniform(-1, 1, (6, 7)))[layout]
    A = _layouts(RNG.uniform(-1, 1, (6, 7)))[layout]
    g = _layouts(np.full((6, 7), 0.5))[layout]
    ref = run(backend, PLATE, h0=clean(u0), inputs={"A": clean(A)}, params={"g": clean(g)})
    got = run(backend, PLATE, h0=u0, inputs={"A": A}, params={"g": g})
    same(got, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalar_params_of_any_numeric_kind(backend):
    ref = run(backend, h0=H0, params={"k": 2.0}, inputs={"w": W})
    for k in (2, np.int64(2), np.float32(2.0), np.float64(2.0), np.array(2.0), np.uint8(2),
              np.array(2, ">i4")):
        same(run(backend, h0=H0, params={"k": k}, inputs={"w": W}), ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_runs_convert_float32_arrays(backend):
    if backend == "glsl":               # float64 GLSL has no double sin: a clear refusal
        with pytest.raises(vgpu.BackendError, match="sin"):
            run(backend, h0=H0, params={"k": 0.5}, inputs={"w": W}, dtype="float64")
        return
    ref = run(backend, h0=H0.astype(np.float32).astype(np.float64), params={"k": 0.5},
              inputs={"w": W.astype(np.float32).astype(np.float64)}, dtype=np.float64)
    got = run(backend, h0=H0.astype(np.float32), params={"k": 0.5},
              inputs={"w": W.astype(np.float32)}, dtype="float64")
    same(got, ref)
    assert got.states.dtype == np.float64


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_arrays_beyond_float32_precision_round_like_numpy(backend):
    big = np.array([2**24 + 1, -(2**24) - 3, 2**31 - 1, 7], np.int64)
    src = "field f { input w[N]\n state x = w[i]\n dx/dt = 0\n solve euler(dt = 1, steps = 1) }"
    got = vgpu.run_field(src, inputs={"w": big}, backend=backend)
    np.testing.assert_array_equal(got, big.astype(np.float32))


# --- the caller's arrays and the results ----------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_callers_arrays_are_never_written(backend):
    h0, k, w = H0.astype(np.float32), K.astype(np.float32), W.astype(np.float32)
    copies = [a.copy() for a in (h0, k, w)]
    run(backend, h0=h0, params={"k": k}, inputs={"w": w})
    for a, b in zip((h0, k, w), copies):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_of_earlier_calls_are_not_overwritten(backend):
    """A kernel reuses its buffers between calls; the arrays it returned must not change."""
    first = run(backend, h0=H0, params={"k": 0.5}, inputs={"w": W})
    kept = first.states.copy()
    run(backend, h0=H0 * 3, params={"k": 0.9}, inputs={"w": -W})
    np.testing.assert_array_equal(first.states, kept)
    u0 = RNG.uniform(-1, 1, (6, 7))
    a = run(backend, PLATE, h0=u0, inputs={"A": u0}, save_every=2)
    h, H = a.history.copy(), a.outputs["H"].copy()
    run(backend, PLATE, h0=-u0, inputs={"A": u0}, save_every=2)
    np.testing.assert_array_equal(a.history, h)
    np.testing.assert_array_equal(a.outputs["H"], H)


# --- NaN and inf: counted, and kept to their own trajectories ------------------------------------------
def _nonfinite(backend, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sol = vgpu.solve(DECAY, backend=backend, **kw)
    found = [w for w in caught if issubclass(w.category, vgpu.NonFiniteWarning)]
    return sol, found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["h0", "param", "input", "inf in h0"])
def test_nan_stays_in_its_trajectories_and_is_counted_once(backend, where):
    h0, k, w = H0.copy(), K.copy(), W.copy()
    bad = [2, 7]
    if where == "h0":
        h0[bad, 1] = np.nan
    elif where == "inf in h0":
        h0[bad, 0] = np.inf
    elif where == "param":
        k[bad] = np.nan
    else:
        w[bad] = np.nan
    ref = run(backend, h0=H0, params={"k": K}, inputs={"w": W})
    sol, found = _nonfinite(backend, h0=h0, params={"k": k}, inputs={"w": w})
    assert len(found) == 1 and f"2 of {N}" in str(found[0].message)
    good = np.setdiff1d(np.arange(N), bad)
    np.testing.assert_array_equal(sol.states[good], ref.states[good])
    assert not np.isfinite(sol.states[bad]).all(axis=1).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_scalar_param_counts_every_trajectory(backend):
    sol, found = _nonfinite(backend, h0=H0, params={"k": np.nan}, inputs={"w": W})
    assert len(found) == 1 and f"{N} of {N}" in str(found[0].message)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_in_an_index_computation_is_not_a_crash(backend):
    """int(NaN) is unspecified, but an index made from it is clamped or checked: the call
    either finishes or raises ProgramIndexError, never reads outside the array."""
    src = """field f { input w[N]
        state x
        dx/dt = w[clamp(int(x), 0, N - 1)]
        solve euler(dt = 1, steps = 2) }"""
    x0 = np.array([np.nan, 1.0, np.inf, -np.inf, 1e30], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vgpu.NonFiniteWarning)
        out = vgpu.run_field(src, x0, inputs={"w": np.arange(5.0)}, backend=backend)
    np.testing.assert_array_equal(out[1], 4.0)     # 1 -> 1 + w[1] -> 2 + w[2]


# --- errors -------------------------------------------------------------------------------------------
def fails(backend, kind, *words, src=DECAY, h0=H0, **kw):
    kw.setdefault("params", {"k": 0.5})
    kw.setdefault("inputs", {"w": W})
    with pytest.raises(kind) as info:
        vgpu.solve(src, h0, backend=backend, **kw)
    assert isinstance(info.value, vgpu.VgpuError)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(N, 3), (N,), (N, 2, 1), (2, N), (), (N * 2,)])
def test_wrong_h0_shapes(backend, shape):       # (1, N, 2) is a batch of shape (1, N)
    fails(backend, vgpu.ShapeError if shape != (N, 2, 1) else vgpu.ShapeError, "h0",
          h0=np.ones(shape))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", [
    np.ones((N, 2), np.complex64), np.full((N, 2), "1.0"), np.array([[object()] * 2] * N),
    np.zeros((N, 2), "datetime64[s]"), np.zeros((N, 2), [("a", "f4")]), "x", None.__class__,
])
def test_h0_that_is_not_real_numbers(backend, value):
    fails(backend, vgpu.ArgumentTypeError, "h0", h0=value)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(N + 1,), (N - 1,), (N, 1), (1, N), (1,), (N, N)])
def test_per_trajectory_params_of_the_wrong_shape(backend, shape):
    fails(backend, vgpu.ShapeError, "param k", params={"k": np.ones(shape)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_of_the_wrong_shape(backend):
    fails(backend, vgpu.ShapeError, "input w", inputs={"w": np.ones(N + 1)})
    fails(backend, vgpu.ShapeError, "input w", inputs={"w": np.ones((N, 1))})
    fails(backend, vgpu.ShapeError, "input w", inputs={"w": np.float64(1.0)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposed_two_dimensional_arrays_are_shape_errors(backend):
    u0, A = np.ones((6, 7)), np.ones((7, 6))
    fails(backend, vgpu.ShapeError, "dim", src=PLATE, h0=u0, inputs={"A": A}, params={})
    fails(backend, vgpu.ShapeError, "param g", src=PLATE, h0=u0, inputs={"A": u0},
          params={"g": np.ones((7, 6))})


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_and_extra_names(backend):
    fails(backend, vgpu.MissingError, "param k", params={})
    fails(backend, vgpu.MissingError, "input w", inputs={})
    fails(backend, vgpu.MissingError, "h0", h0=None)
    fails(backend, vgpu.UnknownNameError, "kk", params={"k": 1.0, "kk": 1.0})
    fails(backend, vgpu.UnknownNameError, "'rate '", params={"k": 1.0, "rate ": 1.0})
    fails(backend, vgpu.UnknownNameError, "W", inputs={"w": W, "W": W})
    fails(backend, vgpu.UnknownNameError, "M", dims={"M": 3})
    fails(backend, vgpu.UnknownNameError, "x", params={"k": 1.0, "x": 1.0})   # a state
    fails(backend, vgpu.UnknownNameError, "decay", field="Decay")
    fails(backend, vgpu.ShapeError, "dim N", dims={"N": N + 1})
    fails(backend, vgpu.ArgumentTypeError, "dims", dims={"N": 13.0})
    fails(backend, vgpu.ArgumentTypeError, "dims", dims={"N": -1})


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_spellings(backend):
    src = "field f { state x\n dx/dt = -x * x\n solve euler(dt = 0.5, steps = 2) }"
    h0 = np.linspace(-1, 1, 5)
    for name, spellings in {"float32": ("float32", "f4", np.float32, np.dtype("float32"),
                                        "<f4", ">f4", np.dtype(">f4")),
                            "float64": ("float64", "f8", float, np.float64, ">f8", "=f8")}.items():
        ref = vgpu.run_field(src, h0, backend="numpy", dtype=name)
        for spelling in spellings:
            got = vgpu.run_field(src, h0, backend=backend, dtype=spelling)
            assert got.dtype == np.dtype(name) and got.dtype.isnative, spelling
            np.testing.assert_array_equal(got, ref, err_msg=repr(spelling))
    for bad in ("float16", "int32", "f2", ">f4x", object, 4, np.int64, "float32 ", "c8"):
        fails(backend, vgpu.ArgumentTypeError, "dtype", src=src, h0=h0, params={},
              inputs={}, dtype=bad)


def test_big_endian_dtype_is_the_native_one(glsl):
    """Found by these tests: dtype='>f4' passed bind's check (its name is float32) and the
    GLSL backend uploaded big-endian bytes: every state came back as garbage (6.9e-41)."""
    h0 = np.random.default_rng(0).normal(size=(4, 3))
    ref = vgpu.run_field(LORENZ, h0, backend="numpy", steps=3)
    for spelling in (">f4", np.dtype(">f4")):
        got = vgpu.run_field(LORENZ, h0, backend="glsl", dtype=spelling, steps=3)
        np.testing.assert_array_equal(got, ref)


# --- empty ensembles -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_ensembles_give_empty_results(backend):
    """Found by these tests: an empty h0 or input crashed the GLSL runner with a ValueError
    (reshape) or moderngl's 'cannot map the buffer'."""
    sol = vgpu.solve(LORENZ, np.ones((0, 3)), backend=backend, steps=3, save_every=1)
    assert sol.states.shape == (0, 3) and sol.steps_taken.shape == (0,)
    assert sol.history.shape[1:] == (0, 3)
    out = vgpu.run_field(MATMUL, inputs={"A": np.ones((0, 3)), "B": np.ones((3, 2))},
                         backend=backend)
    assert out.shape == (0, 2)
    sol = vgpu.solve(PLATE, np.ones((0, 5)), inputs={"A": np.ones((0, 5))}, backend=backend)
    assert sol.states.shape == (0, 5) and sol.outputs["H"].shape == (0,)
    out = vgpu.run_field(MATMUL, inputs={"A": np.ones((2, 0)), "B": np.ones((0, 2))},
                         backend=backend)
    np.testing.assert_array_equal(out, np.zeros((2, 2)))
