"""The stages import only downward: a lower stage never imports a higher one, and a
backend never imports another backend. Every import is read from the source (ast):
absolute and relative ones, and those inside functions.

Stages, low to high: errors, spelling, resources, disk_cache, source (program text:
Source, load, Located) < ir, noise < frontend < call <
runtime (the host side every compiled backend shares) < backends < pipeline (one call:
text to Solution) < persistent (Simulation, Pipeline: sessions over the pipeline),
distributed < api < cli (a call given dask arrays goes from the API to distributed/,
whose blocks run the pipeline on the workers); ``vgpu`` (the public face) may import
api and anything below; ``fit`` (parameter fitting over the API) sits with cli.
The package's own ``__init__`` is empty (every ``from .. import x`` imports it) and sits
at the bottom; ``__main__`` (``python -m vgpu_compiler``) sits with cli.
A backend may import the registry (``backends/__init__.py``), which imports none, and
the shared shading-language stages (``backends/shader/``), which import no backend.
One borrowing is allowed (BORROWS): the cuda backend is the cpu backend's C kernel and
host drivers on another Device (docs/internals.md, "The cuda backend"), until they move
to a shared runtime.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("vgpu_compiler", "vgpu")
RANK = {"errors": 0, "spelling": 0, "resources": 0, "disk_cache": 0, "source": 0, "ir": 1, "noise": 1, "frontend": 2, "codegen": 2,
        "call": 3, "runtime": 4, "backends": 5, "pipeline": 6, "persistent": 7, "distributed": 7,
        "api": 8, "fit": 9, "cli": 9, "__main__": 9,
        "__init__": 0}
SHARED = frozenset({"shader"})   # backends/ packages every backend may import
BORROWS = {"cuda": frozenset({"cpu"})}     # backend -> the backends it may import
FACE = RANK["cli"]  # vgpu/: the public face, beside the command line (cli/run.py uses it)


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def _imports(path: Path, text: str | None = None) -> list[tuple[str, int]]:
    """Every module ``path`` imports (absolute names), with its line."""
    name = _name(path)
    package = name.rpartition(".")[0]       # a package's __init__: the package itself
    text = path.read_text(encoding="utf-8") if text is None else text
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, node.lineno))
            found += [(f"{base}.{a.name}", node.lineno) for a in node.names  # from . import x
                      if _is_module(f"{base}.{a.name}")]
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _stage(module: str) -> tuple[int, str | None] | None:
    """(rank, which backend) of a module of ours; None for anything else."""
    parts = module.split(".")
    if parts[0] == "vgpu":
        return FACE, None
    if parts[0] != "vgpu_compiler":
        return None
    if len(parts) == 1:
        return RANK["__init__"], None
    top = parts[1]
    if top not in RANK:
        return None             # a name imported from the package itself
    backend = parts[2] if top == "backends" and len(parts) > 2 else None
    return RANK[top], backend


def _problems(path: Path, text: str | None = None) -> list[str]:
    name = _name(path).removesuffix(".__init__")
    here = _stage(name)
    out = []
    for target, line in _imports(path, text):
        there = _stage(target.removesuffix(".__init__"))
        if here is None or there is None:
            continue
        if there[0] > here[0]:
            out.append(f"{path.relative_to(ROOT)}:{line} imports {target} (a higher stage)")
        elif here[0] == there[0] == RANK["backends"] and here[1] and there[1] \
                and here[1] != there[1] and there[1] not in SHARED \
                and there[1] not in BORROWS.get(here[1], ()):
            out.append(f"{path.relative_to(ROOT)}:{line} imports {target} (another backend)")
    return out


def test_imports_read_relative_and_nested_ones():
    """The reader itself: relative imports resolve, imports in functions count."""
    runner = ROOT / "vgpu_compiler" / "backends" / "glsl" / "runner.py"
    targets = {t for t, _ in _imports(runner)}
    assert "vgpu_compiler.call.bound" in targets            # from ...call.bound import
    assert "vgpu_compiler.backends.glsl.device" in targets  # from . import device
    assert "vgpu_compiler.backends.glsl" in targets         # from . import X, in a function
    assert "vgpu_compiler.backends.glsl.REDUCTION_ENV" not in targets   # a name, not a module
    pipeline = {t for t, _ in _imports(ROOT / "vgpu_compiler" / "pipeline.py")}
    assert "vgpu_compiler.frontend.compile" in pipeline     # inside a function


def test_every_stage_has_a_rank():
    """No package or module of vgpu_compiler is left out of the rule (persistent/ was:
    its imports were never checked)."""
    tops = {p.stem if p.is_file() else p.name for p in (ROOT / "vgpu_compiler").iterdir()
            if (p.suffix == ".py") or (p / "__init__.py").is_file()}
    assert tops - set(RANK) == set()
    assert _stage("vgpu_compiler.persistent.simulation")[0] > _stage("vgpu_compiler.pipeline")[0]
    assert _stage("vgpu_compiler.call.bound")[0] < _stage("vgpu_compiler.runtime.pacing")[0] \
        < _stage("vgpu_compiler.backends.glsl.execute")[0]


def test_the_rule_catches_upward_and_sideways_imports():
    bind = ROOT / "vgpu_compiler" / "call" / "bind.py"
    assert _problems(bind, "def f():\n    from ..backends.glsl import runner\n") == [
        "vgpu_compiler/call/bind.py:2 imports vgpu_compiler.backends.glsl (a higher stage)",
        "vgpu_compiler/call/bind.py:2 imports vgpu_compiler.backends.glsl.runner "
        "(a higher stage)"]
    runner = ROOT / "vgpu_compiler" / "backends" / "glsl" / "runner.py"
    assert _problems(runner, "from ..numpy import runner\n") == [
        "vgpu_compiler/backends/glsl/runner.py:1 imports vgpu_compiler.backends.numpy "
        "(another backend)",
        "vgpu_compiler/backends/glsl/runner.py:1 imports vgpu_compiler.backends.numpy.runner "
        "(another backend)"]
    assert _problems(runner, "from .. import Backend\nimport vgpu_compiler.ir.nodes\n") == []
    assert _problems(runner, "from ..shader import lower\n") == []     # shared stages
    shared = ROOT / "vgpu_compiler" / "backends" / "shader" / "lower.py"
    assert _problems(shared, "from ..glsl import device\n") == [
        "vgpu_compiler/backends/shader/lower.py:1 imports vgpu_compiler.backends.glsl "
        "(another backend)",
        "vgpu_compiler/backends/shader/lower.py:1 imports vgpu_compiler.backends.glsl.device "
        "(another backend)"]
    assert _imports(ROOT / "vgpu_compiler" / "__init__.py") == []   # empty: at the bottom
    assert _stage("vgpu_compiler.call.bind")[0] < _stage("vgpu_compiler.api")[0]
    assert _stage("vgpu_compiler.backends.glsl.runner") == (RANK["backends"], "glsl")
    assert _stage("vgpu_compiler.backends") == (RANK["backends"], None)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_upward_or_across_backends(path):
    assert _problems(path) == []


def _cycles() -> list[list[str]]:
    """The import cycles among our modules (strongly connected parts of more than one
    module, imports inside functions counted: a lazy import does not hide one)."""
    modules = {_name(p).removesuffix(".__init__"): p for p in _modules()}
    edges = {m: sorted({t.removesuffix(".__init__") for t, _ in _imports(p)} & set(modules))
             for m, p in modules.items()}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):               # Tarjan's algorithm (the graph is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == []


def test_the_one_borrowing_goes_one_way():
    """cuda may import cpu (BORROWS); cpu importing cuda, or cuda importing glsl, is flagged."""
    cpu = ROOT / "vgpu_compiler" / "backends" / "cpu" / "runner.py"
    assert _problems(cpu, "from ..cuda import device\n") == [
        "vgpu_compiler/backends/cpu/runner.py:1 imports vgpu_compiler.backends.cuda "
        "(another backend)",
        "vgpu_compiler/backends/cpu/runner.py:1 imports vgpu_compiler.backends.cuda.device "
        "(another backend)"]
    cuda = ROOT / "vgpu_compiler" / "backends" / "cuda" / "device.py"
    assert _problems(cuda, "from ..cpu import runner\n") == []
    assert len(_problems(cuda, "from ..glsl import runner\n")) == 2
