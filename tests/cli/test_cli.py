"""vgpuc, through a real subprocess: compile, run, check, ir, cache, info.

Each call runs ``python -m vgpu_compiler.cli`` with VGPU_CACHE_DIR in a
temporary folder, and checks the exit status, stdout and stderr (never a
traceback for a user's mistake).
"""
from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import vgpu
from vgpu_compiler.call import progress as call_progress
from vgpu_compiler.cli.main import parse_args as parse_cli_args

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _gl_available() -> bool:
    try:
        from vgpu_compiler.backends.glsl import runner as glsl_runner
    except ImportError:
        return False
    return bool(glsl_runner.available())


needs_gl = pytest.mark.skipif(not _gl_available(), reason="no OpenGL 4.3 context")


@pytest.fixture
def vgpuc(tmp_path):
    """Run vgpuc; returns the CompletedProcess (text mode)."""
    cache = tmp_path / "cache"

    def call(*args, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env["VGPU_CACHE_DIR"] = str(cache)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        full_env.pop("VGPU_DEBUG", None)
        full_env.update(env or {})
        proc = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", *map(str, args)],
                              capture_output=True, text=True, env=full_env,
                              cwd=cwd or tmp_path, timeout=300)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    call.cache = cache
    return call


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- help and usage ---------------------------------------------------------------
def test_help_lists_every_command(vgpuc):
    proc = vgpuc("--help")
    assert proc.returncode == 0
    for cmd in ("compile", "run", "check", "ir", "cache", "info"):
        assert cmd in proc.stdout


def test_run_help_documents_the_default_h0(vgpuc):
    proc = vgpuc("run", "--help")
    assert proc.returncode == 0
    assert "standard-normal" in proc.stdout and "--seed" in proc.stdout


def test_unknown_option_is_a_usage_error(vgpuc):
    proc = vgpuc("run", EXAMPLES / "scale.field", "--no-such-option")
    assert proc.returncode == 2
    assert "usage:" in proc.stderr


