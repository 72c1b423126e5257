"""One builder per piece of a kernel, written once as IR (codegen/ir.py)."""
