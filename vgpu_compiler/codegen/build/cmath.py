"""The C kernels' own math, written once as IR (the cpu backend only: C has a C library,
so these are what is faster inline than its calls, not what the shaders lack, which is
codegen/build/helpers.py). templates/helpers.c.j2 prints them by name (``k.built``) where
its comments say why each is inline; CUDA calls its library instead (``{% if not cuda %}``).

- ``vg_exp`` (and ``vg_pow2f`` / ``vg_pow2``, 2^q from the exponent bits): SLEEF's xexpf /
  xexp (u10): Cody-Waite reduction by ln 2, a polynomial (float64: Estrin's scheme), the
  scale 2^q in two halves, so that subnormal and overflowing results round once; outside
  the range, and NaN, are selects at the end. Arithmetic only, ``always_inline``, so that
  gcc vectorises it in the lane loop with the code around it.
- ``vg_log`` / ``vg_log32`` (fdlibm), ``vg_tanh`` (Cephes), ``vg_sincos32`` with ``vg_pow2d``
  (FreeBSD's sinf/cosf in double): the same, branch-free, always_inline; ``vg_log32``,
  ``vg_sincos32`` and ``vg_pow2d`` are float32 in every dtype (``FLOAT32``);
- ``vg_sign``, ``vg_toint``, ``vg_pow``: numpy's meaning of sign, int() and x ^ y (CUDA's too).

The fused multiply-adds are the builtin ``fma`` (C: the VG_FMAF / VG_FMA macros of the
template: an fma where the target has one, a product and a sum elsewhere). The literals
are the binary values of the constants of the original code (``_f32``: a float32 constant
from its decimal, rounded once, as the C compiler does).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import ir
from ...ir.ops import Op
from ..ir import F64, FLOAT, INT, U64, UINT, Assign, Let, Return, Var


def _f32(text: str) -> ir.Lit:
    """A float32 constant as the C compiler reads ``text`` + "f": the decimal rounded once
    to float32 (nearest, ties to even), not through a double."""
    exact = Fraction(text)
    near = np.float32(float(exact))
    lo, hi = np.nextafter(near, np.float32(-np.inf)), np.nextafter(near, np.float32(np.inf))
    best = min((near, lo, hi), key=lambda c: (abs(Fraction(float(c)) - exact),
                                              int(np.frombuffer(c.tobytes(), np.uint32)[0]) & 1))
    return ir.f(float(best))


# inf and NaN of the function's own dtype (vg_inf() is the kernel's: a double in vg_log32
# of a float64 kernel, which would widen its lane loop)
_INF = ir.call("inf")


def _fma(a, b, c):
    return ir.call("fma", a, b, c)


def _pow2_64(name: str, note: str) -> ir.Function:
    """2^q as a double from its exponent bits (q a normal exponent)."""
    bits = ir.shl(ir.call("to_bits64", ir.add(Var("q"), ir.i(1023))), 52)
    return ir.Function(name, ((INT, "q"),), F64, (Return(ir.call("f64_bits", bits)),), note,
                       always_inline=True)


def pow2(t) -> ir.Function:
    """2^q from the exponent bits: q in [-126, 127] (float32), [-1022, 1023] (float64)."""
    if t.dtype == "float64":
        return _pow2_64("vg_pow2", "2^q, q in [-1022, 1023]")
    bits = ir.shl(ir.call("to_bits_int", ir.add(Var("q"), ir.i(127))), 23)
    return ir.Function("vg_pow2f", ((INT, "q"),), FLOAT,
                       (Return(ir.call("float_bits", bits)),), "2^q, q in [-126, 127]",
                       always_inline=True)


def pow2d(t) -> ir.Function:
    return _pow2_64("vg_pow2d", "2^q, normal q")


def exp(t) -> ir.Function:
    x, d, z, kf, q, s, u = (Var(c) for c in ("x", "d", "z", "kf", "q", "s", "u"))
    single = t.dtype == "float32"
    F = _f32 if single else (lambda text: ir.f(float(text)))
    lo, hi = (F("-104.0"), F("104.0")) if single else (F("-1000.0"), F("710.0"))
    p2 = "vg_pow2f" if single else "vg_pow2"
    magic = F("12582912.0" if single else "6755399441055744.0")
    body = [
        Let("d", FLOAT, ir.Select(ir.and_(ir.ge(x, lo), ir.le(x, hi)), x, F("0.0")),
            comment="(outside, NaN: below)"),
        Let("z", FLOAT, ir.mul(d, F("1.44269504088896341" if single
                                    else "1.442695040888963407359924681001892137"))),
        Let("kf", FLOAT, ir.sub(ir.add(z, magic), magic),
            comment="rint(z): 1.5 * 2^" + ("23" if single else "52")),
        Let("q", INT, ir.call("to_int", kf))]
    if single:
        body += [
            Let("s", FLOAT, _fma(kf, F("-0.693145751953125"), d), mutable=True),
            Assign(s, _fma(kf, F("-1.428606765330187045e-06"), s)),
            Let("u", FLOAT, F("0.000198527617612853646278381"), mutable=True)]
        for c in ("0.00139304355252534151077271", "0.00833336077630519866943359",
                  "0.0416664853692054748535156", "0.166666671633720397949219", "0.5"):
            body.append(Assign(u, _fma(u, s, F(c))))
        body.append(Assign(u, ir.add(F("1.0"), _fma(ir.mul(s, s), u, s))))
    else:
        s2, s4, s8 = Var("s2"), Var("s4"), Var("s8")
        body += [
            Let("s", FLOAT, _fma(kf, F("-.69314718055966295651160180568695068359375"), d),
                mutable=True),
            Assign(s, _fma(kf, F("-.28235290563031577122588448175013436025525412068e-12"), s)),
            Let("s2", FLOAT, ir.mul(s, s)), Let("s4", FLOAT, ir.mul(s2, s2)),
            Let("s8", FLOAT, ir.mul(s4, s4))]
        pairs = {"p98": ("+0.2081276378237164457e-8", "+0.2511210703042288022e-7"),
                 "p76": ("+0.2755762628169491192e-6", "+0.2755723402025388239e-5"),
                 "p54": ("+0.2480158687479686264e-4", "+0.0001984126989855865850"),
                 "p32": ("+0.001388888888914497797", "+0.008333333333316527367"),
                 "p10": ("+0.04166666666666693206", "+0.1666666666666669072")}
        for name, (a, b) in pairs.items():
            body.append(Let(name, FLOAT, _fma(s, F(a), F(b))))
        p = {name: Var(name) for name in pairs}
        body += [
            Let("u", FLOAT, _fma(s8, p["p98"], _fma(s4, _fma(s2, p["p76"], p["p54"]),
                                                    _fma(s2, p["p32"], p["p10"]))),
                mutable=True),
            Assign(u, _fma(u, s, F("0.5"))),
            Assign(u, ir.add(F("1.0"), _fma(s2, u, s)))]
    half = ir.shr(q, 1)
    body += [
        Assign(u, ir.mul(ir.mul(u, ir.call(p2, half)), ir.call(p2, ir.sub(q, half)))),
        Assign(u, ir.Select(ir.lt(x, lo), F("0.0"), u)),
        Assign(u, ir.Select(ir.gt(x, hi), _INF, u)),
        Return(ir.Select(ir.ne(x, x), x, u))]
    return ir.Function("vg_exp", ((FLOAT, "x"),), FLOAT, tuple(body), always_inline=True)


def _log(t, name: str) -> ir.Function:
    """fdlibm's / musl's logf and log without their branches (x = 2^k (1 + f), 1 + f in
    [sqrt(2)/2, sqrt(2)), log(1 + f) = 2 atanh(s), s = f / (2 + f), a polynomial in s^2,
    k ln 2 in two halves): a subnormal is scaled by 2^25 (2^54) first; zero, negatives, inf
    and NaN are selects at the end."""
    x, k, f, s, z, w, r = (Var(c) for c in ("x", "k", "f", "s", "z", "w", "r"))
    hfsq, R, dk, t1, t2, hx = (Var(c) for c in ("hfsq", "R", "dk", "t1", "t2", "hx"))
    single = t.dtype == "float32"
    F = _f32 if single else (lambda text: ir.f(float(text)))
    sub = Var("sub")
    tiny, scale, shift = (("1.17549435e-38", "33554432.0", 25) if single
                          else ("2.2250738585072014e-308", "18014398509481984.0", 54))
    scaled = ir.call("bits", ir.Select(sub, ir.mul(x, F(scale)), x))
    body = [Let("sub", INT, ir.lt(x, F(tiny)), comment="(and 0, negatives)")]
    if single:
        body += [
            Let("ix", UINT, ir.add(scaled, ir.sub(ir.hexu(0x3f800000), ir.hexu(0x3f3504f3))),
                comment="2^25 if subnormal"),
            Let("k", INT, ir.sub(ir.sub(ir.call("to_int", ir.shr(Var("ix"), 23)), ir.i(0x7f)),
                                 ir.Select(sub, ir.i(shift), ir.i(0)))),
            Let("f", FLOAT, ir.sub(ir.call("float_bits", ir.add(
                ir.band(Var("ix"), ir.hexu(0x007fffff)), ir.hexu(0x3f3504f3))), F("1.0"))),
            Let("s", FLOAT, ir.div(f, ir.add(F("2.0"), f))),
            Let("z", FLOAT, ir.mul(s, s)), Let("w", FLOAT, ir.mul(z, z)),
            Let("t1", FLOAT, ir.mul(w, ir.add(ir.f(0xccce13 * 2.0**-25),
                                              ir.mul(w, ir.f(0xf89e26 * 2.0**-26))))),
            Let("t2", FLOAT, ir.mul(z, ir.add(ir.f(0xaaaaaa * 2.0**-24),
                                              ir.mul(w, ir.f(0x91e9ee * 2.0**-25))))),
            Let("R", FLOAT, ir.add(t2, t1)),
            Let("hfsq", FLOAT, ir.mul(ir.mul(F("0.5"), f), f))]
        lo, hi = "9.0580006145e-06", "6.9313812256e-01"
    else:
        vu = Var("vu")
        body += [
            Let("vu", U64, scaled, comment="2^54 if subnormal"),
            Let("hx", UINT, ir.add(ir.call("to_uint", ir.shr(vu, 32)),
                                   ir.sub(ir.hexu(0x3ff00000), ir.hexu(0x3fe6a09e))),
                mutable=True),
            Let("k", INT, ir.sub(ir.sub(ir.call("to_int", ir.shr(hx, 20)), ir.i(0x3ff)),
                                 ir.Select(sub, ir.i(shift), ir.i(0)))),
            Assign(hx, ir.add(ir.band(hx, ir.hexu(0x000fffff)), ir.hexu(0x3fe6a09e))),
            Let("f", FLOAT, ir.sub(ir.call("float_bits", ir.bor(
                ir.shl(ir.call("u64", hx), 32), ir.band(vu, ir.hexu(0xffffffff)))), F("1.0"))),
            Let("hfsq", FLOAT, ir.mul(ir.mul(F("0.5"), f), f)),
            Let("s", FLOAT, ir.div(f, ir.add(F("2.0"), f))),
            Let("z", FLOAT, ir.mul(s, s)), Let("w", FLOAT, ir.mul(z, z)),
            Let("t1", FLOAT, ir.mul(w, ir.add(F("3.999999999940941908e-01"), ir.mul(w, ir.add(
                F("2.222219843214978396e-01"), ir.mul(w, F("1.531383769920937332e-01"))))))),
            Let("t2", FLOAT, ir.mul(z, ir.add(F("6.666666666666735130e-01"), ir.mul(w, ir.add(
                F("2.857142874366239149e-01"), ir.mul(w, ir.add(
                    F("1.818357216161805012e-01"),
                    ir.mul(w, F("1.479819860511658591e-01"))))))))),
            Let("R", FLOAT, ir.add(t2, t1))]
        lo, hi = "1.90821492927058770002e-10", "6.93147180369123816490e-01"
    body += [
        Let("dk", FLOAT, ir.call("to_float", k)),
        Let("r", FLOAT, ir.add(ir.add(ir.sub(ir.add(ir.mul(s, ir.add(hfsq, R)),
                                                    ir.mul(dk, F(lo))), hfsq), f),
                               ir.mul(dk, F(hi))), mutable=True),
        Assign(r, ir.Select(ir.eq(x, _INF), x, r)),
        Assign(r, ir.Select(ir.eq(x, F("0.0")), ir.Un(Op.NEG, _INF), r)),
        Return(ir.Select(ir.or_(ir.lt(x, F("0.0")), ir.ne(x, x)), ir.call("nan"), r))]
    return ir.Function(name, ((FLOAT, "x"),), FLOAT, tuple(body), always_inline=True)


def log(t) -> ir.Function:
    return _log(t, "vg_log")


def log32(t) -> ir.Function:
    """The normal's log (Box-Muller's, float32 in every dtype): printed with the float32
    target (``FLOAT32``)."""
    return _log(t, "vg_log32")


def tanh(t) -> ir.Function:
    """Cephes' tanhf / tanh without their branches: x + x z P(z), z = x^2, below 0.625 in
    magnitude (float64: x + x z P(z) / Q(z)), else 1 - 2 / (exp(2 |x|) + 1) with vg_exp, on
    |x| and given x's sign."""
    x, ax, z, p, q = (Var(c) for c in ("x", "ax", "z", "p", "q"))
    single = t.dtype == "float32"
    F = _f32 if single else (lambda text: ir.f(float(text)))
    body = [Let("ax", FLOAT, ir.call("fabs", x)), Let("z", FLOAT, ir.mul(x, x))]
    if single:
        body.append(Let("p", FLOAT, _fma(F("-5.70498872745e-3"), z, F("2.06390887954e-2")),
                        mutable=True))
        for c in ("-5.37397155531e-2", "1.33314422036e-1", "-3.33332819422e-1"):
            body.append(Assign(p, _fma(p, z, F(c))))
        small = _fma(ir.mul(p, z), ax, ax)
    else:
        body += [
            Let("p", FLOAT, _fma(_fma(F("-9.64399179425052238628e-1"), z,
                                      F("-9.92877231001918586564e1")), z,
                                 F("-1.61468768441708447952e3"))),
            Let("q", FLOAT, _fma(_fma(ir.add(z, F("1.12811678491632931402e2")), z,
                                      F("2.23548839060100448583e3")), z,
                                 F("4.84406305325125486048e3")))]
        small = _fma(ir.mul(z, ir.div(p, q)), ax, ax)
    one = F("1.0")
    body += [
        Let("small", FLOAT, small),
        Let("big", FLOAT, ir.sub(one, ir.div(F("2.0"), ir.add(
            ir.call("vg_exp", ir.add(ax, ax)), one)))),
        Return(ir.call("copysign", ir.Select(ir.lt(ax, F("0.625")), Var("small"), Var("big")),
                       x))]
    return ir.Function("vg_tanh", ((FLOAT, "x"),), FLOAT, tuple(body), always_inline=True)


