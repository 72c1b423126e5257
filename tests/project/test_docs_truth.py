"""The docs against the code: the table of what each backend runs (docs/guide.md, "What
each backend runs") against the registry's features and against what the backends do;
every local link and file path in docs/*.md and README.md; the guide's usage line of
`vgpuc run` and `vgpuc compile` against the parser; the guide's peak-counting example
run as printed, against the closed form."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import vgpu
from vgpu_compiler import backends as registry
from vgpu_compiler.errors import BackendError

REPO = pathlib.Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide.md"
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
BUILT_IN = ("cuda", "glsl", "wgpu", "cpu", "numpy")


# --- the capability table -------------------------------------------------------------
def capability_table() -> tuple[list[str], dict[str, dict[str, bool]]]:
    """(the backends of the columns, {row label: {backend: yes?}}) of the guide's table."""
    text = GUIDE.read_text()
    start = text.index("### What each backend runs")
    lines = [ln for ln in text[start:].splitlines()[1:] if ln.startswith("|")]
    lines = lines[:next((i for i, ln in enumerate(lines[1:], 1)
                         if not ln.startswith("|")), len(lines))]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    header, rows = cells[0][1:], cells[2:]
    table = {}
    for row in rows:
        assert all(c in ("yes", "no") for c in row[1:]), row
        table[row[0]] = dict(zip(header, (c == "yes" for c in row[1:])))
    return header, table


def test_the_table_has_every_backend_and_every_feature():
    header, table = capability_table()
    assert sorted(header) == sorted(BUILT_IN)
    assert sorted(table) == sorted(registry.FEATURES.values())


@pytest.mark.parametrize("backend", BUILT_IN)
def test_the_table_says_what_the_registry_says(backend):
    _, table = capability_table()
    label = {words: name for name, words in registry.FEATURES.items()}
    documented = {label[row] for row, cols in table.items() if cols[backend]}
    has = registry.capabilities(registry.get(backend))
    assert has <= set(registry.FEATURES), has - set(registry.FEATURES)
    assert documented == has, (f"the guide says {backend} runs "
                               f"{sorted(documented - has)} and not {sorted(has - documented)}")


# --- the registry's features against what the backends do ------------------------------
FIXED = "field f { state x\n dx/dt = -x + 0.5\n solve rk4(dt = 0.01, steps = 10)\n}"
PROBES = {
    "adaptive": ("field f { state x\n dx/dt = -x\n solve dopri5(t1 = 1)\n}", {}),
    "stiff": ("field f { state x, y = 1\n dx/dt = -100 * (x - y)\n dy/dt = -y\n"
              " solve rodas4(t1 = 1)\n}", {}),
    "events": ("field f { state x, n = 0\n dx/dt = -x\n dn/dt = 0\n"
               " when x < 0.5 { n = n + 1 }\n solve rk4(dt = 0.01, steps = 100)\n}", {}),
    "stiff_events": ("field f { state x, n = 0\n dx/dt = -x\n dn/dt = 0\n"
                     " when x < 0.5 { n = n + 1 }\n solve rodas4(t1 = 1)\n}", {}),
    "noise": ("field f { noise xi\n state x\n dx/dt = -x + 0.1 * xi\n"
              " solve euler(dt = 0.01, steps = 10)\n}", {}),
    "history": (FIXED, {"save_every": 5}),
    "save_at": (FIXED, {"save_at": np.array([0.0, 0.05, 0.1])}),
    "reductions": ("field f { grid i < N\n basin l < 4\n state x\n coupled s = x\n"
                   " dx/dt = mean(s) - x\n solve rk4(dt = 0.01, steps = 10)\n}", {}),
    "flux": ("field f { output c[2]\n state x\n dx/dt = -x\n flux c[0] += x\n"
             " solve rk4(dt = 0.01, steps = 10)\n}", {}),
    "float64": (FIXED, {"dtype": "float64"}),
    "float64_functions": ("field f { state x\n dx/dt = -sin(x)\n"
                          " solve rk4(dt = 0.01, steps = 10)\n}", {"dtype": "float64"}),
    "observe_peak": ("field f { state x\n dx/dt = -x + 0.5\n observe m = peak(x)\n"
                     " solve rk4(dt = 0.01, steps = 10)\n}", {}),
    "observe_first": ("field f { state x\n dx/dt = -x + 0.5\n observe m = first(x > 0.75)\n"
                      " solve rk4(dt = 0.01, steps = 10)\n}", {}),
}
H0 = np.linspace(1.0, 2.0, 8)