def test_python_m_vgpu_compiler_is_vgpuc(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "vgpu_compiler", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "compile" in proc.stdout


# --- compile and ir ------------------------------------------------------------------
def test_compile_prints_glsl(vgpuc):
    proc = vgpuc("compile", EXAMPLES / "lorenz.field")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().startswith("#version") or "#version" in proc.stdout


def test_compile_writes_a_file(vgpuc, tmp_path):
    out = tmp_path / "lorenz.comp"
    proc = vgpuc("compile", EXAMPLES / "lorenz.field", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "#version" in out.read_text()


def test_compile_is_deterministic(vgpuc):
    first = vgpuc("compile", EXAMPLES / "kuramoto.field").stdout
    assert first and first == vgpuc("compile", EXAMPLES / "kuramoto.field").stdout


def test_compile_emit_ir_equals_ir(vgpuc):
    a = vgpuc("compile", EXAMPLES / "vanderpol.field", "--emit", "ir")
    b = vgpuc("ir", EXAMPLES / "vanderpol.field")
    assert a.returncode == b.returncode == 0
    assert a.stdout.strip() == b.stdout.strip()
    assert "vanderpol" in b.stdout


OBSERVING = """
field osc {
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -y
    observe vmax = peak(v)
    observe cross = first(y < 0)
    solve rk4(dt = 0.01, steps = 100)
}
"""


def test_compile_emits_the_kernel_with_its_observers(vgpuc, tmp_path):
    """--emit prints what the backend runs: the observers as hidden states (here the cpu
    backend's C, the one it compiles for a call; cuda's and glsl's too: every built-in
    backend computes every observer, and test_observers checks the refusal of one that
    does not)."""
    from vgpu_compiler.backends.cpu import kernel
    from vgpu_compiler.cli.common import compile_source, select_field
    from vgpu_compiler.ir import observers
    src = write(tmp_path, "osc.field", OBSERVING)
    c = vgpuc("compile", src, "--emit", "c")
    assert c.returncode == 0, c.stderr
    lowered = observers.lower(select_field(compile_source(OBSERVING, "osc.field"), None))
    assert c.stdout.rstrip("\n") == kernel.source(lowered.field, "float32")[0].rstrip("\n")
    assert "observed_vmax" in c.stdout and "observed_cross" in c.stdout
    cuda = vgpuc("compile", src, "--emit", "cuda")      # (cuda computes them too)
    assert cuda.returncode == 0, cuda.stderr
    assert "observed_vmax" in cuda.stdout and "observed_cross" in cuda.stdout
    glsl = vgpuc("compile", src, "--emit", "glsl")      # (first: the events' kernel)
    assert glsl.returncode == 0, glsl.stderr
    assert "observed_vmax" in glsl.stdout and "observed_cross" in glsl.stdout
    assert "vg_fhit" in glsl.stdout


def test_ir_selects_a_field(vgpuc, tmp_path):
    src = write(tmp_path, "two.field", TWO_FIELDS)
    both = vgpuc("ir", src)
    assert both.returncode == 0, both.stderr
    assert "first" in both.stdout and "second" in both.stdout
    one = vgpuc("ir", src, "--field", "second")
    assert one.returncode == 0
    assert "second" in one.stdout and "first" not in one.stdout


TWO_FIELDS = """\
field first {
    state x
    dx/dt = -x
    solve euler(dt = 0.1, steps = 10)
}
field second {
    state y
    dy/dt = y
    solve rk4(dt = 0.1, steps = 10)
}
"""


# --- check ---------------------------------------------------------------------------
BAD = """\
field bad {
    param k = 1.0
    state x
    dx/dt = k * x + undefined_name
    solve euler(dt = 0.1, steps = 10)
}
"""


def test_check_clean_files(vgpuc):
    files = [EXAMPLES / f for f in ("lorenz.field", "matmul.field", "histogram.field")]
    proc = vgpuc("check", *files)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_check_reports_file_line_col_and_caret(vgpuc, tmp_path):
    path = write(tmp_path, "bad.field", BAD)
    proc = vgpuc("check", "bad.field", cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    col = BAD.splitlines()[3].index("undefined_name") + 1
    assert re.match(rf"^bad\.field:4:{col}: error: .+", lines[0]), proc.stderr
    assert "undefined_name" in lines[0]
    assert lines[1].strip() == BAD.splitlines()[3].strip()
    caret = lines[2]
    assert caret.strip().startswith("^")
    # the caret stands under the column, in the same indentation as the source line
    assert caret.index("^") - lines[1].index("dx") == col - 1 - BAD.splitlines()[3].index("dx")
    assert path.exists()


def test_check_syntax_error_has_a_location(vgpuc, tmp_path):
    write(tmp_path, "syn.field", "field s {\n    state x\n    dx/dt = (x +\n}\n")
    proc = vgpuc("check", "syn.field", cwd=tmp_path)
    assert proc.returncode == 1
    assert re.match(r"^syn\.field:\d+:\d+: error: ", proc.stderr), proc.stderr


def test_check_mixed_files(vgpuc, tmp_path):
    write(tmp_path, "bad.field", BAD)
    proc = vgpuc("check", EXAMPLES / "scale.field", "bad.field", cwd=tmp_path)
    assert proc.returncode == 1
    assert "scale.field: ok" in proc.stdout
    assert proc.stderr.startswith("bad.field:4:")


def test_check_missing_file_is_a_usage_error(vgpuc, tmp_path):
    proc = vgpuc("check", "nope.field", cwd=tmp_path)
    assert proc.returncode == 2
    assert "nope.field" in proc.stderr


def test_check_needs_a_file(vgpuc):
    assert vgpuc("check").returncode == 2


# --- run -------------------------------------------------------------------------------
def test_run_npy_in_and_out_matches_run_field(vgpuc, tmp_path):
    h0 = np.random.default_rng(1).normal(size=(64, 3)).astype(np.float32)
    np.save(tmp_path / "h0.npy", h0)
    proc = vgpuc("run", EXAMPLES / "lorenz.field", "--h0", "h0.npy", "--steps", "200",
                 "--backend", "numpy", "-o", "out.npy")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out.npy")
    want = vgpu.run_field(vgpu.load(EXAMPLES / "lorenz.field"), h0, steps=200, backend="numpy")
    assert got.shape == (64, 3)
    np.testing.assert_array_equal(got, want)


@needs_gl
def test_run_on_glsl_agrees_with_numpy(vgpuc, tmp_path):
    h0 = np.random.default_rng(2).normal(size=(128, 2)).astype(np.float32)
    np.save(tmp_path / "h0.npy", h0)
    proc = vgpuc("run", EXAMPLES / "vanderpol.field", "--h0", "h0.npy", "--steps", "300",
                 "--backend", "glsl", "-o", "out.npy")
    assert proc.returncode == 0, proc.stderr
    want = vgpu.run_field(vgpu.load(EXAMPLES / "vanderpol.field"), h0, steps=300,
                          backend="numpy")
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-4, atol=1e-4)


def test_run_npz_holds_everything(vgpuc, tmp_path):
    n = 50
    mu = np.linspace(0.0, 3.0, n).astype(np.float32)
    h0 = np.tile(np.float32([2.0, 0.0]), (n, 1))
    np.save(tmp_path / "mu.npy", mu)
    np.save(tmp_path / "h0.npy", h0)
    proc = vgpuc("run", EXAMPLES / "vanderpol.field", "--h0", "h0.npy", "--param", "mu=mu.npy",
                 "--steps", "250", "--save-every", "100", "--backend", "numpy", "-o", "out.npz")
    assert proc.returncode == 0, proc.stderr
    want = vgpu.solve(vgpu.load(EXAMPLES / "vanderpol.field"), h0, params={"mu": mu},
                      steps=250, save_every=100, backend="numpy")
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["states"], want.states)
        np.testing.assert_array_equal(out["steps_taken"], want.steps_taken)
        np.testing.assert_array_equal(out["history"], want.history)
        np.testing.assert_array_equal(out["times"], want.times)
        assert out["history"].shape[0] == 4      # steps 0, 100, 200, 250


def test_run_scalar_param_and_dt(vgpuc, tmp_path):
    x = np.arange(5, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = vgpuc("run", EXAMPLES / "scale.field", "--h0", "x.npy", "--param", "s=0.5",
                 "--backend", "numpy", "-o", "y.npy")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x * 0.5)


def test_run_inputs_matmul(vgpuc, tmp_path):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 5)).astype(np.float32)
    b = rng.normal(size=(5, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "ab.npz", B=b)
    proc = vgpuc("run", EXAMPLES / "matmul.field", "--input", "A=a.npy", "--input", "B=ab.npz",
                 "-o", "c.npy", "--quiet")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), a @ b, rtol=1e-5, atol=1e-5)


