"""Every mistake in a call is a VgpuError subclass that names the problem (call/bind.py)."""
from __future__ import annotations

import numpy as np
import pytest

import vgpu
from field_examples import MATMUL


DECAY = """
field decay {
    param k
    param rate = 2 * k
    state x, v
    dx/dt = -rate * x
    dv/dt = 0
    solve rk4(dt = 0.01, steps = 10)
}
"""

HIST = """
field hist {
    output H[R]
    input w[3]
    param h = 0.1
    state x
    dx/dt = w[0] * x
    solve euler(dt = h, steps = 2)
    flux H[0] += x
}
"""

AB = {"A": np.ones((2, 3)), "B": np.ones((3, 4))}


def run(src, h0=None, **kw):
    kw.setdefault("backend", "numpy")
    return vgpu.run_field(src, h0, **kw)


def fails(kind, *match, src=DECAY, h0=None, **kw):
    with pytest.raises(kind) as info:
        run(src, h0, **kw)
    assert isinstance(info.value, vgpu.CallError)
    for text in match:
        assert text in str(info.value), (text, str(info.value))
    return info.value


def test_conversions_are_accepted():
    A = np.asfortranarray(np.arange(6).reshape(2, 3))
    B = [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0]]
    np.testing.assert_array_equal(run(MATMUL, inputs={"A": A, "B": B}), A @ np.array(B))
    h0 = np.ones((4, 2))[::2]                           # non-contiguous
    got = run(DECAY, h0, params={"k": np.float32(0.5)}, dtype=np.float64)
    assert got.dtype == np.float64 and got.shape == (2, 2)
    run(DECAY, [[1, 2]], params={"k": np.array(1)}, dtype=np.float32)


def test_unknown_names_list_the_valid_ones():
    fails(vgpu.UnknownNameError, "kk", "k, rate", h0=np.ones((1, 2)), params={"kk": 1.0})
    fails(vgpu.UnknownNameError, "C", "A, B", src=MATMUL, inputs={**AB, "C": 1})
    fails(vgpu.UnknownNameError, "P", "M, K, N", src=MATMUL, inputs=AB, dims={"P": 3})
    fails(vgpu.UnknownNameError, "A", "declares no inputs", h0=np.ones((1, 2)),
          params={"k": 1.0}, inputs={"A": 1})


def test_missing_param_input_h0_and_dim():
    fails(vgpu.MissingError, "param k", h0=np.ones((1, 2)))
    fails(vgpu.MissingError, "input B", src=MATMUL, inputs={"A": np.ones((2, 3))})
    fails(vgpu.MissingError, "h0", "x, v", params={"k": 1.0})
    fails(vgpu.MissingError, "dim R", "dims=", src=HIST, h0=np.ones(3),
          inputs={"w": np.ones(3)})


def test_h0_given_when_no_state_needs_it():
    err = fails(vgpu.CallError, "h0", src=MATMUL, h0=np.ones((2, 4)), inputs=AB)
    assert "start expression" in str(err)


def test_h0_shape_errors_say_expected_and_got():
    fails(vgpu.ShapeError, "(N, 2)", "(5, 3)", h0=np.ones((5, 3)), params={"k": 1.0})
    fails(vgpu.ShapeError, "(N, 2)", "(5,)", h0=np.ones(5), params={"k": 1.0})
    # (2, 5, 2) is a batch of shape (2, 5) (a field without a grid statement)
    fails(vgpu.ShapeError, "(N, 2)", "(2, 5, 3)", h0=np.ones((2, 5, 3)), params={"k": 1.0})


def test_dims_that_disagree_name_both_sources():
    err = fails(vgpu.ShapeError, "dim K", "input A", "input B", src=MATMUL,
                inputs={"A": np.ones((2, 3)), "B": np.ones((5, 4))})
    assert "3" in str(err) and "5" in str(err)
    fails(vgpu.ShapeError, "dim M", "dims=", src=MATMUL, inputs=AB, dims={"M": 7})
    fails(vgpu.ShapeError, "dim N", "param k", "h0", h0=np.ones((4, 2)),
          params={"k": np.ones(3)})


def test_input_rank_and_literal_extent():
    fails(vgpu.ShapeError, "input A", "A[M, K]", "(6,)", src=MATMUL,
          inputs={"A": np.ones(6), "B": np.ones((3, 4))})
    fails(vgpu.ShapeError, "input w", "3", "(4,)", src=HIST, h0=np.ones(3),
          inputs={"w": np.ones(4)}, dims={"R": 2})


