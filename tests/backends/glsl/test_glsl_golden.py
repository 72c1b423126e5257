"""GLSL lowering: the emitted shader of every example, byte for byte.

``pytest --update-golden`` rewrites tests/golden/; each file is also checked
by the reference compiler, glslangValidator, as the driver receives it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import vgpu
from conftest import find_validator
from vgpu_compiler.backends.glsl import emit_glsl
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.field"))
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
STIFF: set[str] = set()        # rodas4 examples the GLSL backend refuses: none now


def refused(path: Path) -> bool:
    """A rodas4 example: the GLSL backend refuses it (a BackendError naming numpy)."""
    from vgpu_compiler.errors import BackendError
    if path.stem not in STIFF:
        return False
    with pytest.raises(BackendError, match="no rodas4 yet.*backend='numpy'"):
        emit(path)
    return True


def emit(path: Path, dtype: str = "float32") -> str:
    src = path.read_text()
    field = compile_program(src, path.name).select(None)
    return emit_glsl(field, dtype=dtype, source=src)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path, update_golden):
    if refused(path):
        return
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
    if refused(path):
        return
    assert emit(path) == emit(path)


def _validate(text: str, tmp_path: Path) -> None:
    """glslangValidator accepts the text (skipped without the tool; a failure on CI)."""
    exe = find_validator()
    f = tmp_path / "kernel.comp"
    f.write_text(text)
    run = subprocess.run([exe, "-S", "comp", str(f)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden_validates(path, tmp_path):
    if refused(path):
        return
    golden = GOLDEN / f"{path.stem}.glsl"
    _validate(golden.read_text() if golden.exists() else emit(path), tmp_path)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_float64_validates_or_refuses(path, tmp_path):
    from vgpu_compiler.errors import BackendError
    try:
        text = emit(path, "float64")
    except BackendError as e:       # naming the fastest backend here with float64
        from vgpu_compiler.backends import fastest
        assert f"backend='{fastest('float64', exclude=('glsl',))}' for float64" in str(e)
        return
    _validate(text, tmp_path)


# t and step read in a stage only, in the collapse vote only, in a flux only, nowhere.
TIME_AND_STEP = {
    "stage": ("state x\n dx/dt = sin(t) + float(step % 3)", {"loop": ("t_n", "tt", "nstep")}),
    "collapse": ("basin a < 4\n state x\n dx/dt = 1 - x\n collapse when t > 0.5 and step > 2",
                 {"vote": ("tt", "nstep")}),
    "flux": ("state x\n dx/dt = -x\n output H[3]\n flux H[step % 3] += x * t",
             {"flux": ("tt", "nstep")}),
    "neither": ("state x\n dx/dt = -x", {}),
}


@pytest.mark.parametrize("case", sorted(TIME_AND_STEP))
def test_time_and_step_are_declared_where_read_and_only_there(case, tmp_path):
    body, declared = TIME_AND_STEP[case]
    src = f"field f {{\n {body}\n solve rk4(dt = 0.1, steps = 9)\n}}"
    text = emit_glsl(compile_program(src).select(None), source=src)
    expect = {"t_n": "float t_n =", "tt": "float tt =", "nstep": "int nstep ="}
    wanted = {name for names in declared.values() for name in names}
    for name, decl in expect.items():
        assert (decl in text) == (name in wanted), (name, text)
    _validate(text, tmp_path)


@pytest.mark.parametrize("case", sorted(TIME_AND_STEP))
def test_fields_reading_time_and_step_agree_with_the_reference(case, glsl):
    src = f"field f {{\n {TIME_AND_STEP[case][0]}\n solve rk4(dt = 0.1, steps = 9)\n}}"
    h0 = np.linspace(-1, 1, 8).astype(np.float32)
    got = vgpu.solve(src, h0, backend="glsl")
    ref = vgpu.solve(src, h0, backend="numpy")
    np.testing.assert_allclose(got.states, ref.states, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.steps_taken, ref.steps_taken)
    for name in ref.outputs:
        np.testing.assert_allclose(got.outputs[name], ref.outputs[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ci", ["", "true"])
def test_a_missing_validator_skips_with_the_reason_except_on_ci(ci, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))       # no glslangValidator here
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="glslangValidator is not installed.*glslang-tools"):
        find_validator()
