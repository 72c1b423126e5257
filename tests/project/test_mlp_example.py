"""examples/mlp_train.py: reaches 95% training accuracy, at most one compile per matmul shape.

Run as a user would (a subprocess, a fresh cache folder), with fewer epochs
than the default to stay quick; the printed counters are the evidence.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "mlp_train.py"


def run_example(tmp_path, *args):
    env = dict(os.environ)
    env["VGPU_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def parse(out: str) -> dict:
    accuracy = float(re.search(r"final train accuracy: ([\d.]+)%", out).group(1))
    calls = int(re.search(r"([\d]+) matmul calls", out).group(1))
    shapes = int(re.search(r"kernels: (\d+) matmul shapes", out).group(1))
    counters = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)",
                                                       re.search(r"cache counters: (.*)",
                                                                 out).group(1)))
    return {"accuracy": accuracy, "calls": calls, "shapes": shapes, "counters": counters}


def test_mlp_reaches_95_percent_with_one_compile_per_shape(tmp_path):
    out = run_example(tmp_path, "--epochs", "60")
    assert "epoch" in out                            # it prints its progress
    got = parse(out)
    assert got["accuracy"] >= 95.0, out
    # forward X@W1 and backward dZ2@W2.T share a shape: 4 distinct products
    assert got["shapes"] == 4
    c = got["counters"]
    from vgpu_compiler import backends as registry
    first = next(b.name for b in registry.auto_order() if b.available()[0])
    if first == "cpu":
        # the cpu backend: one kernel for every shape (dims are run-time values)
        assert c.get("cpu_fallbacks", 0) == 0, out
        assert c["compiles"] == 1, out
        assert c["memory_hits"] == got["calls"] - 1, out
        assert c["dispatches"] >= got["calls"], out
    elif first == "glsl":
        # the GLSL path: one compile per matmul shape, every other call a memory hit
        assert c.get("cpu_fallbacks", 0) == 0, out
        assert c["compiles"] == got["shapes"], out
        assert c["memory_hits"] == got["calls"] - got["shapes"], out
        assert c["dispatches"] >= got["calls"], out


def test_mlp_on_the_numpy_backend(tmp_path):
    got = parse(run_example(tmp_path, "--epochs", "60", "--backend", "numpy"))
    assert got["accuracy"] >= 95.0
    assert got["counters"].get("compiles", 0) == 0
