"""``python -m vgpu_compiler.cli``: the same as ``vgpuc``."""
import sys

from .main import main

sys.exit(main())