def test_run_outputs_go_into_the_npz(vgpuc, tmp_path):
    proc = vgpuc("run", EXAMPLES / "histogram.field", "--dim", "N=1000", "-o", "h.npz")
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "h.npz") as out:
        assert out["counts"].shape == (32,)
        assert out["counts"].sum() == pytest.approx(1000)
        x = out["states"][:, 0].astype(np.float64)
        w = 1.0 + 2.0 * np.arange(1000) / 1000          # the sweep of the example
        np.testing.assert_allclose(x, np.cos(20 * w), atol=2e-3)   # the closed form
        expected = np.histogram(np.clip(x, -1, 1), bins=32, range=(-1, 1))[0]
        assert np.abs(out["counts"] - expected).sum() <= 2


def test_run_default_h0_is_seeded_standard_normal(vgpuc, tmp_path):
    proc = vgpuc("run", EXAMPLES / "scale.field", "--dim", "N=10", "--seed", "3",
                 "--backend", "numpy", "-o", "y.npy")
    assert proc.returncode == 0, proc.stderr
    h0 = np.random.default_rng(3).standard_normal(10).astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), 2.0 * h0, rtol=1e-6)


def test_run_default_h0_for_several_states(vgpuc, tmp_path):
    proc = vgpuc("run", EXAMPLES / "lorenz.field", "--dim", "N=16", "--steps", "10",
                 "--backend", "numpy", "-o", "out.npy")
    assert proc.returncode == 0, proc.stderr
    h0 = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
    want = vgpu.run_field(vgpu.load(EXAMPLES / "lorenz.field"), h0, steps=10, backend="numpy")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want)


def test_run_without_h0_or_size_says_what_to_give(vgpuc):
    proc = vgpuc("run", EXAMPLES / "lorenz.field")
    assert proc.returncode == 2
    assert "--h0" in proc.stderr and "--dim N=" in proc.stderr


def test_run_prints_a_summary_without_output(vgpuc, tmp_path):
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    proc = vgpuc("run", EXAMPLES / "scale.field", "--h0", "x.npy", "--backend", "numpy")
    assert proc.returncode == 0, proc.stderr
    assert "scale" in proc.stdout and "2." in proc.stdout


