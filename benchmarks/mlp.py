"""examples/mlp_train.py's epoch, numpy elementwise against fused (issue 17).

Columns (glsl; the same network, data, start weights and learning rate):
  numpy elementwise   mlp_train.py: each matrix product a run_field of the matmul field,
                      bias, tanh, softmax, gradient and update in numpy
  fused pipeline      mlp_fused.py: five fields in a vgpu.Pipeline whose buffers feed
                      each other on the device; nothing goes through the host in an epoch
Sizes: (samples, hidden) = (512, 32), mlp_train.py's default, and (4096, 256), where the
products are large enough for the device's arithmetic to count.
"""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

from .common import Config, Result, Table, Target, describe_error, log

NAME = "mlp"
SIZES = [(512, 32), (4096, 256)]
QUICK_SIZES = [(128, 8)]
EPOCHS, QUICK_EPOCHS = 20, 3
EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _modules():
    sys.path.insert(0, str(EXAMPLES))
    import mlp_fused
    import mlp_train
    return mlp_train, mlp_fused


def _numpy_epochs(mlp_train, x, onehot, model, lr, backend):
    matmul = mlp_train.MatmulField(backend)
    return lambda: model.step(x, onehot, matmul, lr)


def run(cfg: Config) -> Result:
    mlp_train, mlp_fused = _modules()
    sizes = QUICK_SIZES if cfg.quick else SIZES
    epochs = QUICK_EPOCHS if cfg.quick else EPOCHS
    res = Result(NAME)
    table = Table(f"MLP epoch (2 -> hidden tanh -> 2 softmax, full batch), glsl, median of "
                  f"{epochs} epochs after one warm-up epoch",
                  ["samples x hidden", "numpy elementwise ms", "fused pipeline ms",
                   "fused speed-up", "links on the device"])
    rows = {}
    for samples, hidden in sizes:
        rng = np.random.default_rng(0)
        x, y = mlp_train.two_moons(samples, 0.1, rng)
        onehot = np.eye(2, dtype=np.float32)[y]
        start = mlp_train.MLP(2, hidden, 2, rng)
        lr = 2.0
        times, on_device = {}, None
        for name in ("numpy elementwise", "fused pipeline"):
            if not cfg.wants(name):
                continue
            try:
                model = mlp_train.MLP(2, hidden, 2, np.random.default_rng(1))
                model.w1, model.b1 = start.w1.copy(), start.b1.copy()
                model.w2, model.b2 = start.w2.copy(), start.b2.copy()
                if name == "fused pipeline":
                    fused = mlp_fused.FusedMLP(x, onehot, model, lr, "glsl")
                    on_device = fused.pipe.on_device
                    fn = fused.epoch
                else:
                    fn = _numpy_epochs(mlp_train, x, onehot, model, lr, "glsl")
                fn()
                per = []
                for _ in range(epochs):
                    t = time.perf_counter()
                    fn()
                    per.append(time.perf_counter() - t)
                times[name] = float(np.median(per))
            except Exception as exc:            # noqa: BLE001
                times[name] = describe_error(exc, cfg)
            log(f"  {samples}x{hidden} {name}: {times[name]}")
        a, b = times.get("numpy elementwise"), times.get("fused pipeline")
        ok = isinstance(a, float) and isinstance(b, float)
        table.rows.append([f"{samples} x {hidden}", 1e3 * a if isinstance(a, float) else a,
                           1e3 * b if isinstance(b, float) else b, a / b if ok else None,
                           on_device])
        rows[f"{samples}x{hidden}"] = times
    res.tables.append(table)
    res.data = {"epochs": epochs, "times_s": rows}
    for key, times in rows.items():
        a, b = times.get("numpy elementwise"), times.get("fused pipeline")
        if isinstance(a, float) and isinstance(b, float):
            res.targets.append(Target(f"fused epoch vs numpy elementwise at {key}", None,
                                      f"fused {a / b:.2f}x faster ({1e3 * b:.2f} ms against "
                                      f"{1e3 * a:.2f} ms)", kind="info"))
    return res
