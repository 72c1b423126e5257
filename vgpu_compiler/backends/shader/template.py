"""The Jinja2 environment of the GLSL backend: templates hold layout only. Jinja2 is
imported when the environment is first wanted (a cpu kernel found on disk needs none)."""
from __future__ import annotations

import functools


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
    return env


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