def test_run_bad_h0_shape_is_a_clean_error(vgpuc, tmp_path):
    np.save(tmp_path / "h0.npy", np.zeros((10, 2), np.float32))
    proc = vgpuc("run", EXAMPLES / "lorenz.field", "--h0", "h0.npy", "--backend", "numpy")
    assert proc.returncode == 1
    assert proc.stderr.strip() and len(proc.stderr.strip().splitlines()) <= 4


def test_run_missing_param_file_is_a_usage_error(vgpuc):
    proc = vgpuc("run", EXAMPLES / "scale.field", "--param", "s=missing.npy", "--dim", "N=3")
    assert proc.returncode == 2
    assert "missing.npy" in proc.stderr


@pytest.mark.parametrize("content", [b"", b"not an array", b"\x93NUMPY\x01\x00"])
def test_run_unreadable_input_file_is_a_usage_error(vgpuc, tmp_path, content):
    (tmp_path / "bad.npy").write_bytes(content)        # empty, text, a truncated header
    proc = vgpuc("run", EXAMPLES / "scale.field", "--h0", "bad.npy", "--backend", "numpy")
    assert proc.returncode == 2, proc.stderr
    assert "bad.npy: not a .npy or .npz file" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [
    ["--param", "novalue"],
    ["--dim", "N=ten"],
    ["-o", "out.txt", "--dim", "N=3"],
    ["--save-every", "0", "--dim", "N=3"],
])
def test_run_bad_options_are_usage_errors(vgpuc, args):
    proc = vgpuc("run", EXAMPLES / "scale.field", *args)
    assert proc.returncode == 2, proc.stderr
    assert "error" in proc.stderr


def test_run_missing_field_file(vgpuc):
    proc = vgpuc("run", "nope.field")
    assert proc.returncode == 2
    assert "nope.field" in proc.stderr


def test_run_error_in_program_exits_1_with_location(vgpuc, tmp_path):
    write(tmp_path, "bad.field", BAD)
    proc = vgpuc("run", "bad.field", "--dim", "N=4")
    assert proc.returncode == 1
    assert proc.stderr.startswith("bad.field:4:")


