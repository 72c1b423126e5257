"""Which backend ran, where a user looks: `make demo` (examples/demo.py), the last line
of `vgpuc run`, and `vgpuc compile --emit c`, the C the cpu backend compiles (the
kernel `auto` runs on a machine without a GPU)."""
from __future__ import annotations

import importlib.util
import io
import pathlib

import numpy as np
import pytest

import vgpu
from vgpu_compiler.cli.main import main

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
LORENZ = EXAMPLES / "lorenz.field"


def _last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_vgpuc_run_names_the_backend_that_ran(backend, capsys, tmp_path):
    out = tmp_path / "out.npy"
    code = main(["run", str(LORENZ), "--dim", "N=64", "--steps", "20",
                 "--backend", backend, "-o", str(out)])
    assert code == 0
    line = _last_line(capsys)
    h0 = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    ran = vgpu.solve(vgpu.load(LORENZ), h0, steps=20, backend=backend).backend
    assert backend != "numpy" or ran == "numpy"
    assert line.startswith("status: 64 reached the end (of 64); steps taken 20..20")
    assert line.endswith(f"; on the {ran} backend"), line


def test_the_summary_without_output_names_the_backend_too(capsys, tmp_path):
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    assert main(["run", str(EXAMPLES / "scale.field"), "--h0", str(tmp_path / "x.npy"),
                 "--backend", "numpy"]) == 0
    assert _last_line(capsys).endswith("; on the numpy backend")


def test_a_cluster_run_counts_the_blocks_per_backend():
    from vgpu_compiler.cli.run import backend_words
    names = np.array(["glsl", "cpu", "glsl"], dtype=object)
    assert backend_words(names) == "; on cpu (1 blocks), glsl (2 blocks)"
    assert backend_words(None) == ""


def _demo():
    spec = importlib.util.spec_from_file_location("vgpu_demo", EXAMPLES / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_demo_says_which_backend_ran():
    out = io.StringIO()
    ran = _demo().main(n=256, out=out)
    text = out.getvalue()
    h0 = np.tile(np.float32([1, 0, 0]), (256, 1))
    want = vgpu.solve(vgpu.load(LORENZ), h0, params={"rho": np.linspace(0, 21, 256)},
                      dt=0.001, steps=10).backend            # what auto runs here
    assert ran == want
    assert f"  backend: {want}  (backend=auto runs on {want} " in text
    assert text.rstrip().endswith(f"demo OK (on the {want} backend)")


def test_the_makefile_does_not_name_a_backend_for_the_demo():
    """The demo runs where auto chooses; the Makefile's comment must not promise GLSL."""
    comment = [line for line in (REPO / "Makefile").read_text().splitlines()
               if line.startswith("#")]
    demo = " ".join(comment)
    assert "make demo" in demo and "on GLSL" not in demo and "auto" in demo


# --- vgpuc compile --emit c ---------------------------------------------------------------
FIELD = """field emit_c_check {
    param k = 0.75
    state x, y
    dx/dt = y
    dy/dt = -k * x + 0.125 * y
    solve rk4(dt = 0.01, steps = 40)
}
"""


def test_compile_emit_c_prints_the_c_the_cpu_backend_compiles(cpu, capsys, tmp_path,
                                                             monkeypatch):
    """The text of --emit c is the kernel a cpu run compiles (what the compiler is
    given), and the one library the run leaves in the disk cache."""
    from vgpu_compiler.backends.cpu import kernel, toolchain
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "f.field"
    src.write_text(FIELD)
    assert main(["compile", str(src), "--emit", "c"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("// VGPU field `emit_c_check` (float32)")
    assert "vg_kernel" in text and "#version" not in text
    compiled = []
    real = toolchain._compile
    monkeypatch.setattr(toolchain, "_compile",
                        lambda source, *a: (compiled.append(source), real(source, *a))[1])
    kernel.clear_memory()
    h0 = np.random.default_rng(0).standard_normal((100, 2)).astype(np.float32)
    got = vgpu.run_field(FIELD, h0, backend="cpu")
    np.testing.assert_array_equal(got, vgpu.run_field(FIELD, h0, backend="numpy"))
    assert compiled == [text]
    built = sorted(p.name for p in (tmp_path / "cache" / "cpu").glob("*.so"))
    assert len(built) == 1 and built[0].startswith("field-"), built


def test_compile_emit_c_follows_dtype_and_per_trajectory(capsys, tmp_path):
    src = tmp_path / "f.field"
    src.write_text(FIELD)
    out = {}
    for extra in ((), ("--dtype", "float64"), ("--per-trajectory", "k")):
        assert main(["compile", str(src), "--emit", "c", *extra]) == 0
        out[extra] = capsys.readouterr().out
    assert "(float64)" in out[("--dtype", "float64")].splitlines()[0]
    assert len(set(out.values())) == 3


def test_compile_emit_c_of_an_adaptive_field_and_a_refusal(capsys, tmp_path):
    assert main(["compile", str(EXAMPLES / "vanderpol_adaptive.field"), "--emit", "c"]) == 0
    assert "vg_kernel" in capsys.readouterr().out
    big = tmp_path / "big.field"
    n = 300
    big.write_text("field big {\n state " + ", ".join(f"x{i}" for i in range(n)) + "\n"
                   + "".join(f" dx{i}/dt = -x{i}\n" for i in range(n))
                   + " solve euler(dt = 0.1, steps = 1)\n}\n")
    assert main(["compile", str(big), "--emit", "c"]) == 1
    err = capsys.readouterr().err
    assert "300 states" in err and "cpu" in err and "Traceback" not in err
