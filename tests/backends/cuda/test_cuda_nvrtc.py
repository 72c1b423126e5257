"""The cuda backend's text on a machine without a GPU: every example's kernel, and those of
generated programs, compiled by NVRTC for sm_80 (A100) and sm_90 (H100/H200) -- a real
compile that fails on an error, not a skip (CI installs the `test` extra's NVRTC wheels);
golden files pin the CUDA text of a few fields; the kernel between the prologue and the
entry is the cpu backend's C, line for line (one kernel, two dialects).

Cost: every example in both dtypes for both architectures, 48 s on a loaded 2-core
machine (the basins kuramoto and heat take half of it: a basin's lanes are one thread's
loops, which NVRTC unrolls); the whole file 78 s there (42 s of CPU, load 4).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from vgpu_compiler.backends.cpu import kernel as c_kernel
from vgpu_compiler.backends.cuda import source
from vgpu_compiler.errors import BackendError
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.field"))
GOLDENS = [("lorenz", "float32"), ("lorenz_tsit5", "float64"), ("ou", "float32")]
# observers (ir/observers.py): fields lowered as a call runs them, every kind, with the
# fixed-step, adaptive and events kernels, noise and a basin (the golden: the first's, a
# plain fixed-step kernel; a `first`'s kernel is the events' kernel, the C text's)
OBSERVING = {
    "observers_decay": """
field decay {
    state y = 1
    dy/dt = -y
    observe low = trough(y)
    observe area = integral(y)
    solve rk4(dt = 0.01, steps = 100)
}""",
    "observers": """
field osc {
    param w = 1
    state y = 1, v = 0
    dy/dt = v
    dv/dt = -w * w * y
    observe vmax = peak(v)
    observe vmin = trough(v * t + float(step))
    observe area = integral(y * y)
    observe vbar = average(v)
    observe cross = first(y < 0)
    observe late = first(v > 0.5 and t > 1)
    solve %s
}""",
    "observers_events": """
field bounce {
    state y = 1, v = 0, n = 0
    dy/dt = v
    dv/dt = -9.81
    dn/dt = 0
    when y < 0 { v = -0.8 * v
        n = n + 1 }
    observe top = peak(y)
    observe made = first(n > 0.5)
    solve %s
}""",
    "observers_noise": """
field walk {
    noise xi
    state x = 0
    dx/dt = xi
    observe out = first(x > 0.5)
    observe top = peak(x)
    observe area = integral(x)
    solve euler(dt = 0.01, steps = 200)
}""",
    "observers_basin": """
