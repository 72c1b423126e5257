"""``python -m vgpu_compiler``: the same as ``vgpuc``."""
import sys

from .cli import main

sys.exit(main())
