"""Where the grammar and the GLSL templates live.

In a checkout they are the top-level ``grammar/`` and ``templates/`` folders;
in an installed wheel they travel inside the package as the data packages
``vgpu_compiler.grammar`` and ``vgpu_compiler.templates`` (see pyproject.toml).
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent


def _locate(folder: str) -> Path:
    installed = _PACKAGE / folder                 # a wheel: data packages inside vgpu_compiler
    if installed.is_dir():
        return installed
    return _CHECKOUT / folder                      # a checkout or an editable install


def grammar_path() -> Path:
    """The folder holding ``field.lark``."""
    return _locate("grammar")


def templates_dir() -> Path:
    """The folder holding the GLSL templates."""
    return _locate("templates")
