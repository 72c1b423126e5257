"""``vgpuc``, the command line of VGPU (``main`` is the entry point)."""
from .main import main

__all__ = ["main"]
