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


def word_add(t, x: ir.Var, c) -> ir.Assign:
    """``x += c`` mod 2^32, on a word: masked where a word may be a 64-bit lane (C's
    ``vg_word``)."""
    if t.wide_mul != "u64":
        return ir.Assign(x, c, op=ir.Op.ADD)
    return ir.Assign(x, ir.call("word", ir.band(ir.add(x, c), ir.hexu(0xFFFFFFFF))))


def mulhilo_locals(t, name: str) -> tuple:
    """The locals that ``mulhilo(t, ..., name)`` assigns, declared once."""
    if t.wide_mul == "u64":
        return (ir.Let(name, ir.U64, None),)
    return (ir.Let(f"{name}_hi", ir.WORD, None), ir.Let(f"{name}_lo", ir.WORD, None))


def mulhilo(t, a, b, name: str, constant: bool = False) -> tuple:
    """(statements, hi, lo): the statements compute the 32 x 32-bit product of the words
    ``a * b`` into the locals of ``mulhilo_locals(t, name)``, ``hi`` and ``lo`` read its
    high and low words. ``constant``: both operands may be known when the kernel is
    compiled (Mesa 22.3, llvmpipe, folds umulExtended of constants to a high word of 0:
    the 16-bit halves fold right)."""
    if t.wide_mul == "u64":
        p = ir.Var(name)
        return ((ir.Assign(p, ir.mul(ir.call("u64", a), b)),),
                ir.call("word", ir.shr(p, 32)), ir.call("word", ir.band(p, ir.hexu(0xFFFFFFFF))))
    hi, lo = ir.Var(f"{name}_hi"), ir.Var(f"{name}_lo")
    if t.wide_mul == "extended" and not constant:
        return (ir.Do(ir.call("mulhilo", a, b, hi, lo)),), hi, lo
    return (ir.Assign(hi, ir.call(MULHI, a, b)), ir.Assign(lo, ir.mul(a, b))), hi, lo


MULHI = "vg_mulhi"


def mulhi_function() -> ir.Function:
    """``vg_mulhi(a, b)``: the high word of a * b from four 16-bit products (a = a1 2^16 +
    a0, b likewise), for a target whose ``wide_mul`` is not "u64" (mulhilo calls it)."""
    W, m, s = ir.WORD, ir.hexu(0xFFFF), 16
    a, b = ir.Var("a"), ir.Var("b")
    a0, a1, b0, b1, p00, p01, p10, p11, mid = (
        ir.Var(x) for x in ("a0", "a1", "b0", "b1", "p00", "p01", "p10", "p11", "mid"))
    body = (ir.Let(a0.name, W, ir.band(a, m)), ir.Let(a1.name, W, ir.shr(a, s)),
            ir.Let(b0.name, W, ir.band(b, m)), ir.Let(b1.name, W, ir.shr(b, s)),
            ir.Let(p00.name, W, ir.mul(a0, b0)), ir.Let(p01.name, W, ir.mul(a0, b1)),
            ir.Let(p10.name, W, ir.mul(a1, b0)), ir.Let(p11.name, W, ir.mul(a1, b1)),
            ir.Let(mid.name, W, ir.add(ir.add(ir.shr(p00, s), ir.band(p01, m)),
                                       ir.band(p10, m))),
            ir.Return(ir.add(ir.add(ir.add(p11, ir.shr(p01, s)), ir.shr(p10, s)),
                             ir.shr(mid, s))))
    return ir.Function(MULHI, ((W, "a"), (W, "b")), W, body,
                       "The high word of a * b from four 16-bit products (codegen/mathlib.py)")
