"""The package as users install it: every Python package of the tree is in the
wheel's package list, and the installed data (grammar, templates) is found."""
import os
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_python_package_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("vgpu", "vgpu_compiler")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"


def test_data_folders_are_mapped_into_the_package():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"vgpu_compiler.grammar": "grammar",
                                  "vgpu_compiler.templates": "templates"}
    assert any((ROOT / "grammar").glob("*.lark"))
    exts = {"".join(p.suffixes[-1:]) for p in (ROOT / "grammar").iterdir()}
    patterns = {pat.lstrip("*") for pat in cfg["package-data"]["vgpu_compiler.grammar"]}
    assert exts <= patterns, f"grammar files not shipped: {exts - patterns}"
    exts = {p.suffix for p in (ROOT / "templates").iterdir()}
    patterns = {pat.lstrip("*") for pat in cfg["package-data"]["vgpu_compiler.templates"]}
    assert exts <= patterns, f"template files not shipped: {exts - patterns}"


def test_a_built_wheel_finds_its_grammar_and_templates(tmp_path):
    """Build the wheel, unpack it away from the checkout, compile and run a field from there."""
    import subprocess
    import sys
    import zipfile

    out = tmp_path / "wheel"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                            "--no-build-isolation", "-w", str(out), str(ROOT)],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    warned = [line for line in (build.stdout + build.stderr).splitlines()
              if re.search(r"(?i)warning|deprecat", line)]
    assert not warned, "the build warns:\n" + "\n".join(warned)
    wheel = next(out.glob("vgpu-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "vgpu_compiler" / "grammar" / "field.lark").is_file()
    assert list((site / "vgpu_compiler" / "grammar").glob("field-*.tables"))   # the parser's
    assert (site / "vgpu_compiler" / "templates" / "base.glsl.j2").is_file()
    code = (
        "import numpy as np, vgpu, vgpu_compiler.resources as r\n"
        "from vgpu_compiler.backends.glsl import emit_glsl\n"
        "assert str(r.grammar_path()).startswith(%r), r.grammar_path()\n"
        "src = 'field f {\\n state x\\n dx/dt = -x\\n solve euler(dt = 0.5, steps = 2)\\n}'\n"
        "print(vgpu.run_field(src, np.ones(3), backend='numpy').tolist())\n"
        "print(emit_glsl(vgpu.compile(src).select(None)).splitlines()[0])\n" % str(site)
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[0.25, 0.25, 0.25]", "#version 430"]