def test_run_plot(vgpuc, tmp_path):
    pytest.importorskip("matplotlib")
    np.save(tmp_path / "h0.npy", np.tile(np.float32([2.0, 0.0]), (20, 1)))
    proc = vgpuc("run", EXAMPLES / "vanderpol.field", "--h0", "h0.npy", "--steps", "200",
                 "--save-every", "20", "--backend", "numpy", "--plot", "p.png", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def _png_width(path) -> int:
    data = pathlib.Path(path).read_bytes()
    assert data[:4] == b"\x89PNG"
    return int.from_bytes(data[16:20], "big")


def test_run_plot_draws_a_histogram_output_as_bars(vgpuc, tmp_path):
    pytest.importorskip("matplotlib")
    proc = vgpuc("run", EXAMPLES / "histogram.field", "--dim", "N=2000", "--backend", "numpy",
                 "--plot", "h.png", "-q")
    assert proc.returncode == 0, proc.stderr
    proc = vgpuc("run", EXAMPLES / "scale.field", "--dim", "N=20", "--backend", "numpy",
                 "--plot", "s.png", "-q")
    assert proc.returncode == 0, proc.stderr
    assert _png_width(tmp_path / "h.png") == 2 * _png_width(tmp_path / "s.png")  # + a panel


def test_plot_bars_are_the_one_dimensional_outputs(monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes
    from vgpu_compiler.cli import plot

    drawn = []
    real = Axes.bar
    monkeypatch.setattr(Axes, "bar", lambda ax, x, h, **kw: drawn.append(list(h)) or
                        real(ax, x, h, **kw))
    counts = np.array([3.0, 0.0, 5.0, 1.0])
    plot.plot_solution(str(tmp_path / "p.png"), np.zeros((9, 2)), ["x", "v"],
                       outputs={"counts": counts, "table": np.ones((2, 2))})
    assert drawn == [counts.tolist()]


def test_run_plot_without_matplotlib_fails_before_running(vgpuc, tmp_path):
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    path = os.pathsep.join([str(tmp_path / "fake"), str(REPO)])
    proc = vgpuc("run", EXAMPLES / "scale.field", "--dim", "N=4", "--plot", "p.png",
                 "-o", "y.npy", env={"PYTHONPATH": path})
    assert proc.returncode == 1
    assert "pip install vgpu[plot]" in proc.stderr
    assert not (tmp_path / "y.npy").exists()


def test_run_nonfinite_is_one_warning_line(vgpuc, tmp_path):
    write(tmp_path, "blow.field",
          "field blow {\n  state x\n  dx/dt = x * x\n  solve euler(dt = 1, steps = 20)\n}\n")
    np.save(tmp_path / "x.npy", np.float32([0.0, -0.5, 3.0]))
    proc = vgpuc("run", "blow.field", "--h0", "x.npy", "-o", "y.npy")
    assert proc.returncode == 0, proc.stderr
    assert "vgpuc: warning: 1 of 3 trajectories became NaN or infinite" in proc.stderr


def test_run_index_error_names_the_line(vgpuc, tmp_path):
    write(tmp_path, "oob.field", "field oob {\n  input A[K]\n  grid i < N\n  state x = 0\n"
                                 "  dx/dt = A[i]\n  solve euler(dt = 1, steps = 2)\n}\n")
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    for backend in ("numpy", "auto"):
        proc = vgpuc("run", "oob.field", "--input", "A=a.npy", "--dim", "N=5",
                     "--backend", backend, "-q")
        assert proc.returncode == 1
        assert proc.stderr.startswith("oob.field:5:11: error: index out of range"), proc.stderr


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    from vgpu_compiler.cli import plot
    from vgpu_compiler.errors import VgpuError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(VgpuError, match=r"pip install vgpu\[plot\]"):
        plot.plot_solution(str(tmp_path / "p.png"), np.zeros((3, 2)), ["x", "y"])


# --- cache and info -------------------------------------------------------------------
@needs_gl
def test_cache_info_and_clear(vgpuc, tmp_path):
    np.save(tmp_path / "x.npy", np.ones(8, np.float32))
    assert vgpuc("run", EXAMPLES / "scale.field", "--h0", "x.npy", "--backend", "glsl",
                 "-q").returncode == 0
    info = vgpuc("cache", "info")
    assert info.returncode == 0, info.stderr
    assert str(vgpuc.cache) in info.stdout
    cleared = vgpuc("cache", "clear")
    assert cleared.returncode == 0, cleared.stderr
    assert "clear" in cleared.stdout
    assert not any(p.is_file() for p in vgpuc.cache.rglob("*")
                   if not p.name.startswith("."))


def test_cache_needs_an_action(vgpuc):
    assert vgpuc("cache").returncode == 2
    assert vgpuc("cache", "wipe").returncode == 2


def test_info(vgpuc):
    proc = vgpuc("info")
    assert proc.returncode == 0, proc.stderr
    if _gl_available():
        for word in ("renderer", "version", "max shared memory", "max workgroup",
                     "max storage block size", "fp64", "float atomics"):
            assert word in proc.stdout
    else:
        assert "no OpenGL 4.3 context: the numpy backend will be used" in proc.stdout


def test_info_without_gl(vgpuc):
    proc = vgpuc("info", env={"VGPU_NO_GL": "1", "VGPU_NO_WGPU": "1", "VGPU_NO_CPU": "1"})
    assert proc.returncode == 0
    assert proc.stdout.startswith("no OpenGL 4.3 context: the numpy backend will be used")
    proc = vgpuc("info", env={"VGPU_NO_GL": "1", "VGPU_NO_CPU": "1"})
    if "wgpu     available" in proc.stdout:      # auto's next backend, named
        assert proc.stdout.startswith("no OpenGL 4.3 context: the wgpu backend will be used")


# --- the progress bar ------------------------------------------------------------------
# tests/call/test_progress.py tests the bar itself; these test that `vgpuc run` draws one,
# in process (a subprocess's stderr is never a terminal), with DELAY 0 so it draws.
class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _run_on_a_terminal(monkeypatch, tmp_path, *extra):
    stderr = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(call_progress, "DELAY", 0.0)
    args = parse_cli_args(["run", str(EXAMPLES / "lorenz.field"), "--dim", "N=4",
                            "--steps", "300", "--backend", "numpy",
                            "-o", str(tmp_path / "out.npy"), *extra])
    assert args.func(args) == 0
    return stderr.getvalue()


def test_run_draws_one_progress_bar_on_a_terminal(monkeypatch, tmp_path):
    text = _run_on_a_terminal(monkeypatch, tmp_path)
    redraws = [part for part in text.replace("\n", "\r").split("\r") if part]
    assert redraws and all(part.startswith("lorenz:") for part in redraws)
    assert "300/300" in redraws[-1] and "steps/s" in redraws[-1]
    assert text.endswith("\n") and text.count("\n") == 1       # one bar, its line ended
    assert np.load(tmp_path / "out.npy").shape == (4, 3)


def test_run_quiet_draws_no_progress_bar(monkeypatch, tmp_path):
    assert _run_on_a_terminal(monkeypatch, tmp_path, "--quiet") == ""


def test_run_chains_an_npz_and_names_entries(vgpuc, tmp_path):
    first = vgpuc("run", EXAMPLES / "lorenz.field", "--dim", "N=8", "--steps", "5",
                  "--backend", "numpy", "-o", "r1.npz")
    assert first.returncode == 0, first.stderr
    again = vgpuc("run", EXAMPLES / "lorenz.field", "--h0", "r1.npz", "--steps", "5",
                  "--backend", "numpy", "-o", "r2.npy")           # takes r1.npz["states"]
    assert again.returncode == 0, again.stderr
    with np.load(tmp_path / "r1.npz") as r1:
        want = vgpu.run_field(vgpu.load(EXAMPLES / "lorenz.field"), r1["states"], steps=5,
                              backend="numpy")
    np.testing.assert_array_equal(np.load(tmp_path / "r2.npy"), want)
    wrong = vgpuc("run", EXAMPLES / "lorenz.field", "--h0", "r1.npz:nope")
    assert wrong.returncode == 2
    assert "r1.npz:NAME" in wrong.stderr


# --- errors in the CLI's words -------------------------------------------------------
# Python spellings that must never reach a vgpuc user (`--h0` is fine, a bare `h0` not).
PYTHON_WORDS = re.compile(r"(?<![-\w])(params|inputs|dims|field|backend|dtype|steps|dt|t0|"
                          r"save_every)=|(?<![-\w])(h0|save_every)\b|dims\[")

NEEDS = ("field needs {\n param k\n input w[N]\n output H[B]\n state x\n"
         " dx/dt = -k * x + w[i]\n solve euler(dt = 0.1, steps = 2)\n"
         " flux H[0] += x\n}\n")
ALL_START = ("field s {\n grid i < N\n state x = 1\n dx/dt = -x\n"
             " solve euler(dt = 1, steps = 1)\n}\n")
DT_FROM_K = "field d {\n param k = 0.1\n state x\n dx/dt = -x\n solve euler(dt = k, steps = 2)\n}\n"
SIN64 = "field s {\n state x\n dx/dt = sin(x)\n solve euler(dt = 1, steps = 1)\n}\n"

CLI_SPELLINGS = {
    "field": (("two.field",), ("run", "two.field", "--dim", "N=2"), "choose one with --field NAME"),
    "field-compile": ((), ("compile", "two.field"), "choose one with --field NAME"),
    "unknown param": ((), ("run", EXAMPLES / "scale.field", "--dim", "N=3", "--param", "nu=1"),
                      "unknown name 'nu' in --param; valid names: s"),
    "unknown input": ((), ("run", "needs.field", "--h0", "x.npy", "--input", "Q=x.npy"),
                      "unknown name 'Q' in --input; valid names: w"),
    "unknown dim": ((), ("run", EXAMPLES / "scale.field", "--dim", "N=3", "--dim", "Q=3"),
                    "unknown name 'Q' in --dim; valid names: N"),
    "missing param": ((), ("run", "needs.field", "--h0", "x.npy", "--input", "w=x.npy",
                           "--dim", "B=1"),
                      "pass --param k=VALUE"),
    "missing input": ((), ("run", "needs.field", "--h0", "x.npy", "--param", "k=1"),
                      "pass --input w=FILE.npy"),
    "missing dim": ((), ("run", "needs.field", "--h0", "x.npy", "--param", "k=1",
                         "--input", "w=x.npy"), "pass --dim B=..."),
    "h0 shape": ((), ("run", EXAMPLES / "lorenz.field", "--h0", "x.npy"),
                 "--h0 must have shape (N, 3)"),
    "h0 not needed": ((), ("run", "all.field", "--h0", "x.npy"),
                      "--h0 was given, but every state of field s has a start expression"),
    "dims disagree": ((), ("run", EXAMPLES / "scale.field", "--h0", "x.npy", "--dim", "N=5"),
                      "dim N is 5 from --dim but 4 from --h0 (axis 0)"),
    "dt finite": ((), ("run", EXAMPLES / "scale.field", "--dim", "N=3", "--dt", "inf"),
                  "--dt must be finite, got inf"),
    "steps int32": ((), ("run", EXAMPLES / "scale.field", "--dim", "N=3", "--steps",
                         "99999999999"), "--steps must be an int >= 0"),
    "save-every int32": ((), ("run", EXAMPLES / "scale.field", "--dim", "N=3",
                              "--save-every", "99999999999"), "--save-every must be an int >= 1"),
    "dt from a per-trajectory param": ((), ("run", "dt.field", "--h0", "x.npy", "--param",
                                            "k=x.npy"), "or give --dt"),
    "float64 on glsl": ((), ("compile", "sin64.field", "--dtype", "float64"),
                        "use --dtype float32, or --backend "),   # the fastest with float64
}


@pytest.mark.parametrize("case", sorted(CLI_SPELLINGS))
def test_errors_name_the_cli_options(vgpuc, tmp_path, case):
    for name, text in (("two.field", TWO_FIELDS), ("needs.field", NEEDS),
                       ("all.field", ALL_START), ("dt.field", DT_FROM_K),
                       ("sin64.field", SIN64)):
        write(tmp_path, name, text)
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    _, args, expected = CLI_SPELLINGS[case]
    proc = vgpuc(*args, "--backend" if args[0] == "run" else "--dtype",
                 "numpy" if args[0] == "run" else "float64")
    assert proc.returncode == 1, proc.stderr
    assert expected in proc.stderr
    assert not PYTHON_WORDS.search(proc.stderr), proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(("two.field", "needs.field", "all.field", "dt.field",
                             "sin64.field:3:10: error: ", str(EXAMPLES))), proc.stderr
    assert expected in first


def test_fallback_warnings_name_the_cli_options(vgpuc, tmp_path):
    write(tmp_path, "sin64.field", SIN64)
    # without a C compiler the cpu backend (which runs float64 sin) is not there: auto tries
    # GLSL, which cannot run float64 sin, and says so in the CLI's words
    proc = vgpuc("run", "sin64.field", "--dtype", "float64", "--dim", "N=3", "-q",
                 env={"VGPU_CC": "/nonexistent/cc"})
    assert proc.returncode == 0, proc.stderr
    assert "vgpuc: warning: the CPU backend is not available" in proc.stderr
    if _gl_available():
        assert "vgpuc: warning: the GLSL backend cannot run this" in proc.stderr
        assert "use --dtype float32, or --backend numpy" in proc.stderr
    assert not PYTHON_WORDS.search(proc.stderr), proc.stderr


def test_python_errors_keep_python_words():
    with pytest.raises(vgpu.UnknownNameError, match=r"in params=; valid names: s"):
        vgpu.run_field(vgpu.load(EXAMPLES / "scale.field"), np.ones(3), params={"nu": 1})
    with pytest.raises(vgpu.UnknownNameError, match=r"choose one with field=NAME"):
        vgpu.run_field(TWO_FIELDS, np.ones(3))
    with pytest.raises(vgpu.MissingError, match=r"pass params=\{'k': value\}"):
        vgpu.run_field(NEEDS, np.ones(4), inputs={"w": np.ones(4)}, dims={"B": 1})
    with pytest.raises(vgpu.ArgumentTypeError, match=r"^dt must be finite"):
        vgpu.run_field(DT_FROM_K, np.ones(4), dt=float("inf"))


def test_glsl_unavailable_names_the_reason_and_the_option(vgpuc):
    proc = vgpuc("run", EXAMPLES / "scale.field", "--dim", "N=3", "--backend", "glsl",
                 env={"VGPU_NO_GL": "1"})
    assert proc.returncode == 1
    assert "VGPU_NO_GL" in proc.stderr and "use --backend numpy" in proc.stderr
    auto = vgpuc("run", EXAMPLES / "scale.field", "--dim", "N=3", "-q",
                 env={"VGPU_NO_GL": "1", "VGPU_NO_WGPU": "1", "VGPU_NO_CPU": "1",
                      "VGPU_NO_CUDA": "1"})
    assert auto.returncode == 0, auto.stderr
    # one warning per backend auto moved past: cpu, GLSL and wgpu (all switched off);
    # cuda, for hardware most machines lack, is passed without one (Backend.absent_quietly)
    assert auto.stderr.count("vgpuc: warning:") == 3 and "VGPU_NO_GL" in auto.stderr
    assert "VGPU_NO_CUDA" not in auto.stderr and "cuda" not in auto.stderr.lower()
    assert auto.stderr.count("VGPU_NO_WGPU") == 1
    assert auto.stderr.count("VGPU_NO_CPU") == 1


def test_glsl_unavailable_from_python_names_the_reason(tmp_path):
    code = ("import logging, numpy as np, vgpu\n"
            "logging.basicConfig(format='%%(message)s')\n"
            "src = vgpu.load(%r)\n"
            "vgpu.run_field(src, np.ones(3))\n"
            "try:\n    vgpu.run_field(src, np.ones(3), backend='glsl')\n"
            "except vgpu.BackendError as e:\n    print(e)\n") % str(EXAMPLES / "scale.field")
    env = dict(os.environ, VGPU_NO_GL="1", VGPU_NO_WGPU="1", VGPU_NO_CPU="1",
               PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "VGPU_NO_GL is set" in proc.stdout and "use backend='numpy'" in proc.stdout
    assert "VGPU_NO_GL is set" in proc.stderr and "numpy reference backend" in proc.stderr


# --- usage in the subcommand's own words -----------------------------------------------
def test_an_unknown_option_shows_the_subcommands_usage(vgpuc):
    proc = vgpuc("run", EXAMPLES / "scale.field", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: vgpuc run ")
    assert "vgpuc run: error: unrecognized arguments: --bogus" in proc.stderr


def test_cache_without_an_action_says_which(vgpuc):
    proc = vgpuc("cache")
    assert proc.returncode == 2
    assert "vgpuc cache info" in proc.stderr and "vgpuc cache clear" in proc.stderr
    assert "arguments are required" not in proc.stderr


@pytest.mark.parametrize("command", ["ir", "cache", "info"])
def test_every_command_has_a_description(vgpuc, command):
    proc = vgpuc(command, "--help")
    assert proc.returncode == 0
    usage, _, rest = proc.stdout.partition("\n\n")
    assert rest and not rest.startswith(("positional", "options")), proc.stdout


@pytest.mark.parametrize("command", ["run", "compile"])
def test_dtype_and_backend_have_help(vgpuc, command):
    text = " ".join(vgpuc(command, "--help").stdout.split())
    assert "--dtype {float32,float64} the working float type" in text
    if command == "run":
        assert "--backend {auto,cuda,glsl,wgpu,cpu,numpy} cuda: NVIDIA GPUs (CUDA C++ " \
            "through NVRTC); glsl: OpenGL compute shaders; wgpu: WGSL" in text


def test_a_dim_too_large_is_a_usage_error(vgpuc):
    proc = vgpuc("run", EXAMPLES / "lorenz.field", "--dim", "N=99999999999")
    assert proc.returncode == 2
    assert "--dim N: 99999999999 is larger than the largest size" in proc.stderr


def test_a_default_h0_too_large_for_memory_is_a_usage_error(tmp_path):
    resource = pytest.importorskip("resource")
    limit = 1536 << 20      # 1.5 GiB of address space; the draw needs 2.2 GiB (float64)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "run",
                           str(EXAMPLES / "lorenz.field"), "--dim", "N=100000000",
                           "--backend", "numpy"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path,
                          preexec_fn=cap, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert ("the default h0 of field 'lorenz', shape (100000000, 3), needs 2.2 GiB and "
            "does not fit in memory") in proc.stderr


def test_run_seed_is_the_noise_seed(vgpuc, tmp_path):
    """`vgpuc run --seed` keys a stochastic field's noise (the same as seed= in Python)."""
    src = write(tmp_path, "z.field", "field z {\n noise xi\n state x = 0\n dx/dt = xi\n"
                " solve euler(dt = 1, steps = 1)\n}\n")
    outs = []
    for seed in (3, 3, 4):
        out = tmp_path / f"z{len(outs)}.npy"
        proc = vgpuc("run", src, "--dim", "N=64", "--backend", "numpy", "--seed", seed, "-o", out)
        assert proc.returncode == 0, proc.stderr
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])
    want = vgpu.run_field(src.read_text(), dims={"N": 64}, backend="numpy", seed=3)
    np.testing.assert_array_equal(outs[0], want)