def _needs(request, backend: str) -> None:
    """The project's fixtures decide: skip without the backend here, fail on CI."""
    if backend != "numpy":
        request.getfixturevalue(backend)


def _runs(backend: str, feature: str):
    """The probe's result on ``backend`` (a Solution or the states), or the BackendError."""
    try:
        if feature == "simulation":
            with vgpu.Simulation(FIXED, H0, backend=backend) as sim:
                sim.advance(steps=10)
                return sim.states
        if feature == "progress":
            seen = []
            sol = vgpu.solve(FIXED, H0, backend=backend,
                             progress=lambda done, total: seen.append((done, total)))
            assert seen and seen[-1] == (10, 10), seen
            return sol.states
        src, kw = PROBES[feature]
        return vgpu.solve(src, H0, backend=backend, **kw).states
    except BackendError as e:
        return e


@pytest.mark.parametrize("feature", sorted(set(registry.FEATURES) - {"gpu"}))
@pytest.mark.parametrize("backend", BUILT_IN)
def test_a_backend_runs_what_the_registry_says_and_refuses_the_rest(request, backend,
                                                                   feature):
    _needs(request, backend)
    claimed = feature in registry.capabilities(registry.get(backend))
    got = _runs(backend, feature)
    if not claimed:
        assert isinstance(got, BackendError), (f"{backend} runs {feature}, which its "
                                               f"registry entry does not list")
        return
    assert not isinstance(got, BackendError), f"{backend} lists {feature}: {got}"
    want = _runs("numpy", feature)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_gpu_is_the_registry_line_of_the_gpu_backends():
    assert {n for n in BUILT_IN if registry.get(n).gpu} == {"cuda", "glsl", "wgpu"}


# --- links and paths ---------------------------------------------------------------------
def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)}


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_local_link_exists(doc):
    missing = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):            # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            missing.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            missing.append(target)
    assert not missing, f"{doc.name} links to what does not exist: {missing}"


PATH = re.compile(r"(?<![\w/.:-])([\w.-]+(?:/[\w.-]+)+\.(?:py|md|field|j2|lark|json|png|sh|"
                  r"toml))\b")
# Where a path in the docs may be relative to; benchmarks/results/ is written by the
# benchmarks (not kept in the repository).
BASES = (REPO, REPO / "vgpu_compiler", REPO / "vgpu_compiler" / "backends", REPO / "docs",
         REPO / "templates", REPO / "benchmarks")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_file_path_named_in_the_docs_exists(doc):
    missing = sorted({p for p in PATH.findall(doc.read_text())
                      if not p.startswith("benchmarks/results/")
                      and not any((base / p).exists() for base in BASES)})
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


# --- usage lines ---------------------------------------------------------------------------
def test_the_guides_run_usage_lists_every_backend():
    text = GUIDE.read_text()
    listed = re.search(r"\[--backend ([\w|]+)\]", text).group(1).split("|")
    assert listed == list(registry.choices())


def test_the_guide_shows_every_emit_choice():
    from vgpu_compiler.cli.main import build_parser
    compile_ = build_parser()._subparsers._group_actions[0].choices["compile"]
    emit = next(a for a in compile_._actions if a.dest == "emit")
    text = GUIDE.read_text()
    for choice in set(emit.choices) - {emit.default}:       # glsl: no --emit needed
        assert f"--emit {choice}" in text or f"--target {choice}" in text, choice


