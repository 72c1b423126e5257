"""A cpu kernel already on disk is loaded without rendering its C text (the disk key is
computed from what the templates are given: backends/cpu/source_key.py); a changed
template, renderer or compiler flag is a miss; the key is the same in every process."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler import resources
from vgpu_compiler.backends.cpu import kernel, source_key, toolchain
from vgpu_compiler.backends.shader import template
from vgpu_compiler.call.counters import COUNTERS
from vgpu_compiler.frontend.compile import compile_program

ROOT = Path(__file__).resolve().parents[3]
LORENZ = (ROOT / "examples" / "lorenz.field").read_text()
H0 = np.tile(np.float32([1, 0, 0]), (50, 1))
ARGS = dict(params={"rho": np.linspace(0, 21, 50, dtype=np.float32)}, dt=0.001, steps=50)


@pytest.fixture
def cache(tmp_path, monkeypatch, cpu):
    monkeypatch.setenv("VGPU_CACHE_DIR", str(tmp_path / "cache"))
    kernel.clear_memory()
    yield tmp_path / "cache"
    kernel.clear_memory()


def _renders(monkeypatch) -> list:
    seen = []
    real = kernel.Plan.render
    monkeypatch.setattr(kernel.Plan, "render", lambda self: (seen.append(1), real(self))[1])
    return seen


_texts = [0]


def _run():
    """A call as a new process makes it: a new text (a new prepared call, the same
    kernel), nothing in memory, only the disk cache."""
    kernel.clear_memory()
    _texts[0] += 1
    before = COUNTERS.snapshot()
    got = vgpu.run_field(LORENZ + f"\n# text {_texts[0]}\n", H0, backend="cpu", **ARGS)
    after = COUNTERS.snapshot()
    return got, after["disk_hits"] - before["disk_hits"]


def test_a_disk_hit_renders_nothing(cache, monkeypatch):
    renders = _renders(monkeypatch)
    first, hits = _run()
    assert renders == [1] and hits == 0
    again, hits = _run()
    assert renders == [1], "the kernel was rendered again although its library is on disk"
    assert hits == 1
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, vgpu.run_field(LORENZ, H0, backend="numpy", **ARGS),
                               rtol=1e-5, atol=1e-5)


def test_a_changed_template_is_a_miss_and_is_used(cache, monkeypatch, tmp_path):
    _run()
    changed = tmp_path / "templates"
    shutil.copytree(resources.templates_dir(), changed)
    helpers = changed / "helpers.c.j2"
    helpers.write_text("// a changed template\n" + helpers.read_text())
    monkeypatch.setattr(resources, "templates_dir", lambda: changed)
    compiled = []
    real = toolchain._compile
    monkeypatch.setattr(toolchain, "_compile",
                        lambda source, *a: (compiled.append(source), real(source, *a))[1])
    template.environment.cache_clear()
    kernel._environment.cache_clear()
    try:
        got, hits = _run()
    finally:
        template.environment.cache_clear()
        kernel._environment.cache_clear()
    assert hits == 0 and len(compiled) == 1 and "// a changed template" in compiled[0]
    np.testing.assert_allclose(got, vgpu.run_field(LORENZ, H0, backend="numpy", **ARGS),
                               rtol=1e-5, atol=1e-5)


def test_the_renderer_digest_reads_every_c_template(tmp_path):
    """Every C template counts, also one edited in place while the process runs."""
    copy = tmp_path / "templates"
    shutil.copytree(resources.templates_dir(), copy)
    base = source_key.renderer_digest(copy)
    assert base == source_key.renderer_digest(resources.templates_dir())
    for name in ("field.c.j2", "macros.c.j2", "events.c.j2"):
        before = source_key.renderer_digest(copy)
        path = copy / name
        stat = path.stat()
        path.write_text(path.read_text() + " ")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        assert source_key.renderer_digest(copy) != before, name


def test_the_key_covers_the_python_that_the_templates_call():
    """The C templates call the IR builders, printer and lane passes while rendering, so
    every module of codegen/ and backends/shader/ is part of the disk key: an edit to one
    of them alone is a new key (not a stale library loaded)."""
    pkg = Path(source_key.__file__).resolve().parents[2]
    called = set((pkg / "codegen").rglob("*.py")) | set((pkg / "backends" / "shader").glob("*.py"))
    assert called <= set(source_key.RENDERERS)
    assert pkg / "codegen" / "build" / "adaptive.py" in called


def test_a_changed_flag_is_a_miss(cache, monkeypatch):
    _run()
    with monkeypatch.context() as m:
        m.setattr(toolchain, "FLAGS", toolchain.FLAGS + ("-DVG_ANOTHER_FLAG",))
        _, hits = _run()
    assert hits == 0
    _, hits = _run()
    assert hits == 1                # (the first library is still there)


CASES = [("lorenz", "float32", False), ("lorenz", "float64", False),
         ("lorenz", "float32", True), ("vanderpol_adaptive", "float32", False),
         ("lif", "float32", False), ("ou", "float32", False),
         ("vanderpol_stiff", "float64", False), ("kuramoto", "float32", False)]


def test_plans_have_keys_that_differ_where_their_texts_do():
    keys, texts = {}, {}
    for name, dtype, dense in CASES:
        path = ROOT / "examples" / f"{name}.field"
        field = compile_program(path.read_text(), path.name).select(None)
        p = kernel.plan(field, dtype, dense=dense)
        keys[name, dtype, dense], texts[name, dtype, dense] = p.key(), p.render()
    assert None not in keys.values()
    assert len(set(keys.values())) == len(set(texts.values())) == len(CASES)


def test_unkeyable_arguments_are_said():
    with pytest.raises(source_key.Unkeyable):
        source_key.fingerprint(f=lambda: 0)
    shared = ["x", 1.5]
    # structural: a shared object digests as its copy would; order and types count
    assert source_key.fingerprint(a=[shared, shared]) == source_key.fingerprint(
        a=[shared, ["x", 1.5]])
    for other in ([shared, ("x", 1.5)], [shared, ["x", 1.25]], [shared, [1.5, "x"]],
                  [shared, ["x", 1.5], []]):
        assert source_key.fingerprint(a=[shared, shared]) != source_key.fingerprint(a=other)


def test_a_fresh_process_loads_the_library_without_jinja(cache, tmp_path):
    """The key is the same in a new process, which then finds the library on disk and
    neither imports Jinja nor renders."""
    code = ("import sys, numpy as np, vgpu\n"
            "from vgpu_compiler.call.counters import COUNTERS\n"
            f"h0 = np.tile(np.float32([1, 0, 0]), (50, 1))\n"
            f"x = vgpu.run_field(open({str(ROOT / 'examples' / 'lorenz.field')!r}).read(), "
            "h0, backend=sys.argv[1], params={'rho': np.linspace(0, 21, 50, "
            "dtype=np.float32)}, dt=0.001, steps=50)\n"
            "c = COUNTERS.snapshot()\n"
            "print(c['compiles'], c['disk_hits'], 'jinja2' in sys.modules, float(x.sum()))\n")
    env = dict(os.environ, VGPU_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from vgpu_compiler.backends import no_gpu_devices
    outs = []
    for backend in ("cpu", "cpu") + (("auto",) if no_gpu_devices() else ()):
        out = subprocess.run([sys.executable, "-c", code, backend], capture_output=True,
                             text=True, env=env, timeout=300, cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr[-2000:]
        outs.append(out.stdout.split())
    assert outs[0][:3] == ["1", "0", "True"]             # the first rendered and compiled
    for later in outs[1:]:                              # (auto: cpu, without a GPU device)
        assert later[:3] == ["1", "1", "False"], later
        assert later[3] == outs[0][3]


def test_a_changed_module_of_the_description_is_a_miss(monkeypatch):
    """The templates call properties and methods of the description's classes: the
    source of their modules is part of the key."""
    path = ROOT / "examples" / "lorenz.field"
    field = compile_program(path.read_text(), path.name).select(None)
    p = kernel.plan(field, "float32")
    before = p.key()
    real = source_key._module_digest
    monkeypatch.setattr(source_key, "_module_digest",
                        lambda name: real(name) + (b"edited" if name.endswith(
                            "shader.kernel") else b""))
    assert p.key() != before