def sincos32(t) -> ir.Function:
    """float32 sin (c = 0) and cos (c = 1): FreeBSD's sinf/cosf without their branches, in
    double precision and rounded once. |x| < 2^28: x - n pi/2 with pi/2 in two parts;
    larger (``full``): Payne-Hanek, x 2/pi mod 4 from four 24-bit pieces of 2/pi (the
    template's table ``vg_2opi24``) chosen by x's exponent, each product exact, their sum
    two-summed; |x| < 2^-12: x and 1; then the kernels __kernel_sindf / __kernel_cosdf.
    Both reductions are computed for every lane (selects, no branch)."""
    x, c, full = Var("x"), Var("c"), Var("full")
    V = {n: Var(n) for n in ("bu", "d", "fn", "rm", "e", "E", "M", "i0", "w", "f0", "f1",
                             "f2", "f3", "a", "s", "t", "err", "nh", "rh", "neg", "big", "n",
                             "r", "z", "ww", "cs", "sn", "q", "v", "y", "tiny")}
    d = lambda value: ir.Lit(float(value), F64)                    # noqa: E731
    fl = lambda e: ir.call("floor64", e)                          # noqa: E731

    def piece(j: int, shift: int):
        at = V["i0"] if j == 0 else ir.add(V["i0"], ir.i(j))
        w = V["w"] if shift == 0 else ir.sub(V["w"], ir.i(shift))
        return ir.mul(ir.mul(V["M"], ir.Index("vg_2opi24", at)), ir.call("vg_pow2d", w))

    def mod4(v):
        return Assign(v, ir.mul(d(4.0), fl(ir.mul(v, d(0.25)))), Op.SUB)
    magic = d(6755399441055744.0)
    z, r, ww = V["z"], V["r"], V["ww"]
    body = (
        Let("bu", UINT, ir.call("bits", x)),
        Let("d", F64, ir.call("to_f64", x)),
        ir.Comment("medium: |x| < 2^28: x - n pi/2, pi/2 in two parts"),
        Let("fn", F64, ir.sub(ir.add(ir.mul(V["d"], d("6.36619772367581382433e-01")), magic),
                              magic)),
        Let("rm", F64, ir.sub(ir.sub(V["d"], ir.mul(V["fn"], d("1.57079631090164184570e+00"))),
                              ir.mul(V["fn"], d("1.58932547735281966916e-08")))),
        ir.Comment("huge: |x| = M 2^E, x 2/pi mod 4 from four 24-bit pieces of 2/pi "
                   "(Payne-Hanek)"),
        Let("e", INT, ir.call("to_int", ir.band(ir.shr(V["bu"], 23), ir.hexu(0xff)))),
        Let("E", INT, ir.sub(ir.Select(ir.lt(V["e"], ir.i(155)), ir.i(155), V["e"]), ir.i(150)),
            comment="(>= 5; the medium path below)"),
        Let("M", F64, ir.call("to_f64", ir.bor(ir.band(V["bu"], ir.hexu(0x7fffff)),
                                               ir.hexu(0x800000)))),
        Let("i0", INT, ir.div(ir.sub(V["E"], ir.i(2)), ir.i(24)), comment="0 .. 4"),
        Let("w", INT, ir.sub(V["E"], ir.mul(ir.i(24), ir.add(V["i0"], ir.i(1)))),
            comment="-22 .. 1"),
        Let("f0", F64, piece(0, 0), mutable=True),
        Let("f1", F64, piece(1, 24), mutable=True),
        Let("f2", F64, piece(2, 48)),
        Let("f3", F64, piece(3, 72)),
        mod4(V["f0"]), mod4(V["f1"]),
        Let("a", F64, ir.add(V["f0"], V["f1"]), mutable=True, comment="exact (49 bits at most)"),
        mod4(V["a"]),
        Let("s", F64, ir.add(V["a"], V["f2"])),
        Let("t", F64, ir.sub(V["s"], V["a"])),
        Let("err", F64, ir.add(ir.sub(V["a"], ir.sub(V["s"], V["t"])), ir.sub(V["f2"], V["t"])),
            comment="two-sum"),
        Let("nh", F64, fl(ir.add(V["s"], d(0.5)))),
        Let("rh", F64, ir.mul(ir.add(ir.sub(V["s"], V["nh"]), ir.add(V["err"], V["f3"])),
                              d("1.57079632679489661923"))),
        Let("neg", INT, ir.call("to_int", ir.shr(V["bu"], 31)),
            comment="(the pieces are of |x|)"),
        Let("big", INT, ir.and_(full, ir.ge(V["e"], ir.i(155))), comment="|x| >= 2^28"),
        Let("n", INT, ir.Select(V["big"], ir.Select(V["neg"], ir.Un(
            Op.NEG, ir.call("to_int", V["nh"])), ir.call("to_int", V["nh"])),
            ir.call("to_int", V["fn"]))),
        Let("r", F64, ir.Select(V["big"], ir.Select(V["neg"], ir.Un(Op.NEG, V["rh"]), V["rh"]),
                                V["rm"])),
        Let("z", F64, ir.mul(r, r)),
        Let("ww", F64, ir.mul(z, z)),
        Let("cs", F64, ir.add(
            ir.add(ir.add(d(1.0), ir.mul(z, d(-0x1ffffffd0c5e81 * 2.0**-54))),
                   ir.mul(ww, d(0x155553e1053a42 * 2.0**-57))),
            ir.mul(ir.mul(ww, z), ir.add(d(-0x16c087e80f1e27 * 2.0**-62),
                                         ir.mul(z, d(0x199342e0ee5069 * 2.0**-68)))))),
        Let("sn", F64, ir.add(
            ir.add(r, ir.mul(ir.mul(z, r), ir.add(d(-0x15555554cbac77 * 2.0**-55),
                                                  ir.mul(z, d(0x111110896efbb2 * 2.0**-59))))),
            ir.mul(ir.mul(ir.mul(z, r), ww),
                   ir.add(d(-0x1a00f9e2cae774 * 2.0**-65),
                          ir.mul(z, d(0x16cd878c3b46a7 * 2.0**-71)))))),
        Let("q", INT, ir.add(V["n"], c), comment="cos x = sin(x + pi/2)"),
        Let("v", F64, ir.Select(ir.band(V["q"], ir.i(1)), V["cs"], V["sn"])),
        Let("y", FLOAT, ir.call("f32", ir.Select(ir.band(V["q"], ir.i(2)),
                                                 ir.Un(Op.NEG, V["v"]), V["v"]))),
        Let("tiny", FLOAT, ir.Select(c, ir.f(1.0), x), comment="|x| < 2^-12: x (keeps -0), 1"),
        Return(ir.Select(ir.eq(V["e"], ir.i(255)), ir.sub(x, x),
                         ir.Select(ir.lt(V["e"], ir.i(115)), V["tiny"], V["y"]))))
    return ir.Function("vg_sincos32", ((FLOAT, "x"), (INT, "c"), (INT, "full")), FLOAT, body,
                       always_inline=True)


