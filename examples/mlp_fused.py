"""The MLP of mlp_train.py with the whole epoch on the device: a vgpu.Pipeline of fields.

mlp_train.py runs every matrix product as a call of the matmul field and keeps the
elementwise work (bias, tanh, softmax, the gradient, the update) in numpy, so every
product's operands go to the device and its result comes back. Here the elementwise
work is fused into the fields (a bias is a start value, tanh is one more step, softmax
and the loss's gradient are flux on the final logits, the update is the integration
itself: w' = -lr x d over the batch),
and the fields' buffers feed each other on the device (vgpu.Pipeline): an epoch is
five dispatches and moves no array through the host. The loss and accuracy are read
back only when printed.

    python examples/mlp_fused.py                   # glsl where OpenGL 4.3 is, else numpy
    python examples/mlp_fused.py --compare         # also the numpy-elementwise version
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
try:
    import vgpu
except ImportError:             # run from a checkout without `pip install .`
    sys.path.insert(0, str(HERE.parent))
    import vgpu
sys.path.insert(0, str(HERE))
import mlp_train  # noqa: E402

# Each layer's weights and bias are one array WB = [W; b] (K + 1 rows): the bias row is
# the product's start value, and one update field moves both.
#
# A = tanh(X @ W + b): after the K steps of the product, one more step moves z to
# tanh(z) (a step of dt = 1 whose derivative is tanh(z) - z). The min() keeps every
# read provably in range, so the kernel reads without checks.
DENSE_TANH = """
field dense_tanh {
    input X[M, K], WB[K1, N]
    grid i < M, j < N
    state z = WB[K1 - 1, j]
    dz/dt = where(step < K, X[i, min(step, K - 1)] * WB[min(step, K1 - 1), j], tanh(z) - z)
    solve euler(dt = 1, steps = K + 1)
}
"""


def dense_softmax(classes: int) -> str:
    """P = softmax(A @ W + b) along each row and the cross-entropy's gradient
    DZ = (P - Y) / M: one trajectory per row, a state per class (the logits)."""
    z = [f"z{c}" for c in range(classes)]
    top = z[0]
    for name in z[1:]:
        top = f"max({top}, {name})"
    lines = ["field dense_softmax {",
             "    param inv_m = 1.0",
             "    input A[M, K], WB[K1, C], Y[M, C]",
             "    output P[M, C], DZ[M, C]",
             "    grid i < M",
             "    state " + ", ".join(f"{n} = WB[K1 - 1, {c}]" for c, n in enumerate(z)),
             f"    let top = {top}",
             "    let total = " + " + ".join(f"exp({n} - top)" for n in z)]
    lines += [f"    d{n}/dt = A[i, step] * WB[min(step, K1 - 1), {c}]" for c, n in enumerate(z)]
    lines += ["    solve euler(dt = 1, steps = K)"]
    lines += [f"    flux P[i, {c}] += exp({n} - top) / total" for c, n in enumerate(z)]
    lines += [f"    flux DZ[i, {c}] += (exp({n} - top) / total - Y[i, {c}]) * inv_m"
              for c, n in enumerate(z)]
    return "\n".join(lines + ["}"]) + "\n"


# D = (DZ @ W.T) * (1 - A^2), the gradient through tanh: the product's N steps, then one
# step to g * (1 - A^2).
BACK_TANH = """
field back_tanh {
    input DZ[M, N], WB[K1, N], A[M, K]
    grid i < M, j < K
    state g = 0
    dg/dt = where(step < N, DZ[i, min(step, N - 1)] * WB[min(j, K1 - 1), min(step, N - 1)],
                  g * (1 - A[i, j] * A[i, j]) - g)
    solve euler(dt = 1, steps = N + 1)
}
"""
# [W; b] <- [W; b] - lr * [X, 1].T @ D, one batch row per step (the bias row's input is 1).
UPDATE = """
field update {
    param lr = 1.0
    input X[M, K], D[M, N]
    grid i < K1, j < N
    state w
    dw/dt = -lr * where(i < K, X[step, min(i, K - 1)], 1.0) * D[step, j]
    solve euler(dt = 1, steps = M)
}
"""


class FusedMLP:
    """mlp_train.MLP's network and training step as a Pipeline of five fields."""

    def __init__(self, x, onehot, model: mlp_train.MLP, lr: float, backend: str = "auto"):
        m, classes = onehot.shape
        p = self.pipe = vgpu.Pipeline(backend)
        wb1 = np.vstack([model.w1, model.b1]).astype(np.float32)
        wb2 = np.vstack([model.w2, model.b2]).astype(np.float32)
        hidden = wb1.shape[1]
        a1 = np.zeros((m, hidden), np.float32)
        dz = np.zeros((m, classes), np.float32)
        self.fwd1 = p.add(DENSE_TANH, inputs={"X": x, "WB": wb1})
        self.fwd2 = p.add(dense_softmax(classes), inputs={"A": a1, "WB": wb2, "Y": onehot},
                          params={"inv_m": 1.0 / m})
        self.back = p.add(BACK_TANH, inputs={"DZ": dz, "WB": wb2, "A": a1})
        self.l2 = p.add(UPDATE, wb2, inputs={"X": a1, "D": dz}, params={"lr": lr},
                        dims={"K1": hidden + 1})
        self.l1 = p.add(UPDATE, wb1, inputs={"X": x, "D": a1}, params={"lr": lr},
                        dims={"K1": x.shape[1] + 1})
        for dst, name, src, what in [
                (self.fwd1, "WB", self.l1, None),
                (self.fwd2, "A", self.fwd1, None), (self.fwd2, "WB", self.l2, None),
                (self.back, "DZ", self.fwd2, "DZ"), (self.back, "WB", self.l2, None),
                (self.back, "A", self.fwd1, None),
                (self.l2, "X", self.fwd1, None), (self.l2, "D", self.fwd2, "DZ"),
                (self.l1, "D", self.back, None)]:
            p.link(dst, name, src, what)
        self.onehot = onehot

    @property
    def backend(self) -> str:
        return self.fwd1.sim.backend

    def weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(w1, b1, w2, b2), read back."""
        wb1, wb2 = self.l1.states, self.l2.states
        return wb1[:-1], wb1[-1], wb2[:-1], wb2[-1]

    def epoch(self) -> None:
        self.pipe.run()

    def loss_and_accuracy(self, y) -> tuple[float, float]:
        """Of the forward pass of the last epoch (before its update)."""
        p = self.fwd2.outputs["P"]
        loss = float(-np.mean(np.sum(self.onehot * np.log(p + 1e-12), axis=1)))
        return loss, float(np.mean(p.argmax(axis=1) == y))


def train(epochs: int = 100, hidden: int = 32, samples: int = 512, lr: float = 2.0,
          backend: str = "auto", seed: int = 0, log_every: int = 25,
          quiet: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    x, y = mlp_train.two_moons(samples, 0.1, rng)
    onehot = np.eye(2, dtype=np.float32)[y]
    model = mlp_train.MLP(2, hidden, 2, rng)         # the same start as mlp_train.train
    fused = FusedMLP(x, onehot, model, lr, backend)
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        fused.epoch()
        if not quiet and (epoch % log_every == 0 or epoch == 1):
            loss, acc = fused.loss_and_accuracy(y)
            print(f"epoch {epoch:4d}  loss {loss:.4f}  train accuracy {acc * 100:5.1f}%")
    seconds = time.perf_counter() - start
    fused.pipe.run()                # the forward pass of the trained weights
    _, accuracy = fused.loss_and_accuracy(y)
    return {"accuracy": accuracy, "seconds": seconds, "backend": fused.backend,
            "on_device": fused.pipe.on_device, "copies": len(fused.pipe.copies)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--backend", choices=("auto", "glsl", "wgpu", "cpu", "numpy"),
                        default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true",
                        help="also train mlp_train.py's numpy-elementwise version")
    args = parser.parse_args(argv)
    kw = dict(epochs=args.epochs, hidden=args.hidden, samples=args.samples, lr=args.lr,
              seed=args.seed)
    r = train(backend=args.backend, **kw)
    print(f"fused: final train accuracy {r['accuracy'] * 100:.1f}% on {r['backend']} "
          f"({r['seconds']:.2f} s, {1e3 * r['seconds'] / args.epochs:.2f} ms an epoch; "
          f"{r['on_device']} links on the device, {r['copies']} through the host)")
    if args.compare:
        backend = r["backend"] if r["backend"] in ("glsl", "numpy") else "auto"
        n = mlp_train.train(backend=backend, quiet=True, **kw)
        print(f"numpy elementwise: final train accuracy {n['accuracy'] * 100:.1f}% "
              f"({n['seconds']:.2f} s, {1e3 * n['seconds'] / args.epochs:.2f} ms an epoch)")


if __name__ == "__main__":
    main()
