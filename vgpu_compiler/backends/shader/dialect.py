"""A dialect: every word of one GPU language that a printed kernel contains, for one
working dtype. The tables are codegen's targets (codegen/targets: base.py the C
family's table and the class, glsl.py, wgsl.py and c.py each language's overrides),
the one source of type names, literals, operators, builtins, casts and declarations
for both printers; here are GLSL's under the names the backends know, the GLSL
backend's refusal of a float64 op, and the mangling of user names.

The kernel description (kernel.py) and the lowering (lower.py) hold no spelling of
their own: ``printing.print_kernel(kernel, dialect)`` prints with one of these, and the
templates lay the result out.
"""
from __future__ import annotations

from ... import spelling as S
from ...codegen.targets.base import (BINARY, FLOAT_OPS, HELPER_DEPS, INT_OPS, LOOP_HELPERS,
                                     OBSERVE, REDUCE_NEUTRAL, RULES, UNARY)
from ...codegen.targets.base import Target as Dialect
from ...codegen.targets.glsl import DIALECTS, FLOAT64_MISSING, GLSL_FLOAT32, GLSL_FLOAT64
from ...errors import BackendError, Span
from .. import fastest

FLOAT32, FLOAT64 = GLSL_FLOAT32, GLSL_FLOAT64        # the names the tests and callers know


def float64_error(op_name: str, span: Span | None) -> BackendError:
    return BackendError(
        f"`{op_name}` has no double-precision version on the GLSL backend "
        f"(OpenGL has double arithmetic, sqrt, abs, floor, ceil, min, max, clamp, sign and "
        f"integer powers only; VGPU adds exp, log and log2); use "
        f"{S.setting('dtype', 'float32')}, or "
        f"{S.setting('backend', fastest('float64', exclude=('glsl',)))} for float64",
        span=span)


# --- names ---------------------------------------------------------------------------
def mangle(prefix: str, name: str) -> str:
    """The kernel's identifier for a user name: a prefix, so never a keyword of a GPU
    language, and never containing '__' (reserved in GLSL and WGSL)."""
    if "__" in name or name.startswith("_") or name.endswith("_"):
        return prefix + "X" + name.replace("_", "_u")
    return f"{prefix}_{name}"


__all__ = ["Dialect", "DIALECTS", "GLSL_FLOAT32", "GLSL_FLOAT64", "FLOAT32", "FLOAT64",
           "BINARY", "UNARY", "INT_OPS", "FLOAT_OPS", "RULES", "HELPER_DEPS", "OBSERVE",
           "LOOP_HELPERS", "REDUCE_NEUTRAL", "FLOAT64_MISSING", "float64_error", "mangle"]