def sign(t) -> ir.Function:
    """numpy's sign: NaN stays NaN, -0 and 0 give 0."""
    x = Var("x")
    return ir.Function("vg_sign", ((FLOAT, "x"),), FLOAT, (Return(ir.Select(
        ir.call("isnan", x), ir.call("vg_nan"),
        ir.Select(ir.gt(x, ir.f(0.0)), ir.f(1.0),
                  ir.Select(ir.lt(x, ir.f(0.0)), ir.f(-1.0), ir.f(0.0))))),))


def toint(t) -> ir.Function:
    x, f = Var("x"), Var("f")
    return ir.Function("vg_toint", ((FLOAT, "x"),), INT, (
        Let("f", F64, ir.call("floor64", ir.call("to_f64", x))),
        Return(ir.Select(ir.and_(ir.ge(f, ir.Lit(-2147483648.0, F64)),
                                 ir.lt(f, ir.Lit(2147483648.0, F64))),
                         ir.call("to_int", f), ir.sub(ir.i(-2147483647), ir.i(1))))),
        "int(x) floors; out of range or NaN: INT_MIN (what numpy gives on x86).")


def power(t) -> ir.Function:
    x, y = Var("x"), Var("y")
    return ir.Function("vg_pow", ((FLOAT, "x"), (FLOAT, "y")), FLOAT, (
        ir.If(ir.eq(y, ir.f(0.5)), (Return(ir.Select(
            ir.and_(ir.call("isinf", x), ir.lt(x, ir.f(0.0))), ir.call("vg_nan"),
            ir.call("vg_sqrt", x))),)),
        Return(ir.call("pow", x, y))),
        "x ^ y with numpy's (C pow's) meaning; x ^ 0.5 is sqrt(x) (numpy's power for a scalar "
        "0.5).")


BUILDERS = {"vg_pow2": pow2, "vg_exp": exp, "vg_log": log, "vg_log32": log32,
            "vg_tanh": tanh, "vg_pow2d": pow2d, "vg_sincos32": sincos32,
            "vg_sign": sign, "vg_toint": toint, "vg_pow": power}
# printed with the float32 target in every dtype (the normal's log; float32 sin and cos,
# which the normal's cos calls)
FLOAT32 = frozenset({"vg_log32", "vg_pow2d", "vg_sincos32"})