def test_per_trajectory_param_shape():
    fails(vgpu.ShapeError, "param k", "(3, 1)", h0=np.ones((3, 2)), params={"k": np.ones((3, 1))})
    fails(vgpu.ShapeError, "param k", h0=np.ones((3, 2)), params={"k": np.ones(4)})


def test_values_that_are_not_real_numbers():
    h0 = np.ones((2, 2))
    fails(vgpu.ArgumentTypeError, "param k", "complex", h0=h0, params={"k": 1j})
    fails(vgpu.ArgumentTypeError, "param k", h0=h0, params={"k": "fast"})
    fails(vgpu.ArgumentTypeError, "h0", h0=[[1, 2], [3]], params={"k": 1.0})
    fails(vgpu.ArgumentTypeError, "input A", src=MATMUL,
          inputs={"A": np.array([[None]]), "B": np.ones((1, 1))})
    fails(vgpu.ArgumentTypeError, "params=", h0=h0, params=[1.0])


def test_dtype_must_be_float32_or_float64():
    for bad in ("int32", "float16", None, "complex64", "bogus"):
        fails(vgpu.ArgumentTypeError, "dtype", h0=np.ones((1, 2)), params={"k": 1.0}, dtype=bad)


def test_dt_steps_t0_and_save_every_are_checked():
    ok = dict(h0=np.ones((1, 2)), params={"k": 1.0})
    fails(vgpu.ArgumentTypeError, "steps", steps=-1, **ok)
    fails(vgpu.ArgumentTypeError, "steps", steps=2.5, **ok)
    fails(vgpu.ArgumentTypeError, "steps", steps=True, **ok)
    fails(vgpu.ArgumentTypeError, "dt", "finite", dt=np.inf, **ok)
    fails(vgpu.ArgumentTypeError, "dt", dt="small", **ok)
    fails(vgpu.ArgumentTypeError, "t0", t0=np.nan, **ok)
    with pytest.raises(vgpu.ArgumentTypeError, match="save_every"):
        vgpu.solve(DECAY, save_every=0, backend="numpy", **ok)


def test_per_trajectory_param_in_dt_is_an_error():
    err = fails(vgpu.CallError, "dt", "param h", src=HIST, h0=np.ones(3),
                inputs={"w": np.ones(3)}, dims={"R": 1}, params={"h": np.ones(3)})
    assert "per trajectory" in str(err)
    x = run(HIST, np.ones(3), inputs={"w": np.ones(3)}, dims={"R": 1},
            params={"h": np.ones(3)}, dt=0.5)                  # fixed by dt= in the call
    np.testing.assert_allclose(x, 2.25)


def test_unknown_backend():
    fails(vgpu.ArgumentTypeError, "backend", "metal", h0=np.ones((1, 2)), params={"k": 1.0},
          backend="metal")


def test_nan_inputs_are_not_errors():
    with pytest.warns(vgpu.NonFiniteWarning, match="1 of 2"):
        run(DECAY, np.array([[np.nan, 1.0], [1.0, 1.0]]), params={"k": 1.0})


def test_per_trajectory_param_reaching_dt_through_a_default():
    src = HIST.replace("param h = 0.1", "param g = 0.1\n    param h = g / 2")
    fails(vgpu.CallError, "dt", "param h", "per trajectory", src=src, h0=np.ones(3),
          inputs={"w": np.ones(3)}, dims={"R": 1}, params={"g": np.ones(3)})


def test_unknown_field_and_literal_grid_extent():
    fails(vgpu.UnknownNameError, "decay", h0=np.ones((1, 2)), params={"k": 1.0}, field="nope")
    src = """field fixed {
        grid i < 4
        state x
        dx/dt = 0
        solve euler(dt = 1, steps = 1)
    }"""
    fails(vgpu.ShapeError, "h0", "4", "(5,)", src=src, h0=np.ones(5))
    np.testing.assert_array_equal(run(src, np.ones(4)), 1.0)


@pytest.mark.parametrize("call", [
    lambda: vgpu.load(None),
    lambda: vgpu.load(3),
    lambda: vgpu.evict("field f { state x\n dx/dt = -x\n solve euler(dt = 1, steps = 1) }",
                       per_trajectory=5),
    lambda: vgpu.evict("field f { state x\n dx/dt = -x\n solve euler(dt = 1, steps = 1) }",
                       per_trajectory=[1]),
    lambda: vgpu.run_field("field f { state x\n dx/dt = -x\n solve euler(dt = 1, steps = 1) }",
                           [1.0], dtype=("f4", -1), backend="numpy"),
])
def test_odd_arguments_are_vgpu_errors(call):
    with pytest.raises(vgpu.ArgumentTypeError):
        call()
