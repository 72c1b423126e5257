"""Where the grammar and the GLSL templates live.

In a checkout they are the top-level ``grammar/`` and ``templates/`` folders;
in an installed wheel they travel inside the package as the data packages
``vgpu_compiler.grammar`` and ``vgpu_compiler.templates`` (see pyproject.toml).
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]


def _locate(folder: str) -> Path:
    local = _CHECKOUT / folder
    if local.is_dir() and (_CHECKOUT / "pyproject.toml").is_file():   # a checkout
        return local
    return Path(str(resources.files(f"vgpu_compiler.{folder}")))


def grammar_path() -> Path:
    """The folder holding ``field.lark``."""
    return _locate("grammar")


def templates_dir() -> Path:
    """The folder holding the GLSL templates."""
    return _locate("templates")
