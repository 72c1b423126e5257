"""C lowering (the cpu backend): the printed kernel of some examples, byte for byte.

``pytest --update-golden`` rewrites tests/golden/*.c: a fixed-step field, a basin with
coupling, a stochastic field (its noise generator), and the adaptive kernels
(templates/adaptive.c.j2) of an adaptive method, of rodas4 and of a fixed-step method run for save_at, and of the event examples
(templates/events.c.j2: a fixed-step method with events runs in that kernel). The text is
the same on every machine (the
compiler's flags and the CPU are in the disk key, not in the text).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_compiler.backends.cpu import kernel
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
# (example, dtype, dense: a fixed-step method's kernel for save_at)
CASES = [("lorenz", "float32", False), ("kuramoto", "float32", False),
         ("lorenz_tsit5", "float64", False), ("vanderpol_adaptive", "float32", False),
         ("vanderpol", "float64", True), ("bouncing_ball", "float64", False),
         ("lif", "float32", False),
         ("ou", "float32", False),                     # noise: Philox and Box-Muller
         ("vanderpol_stiff", "float64", False)]        # rodas4 (shader/rosenbrock.py)


def emit(name: str, dtype: str, dense: bool) -> str:
    path = ROOT / "examples" / f"{name}.field"
    field = compile_program(path.read_text(), path.name).select(None)
    return kernel.source(field, dtype, dense=dense)[0]


def _golden(name: str, dtype: str, dense: bool) -> Path:
    return GOLDEN / f"{name}{'.dense' if dense else ''}.{dtype}.c"


@pytest.mark.parametrize("name, dtype, dense", CASES, ids=lambda v: str(v))
def test_golden_c(name, dtype, dense, update_golden):
    text = emit(name, dtype, dense)
    golden = _golden(name, dtype, dense)
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs: run pytest --update-golden " \
                                       f"and review the diff"
    assert emit(name, dtype, dense) == text          # stable within a process


def test_the_adaptive_kernel_is_the_adaptive_template():
    adaptive = emit("lorenz_tsit5", "float64", False)
    assert "the step attempts of this call" in adaptive and "Hairer's starting step" in adaptive
    dense = emit("vanderpol", "float64", True)
    assert "cubic Hermite" in dense and "Hairer's starting step" not in dense
    plain = emit("vanderpol", "float64", False)
    assert "step attempts" not in plain and "explicit Runge-Kutta" in plain
    events = emit("lif", "float32", False)
    assert "every condition at the step's end" in events and "the event log" in events
    assert "Hairer's starting step" not in events and "with events, or the rest" in events
    assert "events" not in emit("vanderpol", "float64", True)


def test_golden_c_compiles(cpu, tmp_path, monkeypatch):
    """Every golden kernel is C that the toolchain builds (and loads)."""
    from vgpu_compiler.backends.cpu import toolchain
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path))
    for name, dtype, dense in CASES:
        lib = toolchain.build(_golden(name, dtype, dense).read_text(), "golden")
        assert lib.vg_kernel and lib.vg_kernel_serial
