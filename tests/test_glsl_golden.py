"""GLSL lowering: the emitted shader of every example, byte for byte.

``pytest --update-golden`` rewrites tests/golden/; each file is also checked
by the reference compiler, glslangValidator, as the driver receives it.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vgpu_compiler.backends.glsl import emit_glsl
from vgpu_compiler.compile import compile_program

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.field"))
GOLDEN = Path(__file__).resolve().parent / "golden"


def emit(path: Path, dtype: str = "float32") -> str:
    src = path.read_text()
    field = compile_program(src, path.name).select(None)
    return emit_glsl(field, dtype=dtype, source=src)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path, update_golden):
    text = emit(path)
    golden = GOLDEN / f"{path.stem}.glsl"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file for {path.name}: run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs: run pytest --update-golden " \
                                       f"and review the diff"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_emitted_glsl_is_stable(path):
    assert emit(path) == emit(path)


def _validate(text: str, tmp_path: Path) -> None:
    exe = shutil.which("glslangValidator")
    assert exe, "glslangValidator is not installed"
    f = tmp_path / "kernel.comp"
    f.write_text(text)
    run = subprocess.run([exe, "-S", "comp", str(f)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden_validates(path, tmp_path):
    golden = GOLDEN / f"{path.stem}.glsl"
    _validate(golden.read_text() if golden.exists() else emit(path), tmp_path)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_float64_validates_or_refuses(path, tmp_path):
    from vgpu_compiler.errors import BackendError
    try:
        text = emit(path, "float64")
    except BackendError as e:
        assert "numpy" in str(e)
        return
    _validate(text, tmp_path)