# --- the guide's peak example ----------------------------------------------------------
def guide_block(marker: str) -> str:
    """The ```python block of the guide that holds ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    hits = [b for b in blocks if marker in b]
    assert len(hits) == 1, f"{len(hits)} python blocks of the guide hold {marker!r}"
    return hits[0]


def closed_form_peaks(zeta: np.ndarray, t_end: float, height: float) -> np.ndarray:
    """Peaks of x - 1 = e^(-s t) (cos(wd t) + s/wd sin(wd t)) (x(0) = 2, v(0) = 0, w =
    2 pi) above ``height`` in 0 < t < t_end: at t_k = 2 pi k / wd, of height e^(-s t_k)."""
    w = 2 * np.pi
    s, wd = zeta * w, w * np.sqrt(1 - zeta ** 2)
    t = 2 * np.pi * np.arange(1, 1000)[:, None] / wd
    return ((t < t_end) & (np.exp(-s * t) > height)).sum(axis=0)


def test_the_guides_peak_example_counts_the_closed_forms_peaks():
    scope: dict = {}
    exec(compile(guide_block("field peaks"), "guide.md", "exec"), scope)
    want = closed_form_peaks(scope["zeta"], 60.0, 0.05)
    np.testing.assert_array_equal(scope["peaks"], want)
    assert want.tolist() == [47, 23, 9, 4, 2, 1]         # the numbers the guide prints
    src, zeta = scope["src"], scope["zeta"]
    again = vgpu.solve(src, np.full(zeta.size, 2.0), params={"zeta": zeta},
                       dtype="float64", backend="numpy")
    np.testing.assert_array_equal(again.states[:, 3], want)


def test_the_peak_example_counts_the_same_on_every_compiled_backend(compiled_backend):
    scope: dict = {}
    block = guide_block("field peaks").replace('params={"zeta": zeta})',
                                               f'params={{"zeta": zeta}}, '
                                               f'backend="{compiled_backend}")')
    exec(compile(block, "guide.md", "exec"), scope)
    np.testing.assert_array_equal(scope["peaks"], closed_form_peaks(scope["zeta"], 60.0, 0.05))


def test_a_bare_sign_change_counts_rounding_as_the_guide_says():
    """The guide's warning: `when v < 0` alone counts 45 peaks in float32 and 60 in
    float64 for zeta = 0.05, where 9 rise above 1.05."""
    src = guide_block("field peaks").split('"""')[1]
    src = src.replace("when armed > 0.5 and x > hi and v < 0", "when v < 0")
    src = src.replace("    when x < lo { armed = 1 }\n", "")
    counts = [vgpu.solve(src, np.array([2.0]), params={"zeta": 0.05}, dtype=dtype,
                         backend="numpy").states[0, 3] for dtype in ("float32", "float64")]
    assert counts == [45, 60]
    assert closed_form_peaks(np.array([0.05]), 60.0, 0.05).tolist() == [9]


# --- the Solution's fields ------------------------------------------------------------------
def test_the_guide_lists_every_field_of_a_solution():
    """The guide's block of `sol.` lines names every field a Solution has (backend too)."""
    import dataclasses
    from vgpu_compiler.call.bound import Solution
    block = guide_block("sol.states        # the final states")
    listed = set(re.findall(r"^sol\.(\w+)", block, flags=re.M))
    fields = {f.name for f in dataclasses.fields(Solution)}
    assert fields <= listed, f"the guide's Solution lacks {sorted(fields - listed)}"


def test_each_decision_of_the_language_reference_is_made_once():
    """Two bullets with one label (there were two "Decision (backend="auto")", one
    without cpu) contradict each other sooner or later: one label, one decision."""
    text = (REPO / "docs" / "language.md").read_text()
    labels = re.findall(r"\*\*Decision \(([^)]*)\)", text)
    twice = sorted({label for label in labels if labels.count(label) > 1})
    assert not twice, f"decisions made twice in docs/language.md: {twice}"
