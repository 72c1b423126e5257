"""Math a target lacks, written as IR once (the builders call these, never a target's
own spelling): the finite test where there is no isnan/isinf, and roots where pow is
not accurate enough (GLSL has no double pow; templates' vg_root is exact to rounding)."""
from __future__ import annotations

from . import ir


def nonfinite(t, x) -> ir.Expr:
    """x is NaN or infinite."""
    if not t.has_isnan:
        return ir.call("nonfinite", x)
    return ir.or_(ir.call("isinf", x), ir.call("isnan", x))


def finite(t, x) -> ir.Expr:
    if not t.has_isnan:
        return ir.not_(ir.call("nonfinite", x))
    return ir.and_(ir.not_(ir.call("isnan", x)), ir.not_(ir.call("isinf", x)))


def finite_flag(t, x) -> ir.Expr:
    """``finite`` as a 0/1 flag of the select form (ir.Bits: no short circuit)."""
    if not t.has_isnan:
        return ir.not_(ir.call("nonfinite", x))
    return ir.band(ir.not_(ir.call("isnan", x)), ir.not_(ir.call("isinf", x)))


def root(t, x, m: int) -> ir.Expr:
    """x^(1/m) for x > 0."""
    if t.accurate_pow:
        return ir.call("pow", x, ir.f(1.0 / m))
    return ir.call("root", x, ir.i(m))


def scaled_inverse_root(t, s, x, m: int) -> ir.Expr:
    """s * x^(-1/m) for x > 0 (the controller's raw factor): ``s * pow(x, -1/m)`` where
    pow is accurate (numpy's form, ir/controller.py), else ``s / root(x, m)``."""
    if t.accurate_pow:
        return ir.mul(s, ir.call("pow", x, ir.f(-1.0 / m)))
    return ir.div(s, ir.call("root", x, ir.i(m)))