field ring {
    grid i < N
    basin l < 4
    coupled u = x
    state x = float(i) * 0.1 + 0.05
    dx/dt = -x + 0.5 * (u[l - 1] + u[l + 1])
    observe hot = first(x > 0.25)
    observe low = trough(x)
    solve %s
}""",
}
OBSERVING_METHODS = ("rk4(dt = 0.01, steps = 300)", "dopri5(t1 = 3, rtol = 1e-6, atol = 1e-8)")


@pytest.fixture(scope="session")
def nvrtc():
    """NVRTC (cuda-bindings and the nvidia-cuda-nvrtc-cu12 wheel): skipped without it,
    except on CI, where the test extra installs it and a missing one fails."""
    from vgpu_compiler.backends.cuda import nvrtc
    ok, why = nvrtc.available()
    if not ok:
        if os.environ.get("CI", "") not in ("", "0", "false"):
            pytest.fail(f"NVRTC is not available: {why}; CI must have it (the test extra)")
        pytest.skip(f"NVRTC is not available: {why}")
    return nvrtc


def fields(name: str):
    if name in OBSERVING:           # (rk4; observer_fields for the others)
        return [observer_fields(name, OBSERVING_METHODS[0])]
    path = ROOT / "examples" / f"{name}.field"
    return list(compile_program(path.read_text(), path.name).program.fields)


def observer_fields(name: str, method: str):
    """The field ``name`` of OBSERVING, solved by ``method``, lowered (its observers as the
    hidden states the backend updates: what a call compiles)."""
    from vgpu_compiler.ir import observers
    text = OBSERVING[name].replace("%s", method)
    return observers.lower(compile_program(text, f"{name}.field").program.fields[0]).field


def compile_all(nvrtc, name: str, dtype: str, arch: str, dense: bool = False) -> None:
    for field in fields(name):
        text = source.source(field, dtype, dense=dense)[0]
        binary = nvrtc.compile(text, arch, f"{field.name}.cu")
        assert len(binary) > 1000


CASES = [(n, d, a) for n in EXAMPLES for d in ("float32", "float64") for a in ("sm_80", "sm_90")]


@pytest.mark.parametrize("name, dtype, arch", CASES, ids=lambda v: str(v))
def test_every_example_compiles_with_nvrtc(nvrtc, name, dtype, arch):
    compile_all(nvrtc, name, dtype, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OBSERVING))
def test_observer_kernels_compile_with_nvrtc(nvrtc, name, dtype, arch):
    """peak, trough, integral, average and first in the fixed-step, adaptive and events
    kernels, with noise and in a basin: the CUDA text compiles, and is the C text."""
    methods = OBSERVING_METHODS if "%s" in OBSERVING[name] else ("",)
    for method in methods:
        field = observer_fields(name, method)
        text = source.source(field, dtype)[0]
        assert "observed_" in text
        assert len(nvrtc.compile(text, arch, f"{name}.cu")) > 1000
        assert _kernel_lines(text) == _kernel_lines(c_kernel.source(field, dtype)[0])


STIFF_OBSERVING = """
field lin {
    param a = 1
    state y1 = 1, y2 = 0
    dy1/dt = -a * y1
    dy2/dt = a * y1 - 1000 * y2 * (1 + 0.1 * sin(t))
    observe area = integral(y2 * t)
    observe bar = average(y1)
    observe hi = peak(y2)
    observe lo = trough(y1)
    observe half = first(y1 < 0.5)
    %s
    solve %s(t1 = 1, rtol = 1e-6, atol = 1e-8)
}"""
STIFF_EVENTS = "when y1 < 0.25 { y1 = 1 }\n    stop when y2 > 0.5"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", ["rodas4", "rodas5p", "rosenbrock23"])
def test_stiff_observer_kernels_compile_with_nvrtc(nvrtc, method, dtype):
    """peak, trough, integral and average with a stiff method (the observers' rows of W
    solved after the states'), and first (the events' kernel; float32 without `when`,
    float64 with `when` and `stop when`: a stopped lane's K zeroed): the CUDA text
    compiles, and is the C text."""
    from vgpu_compiler.ir import observers
    text = STIFF_OBSERVING % (STIFF_EVENTS if dtype == "float64" else "", method)
    field = observers.lower(compile_program(text, "stiff.field").program.fields[0]).field
    cuda = source.source(field, dtype)[0]
    assert "the observers' rows" in cuda and "vg_fhit" in cuda     # (first located)
    assert ("a stopped lane's K is zero" in cuda) == (dtype == "float64")
    assert len(nvrtc.compile(cuda, "sm_90", "stiff.cu")) > 1000
    assert _kernel_lines(cuda) == _kernel_lines(c_kernel.source(field, dtype)[0])


def test_a_fixed_step_methods_save_at_kernel_compiles(nvrtc):
    compile_all(nvrtc, "vanderpol", "float64", "sm_90", dense=True)


def test_ptx_for_a_virtual_architecture(nvrtc):
    field = fields("lorenz")[0]
    ptx = nvrtc.compile(source.source(field, "float32")[0], "compute_90")
    assert b".entry vg_kernel" in ptx and b".target sm_90" in ptx


def test_a_refusal_is_a_backend_error_with_nvrtcs_log(nvrtc):
    with pytest.raises(BackendError, match=r"refused the CUDA kernel `bad.cu` for sm_90:"
                                           r"(.|\n)*undefined_thing"):
        nvrtc.compile("__global__ void k() { undefined_thing(); }", "sm_90", "bad.cu")


GENERATED = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(HealthCheck))


@GENERATED
@given(case=__import__("strategies").cases())
def test_generated_programs_compile_with_nvrtc(nvrtc, case):
    """Generated fields (tests/strategies.py: every feature, float32 and float64)."""
    program = compile_program(case.src, "gen.field")
    field = program.select(None)
    per = tuple(sorted(k for k, v in case.params.items() if np.ndim(v) > 0))
    try:
        text = source.source(field, case.dtype, per)[0]
    except BackendError:        # past the cpu kernel's limits: the C refuses it too
        with pytest.raises(BackendError):
            c_kernel.source(field, case.dtype, per)
        return
    nvrtc.compile(text, "sm_90", "gen.cu")


@pytest.mark.parametrize("name, dtype", GOLDENS + [("observers_decay", "float32")],
                         ids=lambda v: str(v))
def test_golden_cuda(name, dtype, update_golden):
    text = source.source(fields(name)[0], dtype)[0]
    golden = GOLDEN / f"{name}.{dtype}.cu"
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run pytest --update-golden"
    assert text == golden.read_text(), f"{golden.name} differs: run pytest --update-golden " \
                                       f"and review the diff"


def _kernel_lines(text: str) -> list[str]:
    """The lines from the block function to the entry points, OpenMP's pragmas left out."""
    start = text.index("// The trajectories of one block")
    end = text.index("// Every block of this call")
    return [ln for ln in text[start:end].splitlines() if not ln.strip().startswith("#pragma omp simd")]


@pytest.mark.parametrize("name, dtype", [("lorenz", "float32"), ("kuramoto", "float32"),
                                         ("lorenz_tsit5", "float64"), ("lif", "float32"),
                                         ("vanderpol_stiff", "float64"), ("ou", "float32")])
def test_the_cuda_kernel_is_the_c_kernel(name, dtype):
    """One kernel: the CUDA text's block function is the C text's, line for line (the
    lanes per block are VG_W, a macro); only the prologue and the entry differ."""
    field = fields(name)[0]
    c, cuda = c_kernel.source(field, dtype)[0], source.source(field, dtype)[0]
    assert _kernel_lines(cuda) == _kernel_lines(c)
    assert "#pragma omp" not in cuda and "#include" not in cuda
    assert "#define VG_SIMD" not in cuda and "extern double sin(double)" not in cuda
    assert 'extern "C" __global__ void vg_kernel(' in cuda
    assert "#define VG_W 1\n" in cuda or "(one basin)" in cuda
