"""Kernels built once: algorithms as Python that builds a statement IR (ir.py), printed
by one C-style printer (printer.py) with a target's spellings (targets/). See
docs/internals.md, "Kernels built once (in progress)", for what is built here so far."""
