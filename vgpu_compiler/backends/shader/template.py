"""The Jinja2 environment of the GLSL backend: templates hold layout only. Jinja2 is
imported when the environment is first wanted (a cpu kernel found on disk needs none)."""
from __future__ import annotations

import functools
import re


def fingerprint(version: str, backend_folder) -> str:
    """A hash of a shader backend's code (runtime/kernel_cache.fingerprint): ``version``,
    the templates, the backend's own folder, backends/shader and codegen: a change to
    any is a new kernel (glsl and wgpu alike)."""
    from pathlib import Path
    from ...runtime.kernel_cache import fingerprint as digest
    return digest(version, Path(environment().loader.searchpath[0]), Path(backend_folder),
                  Path(__file__).parent)


@functools.lru_cache(maxsize=1)
def environment():
    import jinja2

    from .template_cache import TemplateCodeCache
    try:
        from ...resources import templates_dir
        folder = templates_dir()
    except ImportError:         # pragma: no cover - the front end's resources module
        from pathlib import Path
        folder = Path(__file__).resolve().parents[3] / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=TemplateCodeCache(),     # compiled templates on disk
    )
    from .lanes import rename
    env.filters["lane"] = rename        # {{ text | lane(j, names) }}: copy j's locals
    env.filters["reads"] = reads        # {{ st.words | reads(combos) }}: a stage's reads
    return env


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def reads(words, assigns) -> frozenset:
    """The identifiers a stage reads: its block's ``words`` and those of the expressions
    of ``assigns`` (its combinations y = s + dt * (...): Assigns or dicts). A C stage loads from the lane
    arrays only the other stages' k it reads, so that its text grows with what it uses,
    not with stages x stages x states (Pleiades dop853: 428 KB of 942 were such loads)."""
    texts = (a["expr"] if isinstance(a, dict) else a.expr for a in assigns)
    return frozenset(words).union(w for t in texts for w in _IDENTIFIER.findall(t))


def render_kernel(kernel, template: str | None = None) -> str:
    """The text of a printed kernel (printing.PrintedKernel) through its dialect's
    template (``k``: the kernel, ``d``: the dialect)."""
    d = kernel.dialect
    if template is None and getattr(kernel, "adaptive", None) is not None:
        # an adaptive method's kernel (several trajectories per invocation: lanes.py)
        template = d.lanes_template if kernel.lanes > 1 else d.adaptive_template
    text = environment().get_template(template or d.template).render(k=kernel, d=d)
    lines = [line.rstrip() for line in text.splitlines()]
    out: list[str] = []
    for line in lines:                   # at most one blank line in a row
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"
