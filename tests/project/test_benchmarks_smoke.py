"""The benchmark suite must keep running: `python -m benchmarks --quick` on tiny
sizes writes its JSON, every column that ran agrees with the reference answer,
and nothing fails except for a documented reason (a peer not installed, no GL)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _gl_available() -> bool:
    try:
        import moderngl
        ctx = moderngl.create_standalone_context(backend="egl", require=430)
        ctx.release()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["VGPU_CACHE_DIR"] = str(out.parent / "cache")
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.exists(), "the JSON report was not written"
    return json.loads(out.read_text()), proc.stdout


def test_every_benchmark_reported(report):
    data, stdout = report
    assert set(data["benchmarks"]) == {"lorenz", "dispatch", "compile", "matmul", "kuramoto",
                                       "lorenz_adaptive", "ou",
                                       "cluster", "simulation", "mlp", "functions", "fit",
                                       "tight", "sensitivities"}
    for name, entry in data["benchmarks"].items():
        assert "error" not in entry, f"{name} crashed: {entry.get('error')}"
        assert entry["tables"], name
    assert "targets:" in stdout and "JSON written to" in stdout


def test_answers_agree(report):
    data, _ = report
    kinds = [t["kind"] for e in data["benchmarks"].values() for t in e["targets"]]
    assert kinds.count("accuracy") >= 4
    for name, entry in data["benchmarks"].items():
        for t in entry["targets"]:
            if t["kind"] == "accuracy":
                assert t["passed"] is not False, f"{name}: {t['name']}: {t['detail']}"


def _rows(entry):
    d = entry["data"]
    if "runs" in d:                       # lorenz: rows per size
        return [r for rows in d["runs"].values() for r in rows]
    return d.get("rows", [])


def test_columns_ran_or_say_why(report):
    data, _ = report
    gl = _gl_available()
    allowed = ("not installed", "skipped", "import failed")   # a broken optional peer
    for name, entry in data["benchmarks"].items():
        for row in _rows(entry):
            status = row["status"]
            if status == "ok" or status.startswith(allowed):
                continue
            uses_gl = any(w in row["column"] for w in ("GLSL", "moderngl", "recompile",
                                                       "run_field", "fresh"))
            assert uses_gl and not gl, f"{name} / {row['column']}: {status}"


def test_reference_columns_always_run(report):
    data, _ = report
    lorenz = _rows(data["benchmarks"]["lorenz"])
    status = {r["column"]: r["status"] for r in lorenz}
    assert status["hand numpy RK4"] == "ok"
    assert status["VGPU numpy ref"] == "ok"
    for r in lorenz:
        if r["status"] == "ok":
            assert r["rate"] > 0 and r["err_f64"] <= 1e-3, r


def test_functions_benchmark_on_its_own(cpu, tmp_path, monkeypatch):
    """benchmarks/functions.py at tiny sizes: the cpu column and the hand numpy loop run
    and agree with the float64 loops and the closed forms."""
    from benchmarks import functions
    from benchmarks.common import Config
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    res = functions.run(Config(quick=True, columns=["cpu", "numpy"]))
    rows = res.data["rows"]
    assert {(r["problem"], r["column"]) for r in rows if r["status"] == "ok"} == {
        (p, c) for p in functions.PROBLEMS for c in ("VGPU cpu", "hand numpy")}
    assert all(r["ok"] for r in rows), [r["check"] for r in rows]
    assert "x hand numpy" in res.render()


def test_sensitivities_benchmark_on_its_own(cpu, tmp_path, monkeypatch):
    """benchmarks/sensitivities.py at tiny sizes on cpu: both methods run plain and with
    sensitivities, their states and steps bit-identical, and a state that differs in one
    bit is caught by the benchmark's check."""
    import numpy as np

    from benchmarks import sensitivities
    from benchmarks.common import Config
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    res = sensitivities.run(Config(quick=True, columns=["cpu"]))
    rows = res.data["runs"][str(sensitivities.QUICK_N[0])]
    assert [r["backend"] for r in rows] == ["cpu", "cpu"]
    for r in rows:
        assert r["status"] == "ok" and r["identical"] and r["sens_finite"], r
        assert r["plain_s"] > 0 and r["sens_s"] > 0 and r["ratio"] > 0
    acc = [t for t in res.targets if t.kind == "accuracy"]
    assert len(acc) == 1 and acc[0].passed is True, acc
    assert "VGPU cpu ratio" in res.render()
    h = np.ones((4, 3), np.float32)
    steps = np.full(4, 10)
    s = np.zeros((4, 3, 3), np.float32)
    sensitivities.check_identical("same", (h, steps, None), (h.copy(), steps, s))
    off = h.copy()
    off[2, 1] = np.nextafter(off[2, 1], np.float32(2))
    with pytest.raises(AssertionError, match="states"):
        sensitivities.check_identical("one bit", (h, steps, None), (off, steps, s))
    with pytest.raises(AssertionError, match="steps"):
        sensitivities.check_identical("steps", (h, steps, None), (h, steps + 1, s))
