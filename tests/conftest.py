"""Shared test options and fixtures.

``pytest --update-golden`` rewrites tests/golden/*.glsl from the current
compiler (then read the diff). The GLSL tests run on the machine's OpenGL
(Mesa llvmpipe on CI); they are skipped only when VGPU_NO_GL is set.
The shader-validation tests need ``glslangValidator`` (Debian: glslang-tools):
without it they are skipped with the reason, except on CI (``CI`` set), where
``.ci/run`` installs it and a missing tool is a failure.

The tests live by stage (tests/<stage>/, the backends' in tests/backends/<name>/); the
shared cases are modules here (field_examples, event_fields, once, strategies), and a
test module may import another's cases by its name (``from test_observers import
...``): every stage folder is on ``sys.path`` (test files' names are unique).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
for _folder in sorted({p.parent for p in _TESTS.rglob("test_*.py")} - {_TESTS}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden GLSL files in tests/golden/")


def pytest_configure(config):
    # Keep the kernel disk cache of the test run away from the user's cache folder.
    if "VGPU_CACHE_DIR" not in os.environ:
        os.environ["VGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="vgpu-test-cache-")


def pytest_collection_modifyitems(config, items):
    """A test parametrised over GPU backends (``gpu``) and dtypes has no float64 case on
    wgpu (WGSL has no 64-bit floats; tests/backends/wgpu/test_wgsl.py checks the refusal): those
    combinations are deselected, not skipped."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_wgpu = "wgpu" in (params.get("gpu"), params.get("backend"),
                             params.get("compiled_backend"))
        wgpu64 = on_wgpu and params.get("dtype") == "float64"
        (drop if wgpu64 else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def glsl():
    """The GLSL runner; a test that needs it fails (not skips) when there is no context."""
    if os.environ.get("VGPU_NO_GL", "") not in ("", "0"):
        pytest.skip("VGPU_NO_GL is set")
    from vgpu_compiler.backends.glsl import runner as glsl_runner
    assert glsl_runner.available(), "no OpenGL 4.3 context (set VGPU_NO_GL=1 to skip GLSL tests)"
    return glsl_runner


WGPU_MISSING = "no wgpu device here"


@pytest.fixture(scope="session")
def wgpu():
    """The wgpu runner. Without a device (no wgpu, no Vulkan driver: Debian
    mesa-vulkan-drivers) the test is skipped with the reason, except on CI (``CI`` set),
    where .ci/run installs both and a missing device is a failure; VGPU_NO_WGPU skips."""
    if os.environ.get("VGPU_NO_WGPU", "") not in ("", "0"):
        pytest.skip("VGPU_NO_WGPU is set")
    try:
        from vgpu_compiler.backends.wgpu import runner as wgpu_runner
        from vgpu_compiler.backends.wgpu import device
        ok, why = wgpu_runner.available(), device.get().error
    except ImportError as exc:
        ok, why = False, f"cannot import wgpu ({exc})"
    if not ok:
        message = f"{WGPU_MISSING}: {why} (pip install wgpu; apt-get install mesa-vulkan-drivers)"
        if os.environ.get("CI", "") not in ("", "0", "false"):
            pytest.fail(f"{message}; CI must have it (.ci/run installs it)")
        print(f"\nskipping a wgpu test: {message}")
        pytest.skip(message)
    return wgpu_runner


CPU_MISSING = "the cpu backend is not available here"


@pytest.fixture(scope="session")
def cpu():
    """The cpu backend (a C compiler with OpenMP): skipped with the reason without one,
    except on CI (``CI`` set), where ``.ci/run`` installs gcc and a missing one fails."""
    from vgpu_compiler.backends import get
    ok, why = get("cpu").available()
    if not ok:
        if os.environ.get("CI", "") not in ("", "0", "false"):
            pytest.fail(f"{CPU_MISSING}: {why}; CI must have it (.ci/run installs gcc)")
        pytest.skip(f"{CPU_MISSING}: {why}")
    return get("cpu")


@pytest.fixture(scope="session")
def cuda():
    """The cuda backend (an NVIDIA GPU, its driver, cuda-bindings and NVRTC): skipped with
    the reason without one, also on CI (which has no GPU), except with VGPU_REQUIRE_CUDA
    set (benchmarks/device_h200.sh), where a missing one fails."""
    from vgpu_compiler.backends import get
    ok, why = get("cuda").available()
    if not ok:
        if os.environ.get("VGPU_REQUIRE_CUDA", "") not in ("", "0", "false"):
            pytest.fail(f"the cuda backend is not available here: {why}")
        pytest.skip(f"the cuda backend is not available here: {why}")
    return get("cuda")


# The backends compiled from the kernel description, each tested against the reference.
COMPILED_BACKENDS = ("glsl", "wgpu", "cpu")


@pytest.fixture(params=COMPILED_BACKENDS)
def compiled_backend(request) -> str:
    """The name of a compiled backend (its own fixture decides skip or fail)."""
    request.getfixturevalue(request.param)
    return request.param


@pytest.fixture
def fresh_cache(tmp_path, glsl):
    """An empty disk cache folder and an empty memory cache, restored afterwards."""
    old = glsl.DISK._explicit
    glsl.set_cache_dir(tmp_path / "cache")
    glsl.clear_cache(memory=True, disk=False)
    yield tmp_path / "cache"
    glsl.clear_cache(memory=True, disk=False)
    glsl.set_cache_dir(old)


VALIDATOR_MISSING = "glslangValidator is not installed (Debian: apt-get install glslang-tools)"


def find_validator() -> str:
    """The path of glslangValidator; skips the test without it, fails on CI."""
    exe = shutil.which("glslangValidator")
    if exe:
        return exe
    if os.environ.get("CI", "") not in ("", "0", "false"):
        pytest.fail(f"{VALIDATOR_MISSING}; CI must have it (.ci/run installs it)")
    pytest.skip(VALIDATOR_MISSING)


@pytest.fixture
def validator() -> str:
    """The path of glslangValidator (see find_validator)."""
    return find_validator()
