"""``python -m vgpu_compiler``: the same as ``vgpuc``."""
import sys

from .cli.main import main

sys.exit(main())
