"""What every shading-language backend shares, in no language of its own.

``lower.describe`` decides the GPU mapping of a field as a kernel description
(``kernel.py``); ``printing.print_kernel`` prints it with a ``Dialect``
(``dialect.py``: a table of words with a few overrides; GLSL's table is the base
the others replace entries of); ``render.Printer`` prints IR expressions;
``template.render_kernel`` lays a printed kernel out through the dialect's
Jinja2 templates. The GLSL and WGSL backends import this package; it imports no
backend (tests/project/test_layering.py).
"""
