"""Train a small multilayer perceptron whose matrix products run on VGPU.

The data are two interleaved half moons in the plane (generated with numpy).
The network has one hidden layer (tanh) and a softmax output, trained with
full-batch gradient descent on the cross-entropy. Every matrix product, in the
forward pass and in the backward pass, is a call of the matmul field
(examples/matmul.field: one trajectory per element of the product, K euler
steps of size 1); the elementwise work (tanh, softmax, biases, the update)
stays in numpy.

The matmul field is compiled at most once per product shape (the GLSL
backend makes shapes uniforms of the shader, so in fact one kernel serves all
four shapes); every later call finds its kernel in the cache and only writes
buffers and dispatches. The counters printed at the end
(``vgpu.cache_stats()``) show it.

    python examples/mlp_train.py                  # auto backend (GLSL where OpenGL 4.3 is)
    python examples/mlp_train.py --backend numpy --epochs 100
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


class MatmulField:
    """``A @ B`` through the matmul field, remembering every shape it was called with."""

    def __init__(self, backend: str) -> None:
        self.src = vgpu.load(HERE / "matmul.field")
        self.backend = backend
        self.calls = 0
        self.shapes: set[tuple[tuple[int, int], tuple[int, int]]] = set()

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        b = np.ascontiguousarray(b, dtype=np.float32)
        self.calls += 1
        self.shapes.add((a.shape, b.shape))
        return vgpu.run_field(self.src, inputs={"A": a, "B": b}, backend=self.backend)


def two_moons(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points on two interleaved half circles, standardised, with labels 0 / 1."""
    half = n // 2
    a = rng.uniform(0.0, np.pi, half)
    b = rng.uniform(0.0, np.pi, n - half)
    x = np.concatenate([np.c_[np.cos(a), np.sin(a)],
                        np.c_[1.0 - np.cos(b), 0.5 - np.sin(b)]])
    x += rng.normal(scale=noise, size=x.shape)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    y = np.r_[np.zeros(half, np.int64), np.ones(n - half, np.int64)]
    return x.astype(np.float32), y


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class MLP:
    """2 -> hidden (tanh) -> 2 (softmax); weights in float32 numpy arrays."""

    def __init__(self, n_in: int, hidden: int, n_out: int, rng: np.random.Generator) -> None:
        self.w1 = rng.normal(size=(n_in, hidden)).astype(np.float32)
        self.b1 = np.zeros(hidden, np.float32)
        self.w2 = (rng.normal(size=(hidden, n_out)) / np.sqrt(hidden)).astype(np.float32)
        self.b2 = np.zeros(n_out, np.float32)

    def forward(self, x, matmul):
        a1 = np.tanh(matmul(x, self.w1) + self.b1)
        return a1, softmax(matmul(a1, self.w2) + self.b2)

    def step(self, x, onehot, matmul, lr: float) -> float:
        """One full-batch gradient-descent step; returns the loss before it."""
        a1, p = self.forward(x, matmul)
        loss = float(-np.mean(np.sum(onehot * np.log(p + 1e-12), axis=1)))
        dz2 = (p - onehot) / len(x)
        dw2 = matmul(a1.T, dz2)
        dz1 = matmul(dz2, self.w2.T) * (1.0 - a1 * a1)
        dw1 = matmul(x.T, dz1)
        self.w1 -= lr * dw1
        self.b1 -= lr * dz1.sum(axis=0)
        self.w2 -= lr * dw2
        self.b2 -= lr * dz2.sum(axis=0)
        return loss

    def accuracy(self, x, y, matmul) -> float:
        return float(np.mean(self.forward(x, matmul)[1].argmax(axis=1) == y))


def train(epochs: int = 100, hidden: int = 32, samples: int = 512, lr: float = 2.0,
          backend: str = "auto", seed: int = 0, log_every: int = 25, quiet: bool = False) -> dict:
    """Train and return the accuracy, the matmul calls and shapes, and the cache counters."""
    rng = np.random.default_rng(seed)
    x, y = two_moons(samples, 0.1, rng)
    onehot = np.eye(2, dtype=np.float32)[y]
    model = MLP(2, hidden, 2, rng)
    matmul = MatmulField(backend)
    before = vgpu.cache_stats()
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        loss = model.step(x, onehot, matmul, lr)
        if not quiet and (epoch % log_every == 0 or epoch == 1):
            acc = model.accuracy(x, y, matmul)
            print(f"epoch {epoch:4d}  loss {loss:.4f}  train accuracy {acc * 100:5.1f}%")
    accuracy = model.accuracy(x, y, matmul)
    after = vgpu.cache_stats()
    counters = {k: after[k] - before.get(k, 0) for k in after}
    return {"accuracy": accuracy, "calls": matmul.calls, "shapes": sorted(matmul.shapes),
            "counters": counters, "seconds": time.perf_counter() - start}


def report(result: dict) -> None:
    c = result["counters"]
    n_shapes = len(result["shapes"])
    print(f"final train accuracy: {result['accuracy'] * 100:.1f}% "
          f"({result['seconds']:.1f} s, {result['calls']} matmul calls)")
    print("matmul shapes (A, B): " + ", ".join(f"{a}x{b}" for a, b in result["shapes"]))
    print("cache counters: " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
    compiles = c.get("compiles", 0)
    if c.get("cpu_fallbacks", 0) or compiles + c.get("memory_hits", 0) == 0:
        print(f"kernels: {n_shapes} matmul shapes, none compiled (ran on the numpy backend)\n")
        return
    print(f"kernels: {n_shapes} matmul shapes, {compiles} compiled "
          f"({c.get('disk_hits', 0)} of them found in the disk cache), "
          f"{c.get('memory_hits', 0)} cache hits of {result['calls']} calls")
    print()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--lr", type=float, default=2.0)
    parser.add_argument("--backend", choices=("auto", "glsl", "numpy"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = train(epochs=args.epochs, hidden=args.hidden, samples=args.samples, lr=args.lr,
                   backend=args.backend, seed=args.seed)
    report(result)


if __name__ == "__main__":
    main()
