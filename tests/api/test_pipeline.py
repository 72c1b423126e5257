"""vgpu.Pipeline: stages restart each run, links hand arrays over (on glsl: one buffer on
the device), and the fused MLP of examples/mlp_fused.py trains as mlp_train.py does."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import vgpu

from conftest import COMPILED_BACKENDS

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import mlp_fused  # noqa: E402
import mlp_train  # noqa: E402

MATMUL = open("examples/matmul.field").read()


@pytest.fixture(params=("numpy",) + COMPILED_BACKENDS)
def backend(request):
    if request.param != "numpy":
        request.getfixturevalue(request.param)
    return request.param


def test_fused_mlp_follows_the_numpy_version(backend):
    rng = np.random.default_rng(0)
    x, y = mlp_train.two_moons(64, 0.1, rng)
    onehot = np.eye(2, dtype=np.float32)[y]
    model = mlp_train.MLP(2, 8, 2, rng)
    fused = mlp_fused.FusedMLP(x, onehot, model, 2.0, backend)
    assert fused.backend == backend
    if backend == "glsl":
        assert fused.pipe.on_device == 9 and not fused.pipe.copies
    for _ in range(5):
        fused.epoch()
        model.step(x, onehot, lambda a, b: a @ b, 2.0)
    for got, want in zip(fused.weights(), (model.w1, model.b1, model.w2, model.b2)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    a1, p = model.forward(x, lambda a, b: a @ b)
    fused.epoch()                                   # its forward pass: of those weights
    np.testing.assert_allclose(fused.fwd2.outputs["P"], p, rtol=1e-4, atol=1e-5)


def test_a_chain_of_products(backend):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((6, 6)).astype(np.float32) for _ in range(3))
    pipe = vgpu.Pipeline(backend)
    first = pipe.add(MATMUL, inputs={"A": a, "B": b})
    second = pipe.add(MATMUL, inputs={"A": np.zeros((6, 6), np.float32), "B": c})
    pipe.link(second, "A", first)                   # A of the second: the first's states
    pipe.run()
    np.testing.assert_allclose(second.states, a @ b @ c, rtol=1e-4, atol=1e-4)
    first.sim.set_input("A", 2 * a)
    pipe.run()
    np.testing.assert_allclose(second.states, 2 * a @ b @ c, rtol=1e-4, atol=1e-4)


def test_link_errors():
    pipe = vgpu.Pipeline("numpy")
    a = np.ones((3, 4), np.float32)
    s1 = pipe.add(MATMUL, inputs={"A": a, "B": a.T.copy()})
    s2 = pipe.add(MATMUL, inputs={"A": a, "B": a.T.copy()})
    with pytest.raises(vgpu.CallError, match="shape"):
        pipe.link(s2, "A", s1)                      # (3, 3) into (3, 4)
    with pytest.raises(vgpu.CallError, match="no input"):
        pipe.link(s2, "Q", s1)
    with pytest.raises(vgpu.CallError, match="no output"):
        pipe.link(s2, "A", s1, "H")
