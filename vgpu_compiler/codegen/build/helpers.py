"""The math helpers that give an op numpy's meaning, each written once as IR and printed
in every dialect (templates/helpers.*.j2 insert them by name: ``k.built[name]``, under the
same ``{% if name in helpers %}`` as before, so a shader still has only the ones it calls;
C has them all, static inline).

What differs between the dialects is what each has, never the algorithm:
- ``vg_powi``: x ^ n by squaring, in double precision where the target has doubles
  (``"f64" in types``: GLSL, C), rounded once at the end, else in f32 (WGSL); a float32
  exponent is rounded to 24 bits first; C adds a fixed count of the same steps for a
  literal exponent (``lane_block``: the compiler unrolls them and the lane loop vectorises);
- ``vg_floordiv``, ``vg_fmod``: numpy's npy_divmod on the dialect's C fmod (``cfmod``:
  GLSL's and WGSL's vg_cfmod, C's libm fmod); where the target has no isnan (WGSL) a zero
  divisor and a NaN remainder are told by their bits (the driver may assume no NaN in
  compares);
- ``vg_ifloordiv``, ``vg_imod``: Python's int // and %, an error by zero; the division
  only ever sees a divisor other than 0 and -1; where a select evaluates both sides
  (``lazy_select``: WGSL) the error is reported only where the value is used (``live``);
- the shaders' own (``SHADER``, ``TWINS``, ``vg_powpos``, ``vg_cfmod``): NaN and infinity
  from the bits, numpy's sqrt, sign, int(), signbit, ceil and x ^ y; where the target has
  doubles (GLSL) ``vg_powpos`` and ``vg_cfmod`` compute in double, elsewhere (WGSL) in f32
  and on the bits: two algorithms, each written once; GLSL's float64 exp, log and log2
  (fdlibm's). The templates print a kernel's helpers in ``ORDER``.
"""
from __future__ import annotations

from .. import ir
from ..ir import BOOL, F64, FLOAT, INT, UINT, Assign, If, Let, Return, Var, While
from ...ir.ops import Op

INT_MIN = -2**31


def _isnan(t, x):
    return ir.call("isnan" if t.has_isnan else "vg_isnan", x)


def _isinf(t, x):
    return ir.call("isinf" if t.has_isnan else "vg_isinf", x)


def _is_zero(t, x):
    """x == 0 (either sign); by the bits where the target has no isnan."""
    if t.has_isnan:
        return ir.eq(x, ir.f(0.0))
    return ir.eq(ir.band(ir.call("bits", x), ir.hexu(0x7FFFFFFF)), ir.u(0))


def powi(t) -> ir.Function:
    wide = "f64" in t.types
    A = F64 if wide else FLOAT
    one = ir.Lit(1.0, F64) if wide else ir.f(1.0)
    x, n, m, r, b = Var("x"), Var("n"), Var("m"), Var("r"), Var("b")
    bit = (If(ir.ne(ir.band(m, ir.u(1)), ir.u(0)), (Assign(r, b, Op.MUL),)),
           Assign(b, b, Op.MUL), Assign(m, ir.shr(m, 1)))
    body = [Let("m", UINT, ir.Select(ir.lt(n, ir.i(0)), ir.sub(ir.u(0), ir.call("to_uint", n)),
                                     ir.call("to_uint", n)), mutable=True)]
    if t.dtype == "float32":
        body.append(If(ir.gt(m, ir.u(16777216)),
                       (Assign(m, ir.call("to_uint", ir.call("f32", m))),)))
    body += [Let("r", A, one, mutable=True),
             Let("b", A, ir.call("to_f64", x) if wide else x, mutable=True)]
    loop = While(ir.ne(m, ir.u(0)), bit)
    if t.lane_block:
        body.append(If(ir.and_(ir.call("constant_p", m), ir.lt(m, ir.u(256))), (
            ir.Comment("a literal exponent (x^3): a fixed count of the same steps, which the "
                       "compiler\nunrolls and folds, so that the lane loop around it still "
                       "vectorises"),
            ir.Loop("i", ir.i(0), ir.i(8), bit)), (loop,)))
    else:
        body.append(loop)
    value = ir.Select(ir.lt(n, ir.i(0)), ir.div(one, r), r)
    body.append(Return(ir.call("to_float", value) if wide else value))
    note = ("x ^ n for an int n, by squaring in double precision, rounded once at the end "
            "(numpy:\n0 ^ -n = inf, x ^ 0 = 1): float32 results are correctly rounded but for "
            "rare ties. The\nexponent is a float of the working dtype: in float32 |n| is "
            "rounded to 24 bits first." if wide else
            "x ^ n for an int n by squaring in f32 (numpy: 0 ^ -n = inf, x ^ 0 = 1). With no "
            "f64 the\nresult may differ from numpy's in the last bits (about log2(|n|) "
            "roundings).")
    return ir.Function("vg_powi", ((FLOAT, "x"), (INT, "n")), FLOAT, tuple(body), note)


def _npy_divmod_prelude(t, a, b, m) -> list:
    """m = C's fmod(a, b); where NaNs are told by the bits, a NaN m is the answer."""
    out = [Let("m", FLOAT, ir.call("cfmod", a, b))]
    if not t.has_isnan:
        out.append(If(_isnan(t, m), (Return(m),)))
    return out


def _sign_differs(b, m):
    return ir.ne(ir.lt(b, ir.f(0.0)), ir.lt(m, ir.f(0.0)))


def floordiv(t) -> ir.Function:
    a, b, m, d, f = Var("a"), Var("b"), Var("m"), Var("d"), Var("f")
    body = (If(_is_zero(t, b), (Return(ir.div(a, b)),)),
            *_npy_divmod_prelude(t, a, b, m),
            Let("d", FLOAT, ir.div(ir.sub(a, m), b), mutable=True),
            If(ir.and_(ir.ne(m, ir.f(0.0)), _sign_differs(b, m)),
               (Assign(d, ir.f(1.0), Op.SUB),)),
            If(ir.eq(d, ir.f(0.0)),
               (Return(ir.Select(ir.call("signbit", ir.div(a, b)), ir.f(-0.0), ir.f(0.0))),)),
            Let("f", FLOAT, ir.call("floor", d)),
            Return(ir.Select(ir.gt(ir.sub(d, f), ir.f(0.5)), ir.add(f, ir.f(1.0)), f)))
    return ir.Function("vg_floordiv", ((FLOAT, "a"), (FLOAT, "b")), FLOAT, body,
                       "Float // as numpy's floor_divide (npy_divmod): floor of (a - fmod(a, "
                       "b)) / b, snapped.")


def fmod(t) -> ir.Function:
    a, b, m = Var("a"), Var("b"), Var("m")
    zero = (If(ir.eq(b, ir.f(0.0)), (Return(ir.call("vg_nan")),)),) if t.has_isnan else ()
    body = (*zero, *_npy_divmod_prelude(t, a, b, m),
            If(ir.ne(m, ir.f(0.0)),
               (Return(ir.Select(_sign_differs(b, m), ir.add(m, b), m)),)),
            Return(ir.Select(ir.lt(b, ir.f(0.0)), ir.f(-0.0), ir.f(0.0))))
    return ir.Function("vg_fmod", ((FLOAT, "a"), (FLOAT, "b")), FLOAT, body,
                       "Float % as numpy's remainder (npy_divmod): the sign of the divisor"
                       + ("." if t.has_isnan else ";\nNaN for b = 0, as numpy (vg_cfmod's)."))


def _int_division(t, name: str, note: str, last) -> ir.Function:
    """An int // or % (``last``: its statements after the error and the divisor d)."""
    a, b, d = Var("a"), Var("b"), Var("d")
    zero = ir.eq(b, ir.i(0))
    params = ((INT, "a"), (INT, "b"), (UINT, "id"))
    fail = zero
    if t.lazy_select:
        params += ((BOOL, "live"),)
        fail = ir.and_(zero, Var("live"))
    body = (If(fail, (ir.Do(ir.call(t.fail, Var("id"), Var(t.at([])))),)),
            Let("odd", BOOL, ir.or_(zero, ir.eq(b, ir.i(-1)))),
            Let("d", INT, ir.Select(Var("odd"), ir.i(1), b)),
            *last(a, b, d))
    return ir.Function(name, params, INT, body, note)


def ifloordiv(t) -> ir.Function:
    def last(a, b, d):
        q = Var("q")
        return (Let("q", INT, ir.div(a, d), mutable=True),
                If(ir.and_(ir.ne(ir.mul(q, d), a),
                           ir.ne(ir.lt(a, ir.i(0)), ir.lt(d, ir.i(0)))),
                   (Assign(q, ir.i(1), Op.SUB),)),
                Return(ir.Select(Var("odd"), ir.Select(ir.eq(b, ir.i(0)), ir.i(0),
                                                       ir.call("neg_wrap", a)), q)))
    return _int_division(t, "vg_ifloordiv", (
        "Int // as Python's (floor); by zero: an error" + (" where the value is used (`live`)"
                                                           if t.lazy_select else "")
        + ", and 0.\nINT_MIN // -1 wraps to INT_MIN (numpy). The division only ever sees a "
        "divisor other than\n0 and -1, even in code the driver folds at compile time: its "
        "folder would trap (SIGFPE)\non x / 0 or INT_MIN / -1."), last)


def imod(t) -> ir.Function:
    def last(a, b, d):
        r = Var("r")
        return (Let("r", INT, ir.sub(a, ir.mul(ir.div(a, d), d)), mutable=True),
                If(ir.and_(ir.ne(r, ir.i(0)), ir.ne(ir.lt(r, ir.i(0)), ir.lt(d, ir.i(0)))),
                   (Assign(r, d, Op.ADD),)),
                Return(ir.Select(Var("odd"), ir.i(0), r)))
    return _int_division(t, "vg_imod", (
        "Int % as Python's (the sign of the divisor); by zero: an error" +
        (" where the value is used" if t.lazy_select else "")
        + ",\nand 0. The division never sees 0 or -1 (see vg_ifloordiv); x % -1 is 0."), last)


def _binary(name, params, value, note=None) -> ir.Function:
    return ir.Function(name, tuple((FLOAT, p) for p in params), FLOAT, (Return(value),), note)


def nan_min(t, name="vg_min", plain="min_plain") -> ir.Function:
    """min/max that propagate NaN (numpy's minimum/maximum): the dialect's own min/max
    (``min_plain``, ``max_plain``) of two numbers."""
    a, b = Var("a"), Var("b")
    return _binary(name, "ab", ir.Select(ir.or_(_isnan(t, a), _isnan(t, b)),
                                         ir.call("vg_nan"), ir.call(plain, a, b)),
                   "min/max propagate NaN (numpy's minimum/maximum)." if name == "vg_min"
                   else None)


def nan_max(t) -> ir.Function:
    return nan_min(t, "vg_max", "max_plain")


def fmax(t, name="vg_fmax", passed=ir.le) -> ir.Function:
    """An observer's peak (trough: ``vg_fmin``): a NaN operand e is passed over (numpy's
    fmax/fmin)."""
    m, e = Var("m"), Var("e")
    return _binary(name, "me", ir.Select(ir.or_(_isnan(t, e), passed(e, m)), m, e),
                   "an observer's peak/trough: a NaN operand is passed over (numpy's "
                   "fmax/fmin)." if name == "vg_fmax" else None)


def fmin(t) -> ir.Function:
    return fmax(t, "vg_fmin", lambda e, m: ir.Bin(Op.GE, e, m))


def clamp(t) -> ir.Function:
    return _binary("vg_clamp", ("x", "lo", "hi"), ir.call(
        "vg_min", ir.call("vg_max", Var("x"), Var("lo")), Var("hi")))


# --- float32 functions GLSL and WGSL lack or get wrong (Cephes' single-precision
# algorithms; C has libm's) ------------------------------------------------------------
def _poly(z, coeffs):
    """Horner's form of ``coeffs`` (highest first) in z, as written: ``(c0 * z + c1) * z
    - c2 ...`` (a negative coefficient after the first is subtracted)."""
    acc = ir.f(coeffs[0])
    for c in coeffs[1:]:
        acc = ir.sub(ir.mul(acc, z), ir.f(-c)) if c < 0 else ir.add(ir.mul(acc, z), ir.f(c))
    return acc


def _signed(t, x, r):
    """r with the sign bit of x."""
    return ir.Select(ir.call("signbit", x), ir.Un(Op.NEG, r), r)


def _unary(name, body, note=None) -> ir.Function:
    return ir.Function(name, ((FLOAT, "x"),), FLOAT, tuple(body), note)


def exps(t) -> ir.Function:
    x, k, r, p, n, h = (Var(c) for c in ("x", "k", "r", "p", "n", "h"))

    def pow2(e):
        return ir.call("float_bits", ir.shl(ir.call("to_uint", ir.add(e, ir.i(127))), 23))
    body = (Let("k", FLOAT, ir.call("floor", ir.add(ir.mul(ir.f(1.44269504088896341), x),
                                                    ir.f(0.5)))),
            Let("r", FLOAT, ir.sub(ir.sub(x, ir.mul(k, ir.f(0.693359375))),
                                   ir.mul(k, ir.f(-2.12194440e-4)))),
            Let("p", FLOAT, ir.add(ir.add(ir.mul(_poly(r, (
                1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                1.6666665459e-1, 5.0000001201e-1)), ir.mul(r, r)), r), ir.f(1.0))),
            Let("n", INT, ir.add(ir.call("to_int", k), Var("s"))),
            Let("h", INT, ir.div(n, ir.i(2))),
            Return(ir.mul(ir.mul(p, pow2(h)), pow2(ir.sub(n, h)))))
    return ir.Function("vg_exps", ((FLOAT, "x"), (INT, "s")), FLOAT, body, (
        "exp(x) * 2^s with one rounding, for |x| < 104 (Cephes expf: x = k ln2 + r, a "
        "polynomial\nfor exp(r), then 2^(k + s) in two exact factors, so subnormal results "
        "round once)."))


def exp(t) -> ir.Function:
    x = Var("x")
    return _unary("vg_exp", (
        If(ir.not_(ir.lt(ir.call("abs", x), ir.f(104.0))), (Return(ir.Select(
            ir.gt(x, ir.f(0.0)), ir.call("vg_inf"),
            ir.Select(ir.lt(x, ir.f(0.0)), ir.f(0.0), x))),)),
        Return(ir.call("vg_exps", x, ir.i(0)))),
        "exp to 1 ulp with subnormal results (the driver's is 3e-6 off for large |x| and "
        "flushes\nsubnormals to 0).")


def atan(t) -> ir.Function:
    x, a, y, z = Var("x"), Var("a"), Var("y"), Var("z")
    return _unary("vg_atan", (
        If(_isnan(t, x), (Return(x),)),
        Let("a", FLOAT, ir.call("abs", x), mutable=True),
        Let("y", FLOAT, ir.f(0.0), mutable=True),
        If(ir.gt(a, ir.f(2.414213562373095)),
           (Assign(y, ir.f(1.5707963267948966)), Assign(a, ir.div(ir.f(-1.0), a))),
           (If(ir.gt(a, ir.f(0.4142135623730950)),
               (Assign(y, ir.f(0.7853981633974483)),
                Assign(a, ir.div(ir.sub(a, ir.f(1.0)), ir.add(a, ir.f(1.0))))),),)),
        Let("z", FLOAT, ir.mul(a, a)),
        Assign(y, ir.add(ir.mul(ir.mul(_poly(z, (8.05374449538e-2, -1.38776856032e-1,
                                                 1.99777106478e-1, -3.33329491539e-1)),
                                       z), a), a), Op.ADD),
        Return(_signed(t, x, y))),
        "atan to 2 ulp (Cephes atanf): the driver's is 2e-5 off, and atan(NaN) is 0 there.")


def atan2(t) -> ir.Function:
    x, y, ax, ay, r = Var("x"), Var("y"), Var("ax"), Var("ay"), Var("r")
    body = (
        If(ir.or_(_isnan(t, x), _isnan(t, y)), (Return(ir.call("vg_nan")),)),
        Let("ax", FLOAT, ir.call("abs", x)), Let("ay", FLOAT, ir.call("abs", y)),
        Let("r", FLOAT, None),
        If(ir.and_(_isinf(t, ax), _isinf(t, ay)), (Assign(r, ir.f(0.7853981633974483)),), (
            If(ir.or_(ir.eq(ay, ir.f(0.0)), _isinf(t, ax)), (Assign(r, ir.f(0.0)),), (
                If(ir.or_(ir.eq(ax, ir.f(0.0)), _isinf(t, ay)),
                   (Assign(r, ir.f(1.5707963267948966)),),
                   (Assign(r, ir.call("vg_atan", ir.div(ay, ax))),)),)),)),
        If(ir.call("signbit", x),
           (Assign(r, ir.sub(ir.f(3.1415927410e+00), ir.sub(r, ir.f(-8.7422776573e-08)))),)),
        Return(_signed(t, y, r)))
    return ir.Function("vg_atan2", ((FLOAT, "y"), (FLOAT, "x")), FLOAT, body,
                       "atan2 with C's (numpy's) answers for zeros, infinities and NaN; pi - z "
                       "in two parts.")


def asin(t) -> ir.Function:
    x, a, big, z, s, p, r = (Var(c) for c in ("x", "a", "big", "z", "s", "p", "r"))
    return _unary("vg_asin", (
        Let("a", FLOAT, ir.call("abs", x)),
        If(ir.not_(ir.le(a, ir.f(1.0))), (Return(ir.call("vg_nan")),)),
        If(ir.lt(a, ir.f(1e-4)), (Return(x),)),
        Let("big", BOOL, ir.gt(a, ir.f(0.5))),
        Let("z", FLOAT, ir.Select(big, ir.mul(ir.f(0.5), ir.sub(ir.f(1.0), a)), ir.mul(a, a))),
        Let("s", FLOAT, ir.Select(big, ir.call("sqrt", z), a)),
        Let("p", FLOAT, ir.add(ir.mul(ir.mul(_poly(z, (
            4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2,
            1.6666752422e-1)), z), s), s)),
        Let("r", FLOAT, ir.Select(big, ir.sub(ir.f(1.5707963267948966), ir.add(p, p)), p)),
        Return(ir.Select(ir.lt(x, ir.f(0.0)), ir.Un(Op.NEG, r), r))),
        "asin to 2.5 ulp (Cephes asinf); NaN outside [-1, 1].")


def acos(t) -> ir.Function:
    x = Var("x")

    def asin_half(v):
        return ir.call("vg_asin", ir.call("sqrt", ir.mul(ir.f(0.5), v)))
    return _unary("vg_acos", (
        If(ir.not_(ir.le(ir.call("abs", x), ir.f(1.0))), (Return(ir.call("vg_nan")),)),
        If(ir.lt(x, ir.f(-0.5)), (Return(ir.sub(ir.f(3.14159265358979), ir.mul(
            ir.f(2.0), asin_half(ir.add(ir.f(1.0), x))))),)),
        If(ir.gt(x, ir.f(0.5)),
           (Return(ir.mul(ir.f(2.0), asin_half(ir.sub(ir.f(1.0), x)))),)),
        Return(ir.sub(ir.f(1.5707963267948966), ir.call("vg_asin", x)))),
        "acos through vg_asin (Cephes acosf).")


def _hyperbolic(t, name, small, small_body, big_body, note) -> ir.Function:
    """sinh and tanh: NaN stays NaN, ``small_body`` below ``small`` (a <= 1 for sinh),
    ``big_body`` above, the sign of x."""
    x, a = Var("x"), Var("a")
    return _unary(name, (
        Let("a", FLOAT, ir.call("abs", x)), Let("r", FLOAT, None),
        If(_isnan(t, x), (Return(x),), (If(small(a), small_body(a), big_body(a)),)),
        Return(_signed(t, x, Var("r")))), note)


def sinh(t) -> ir.Function:
    r, z, h = Var("r"), Var("z"), Var("h")
    return _hyperbolic(
        t, "vg_sinh", lambda a: ir.le(a, ir.f(1.0)),
        lambda a: (Let("z", FLOAT, ir.mul(a, a)),
                   Assign(r, ir.add(ir.mul(ir.mul(_poly(z, (
                       2.03721912945e-4, 8.33028376239e-3, 1.66667160211e-1)), z), a), a))),
        lambda a: (If(ir.lt(a, ir.f(104.0)),
                      (Let("h", FLOAT, ir.call("vg_exps", a, ir.i(-1))),
                       Assign(r, ir.sub(h, ir.div(ir.f(0.25), h)))),
                      (Assign(r, ir.call("vg_inf")),)),),
        "sinh: a polynomial below 1 (Cephes sinhf), e/2 - 1/(4 (e/2)) above, e/2 = exp(x) / 2 "
        "in one\nrounding: finite up to 89.4, as numpy.")


def cosh(t) -> ir.Function:
    x, a, h = Var("x"), Var("a"), Var("h")
    return _unary("vg_cosh", (
        Let("a", FLOAT, ir.call("abs", x)),
        If(_isnan(t, x), (Return(x),)),
        If(ir.lt(a, ir.f(104.0)), (Let("h", FLOAT, ir.call("vg_exps", a, ir.i(-1))),
                                   Return(ir.add(h, ir.div(ir.f(0.25), h))))),
        Return(ir.call("vg_inf"))),
        "cosh: e/2 + 1/(4 (e/2)), e/2 = exp(x) / 2 in one rounding (finite up to 89.4, as "
        "numpy).")


def tanh(t) -> ir.Function:
    r, z = Var("r"), Var("z")
    return _hyperbolic(
        t, "vg_tanh", lambda a: ir.lt(a, ir.f(0.625)),
        lambda a: (Let("z", FLOAT, ir.mul(a, a)),
                   Assign(r, ir.add(ir.mul(ir.mul(_poly(z, (
                       -5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
                       1.33314422036e-1, -3.33332819422e-1)), z), a), a))),
        lambda a: (If(ir.lt(a, ir.f(44.0)),
                      (Assign(r, ir.sub(ir.f(1.0), ir.div(ir.f(2.0), ir.add(
                          ir.call("vg_exps", ir.add(a, a), ir.i(0)), ir.f(1.0))))),),
                      (Assign(r, ir.f(1.0)),)),),
        "tanh: a polynomial below 0.625 (Cephes tanhf), 1 - 2 / (exp(2x) + 1) above; NaN "
        "stays NaN.")


def logpoly(t) -> ir.Function:
    """(f, e, p) as a vec3: x = 2^e (1 + f), p the polynomial (both dialects return the
    three as one value: WGSL has no out parameters)."""
    x, s, bits, e, m, f, z = (Var(c) for c in ("x", "s", "bits", "e", "m", "f", "z"))
    body = (
        Let("x", FLOAT, Var("x0"), mutable=True), Let("s", FLOAT, ir.f(0.0), mutable=True),
        If(ir.lt(x, ir.f(1.1754944e-38)),
           (Assign(x, ir.f(16777216.0), Op.MUL), Assign(s, ir.f(-24.0)))),
        Let("bits", UINT, ir.call("bits", x)),
        Let("e", FLOAT, ir.add(ir.call("to_float", ir.sub(ir.call("to_int", ir.shr(bits, 23)),
                                                          ir.i(126))), s), mutable=True),
        Let("m", FLOAT, ir.call("float_bits", ir.bor(ir.band(bits, ir.hexu(0x007FFFFF)),
                                                     ir.hexu(0x3F000000))),
            comment="in [0.5, 1)"),
        Let("f", FLOAT, None),
        If(ir.lt(m, ir.f(0.70710678)),
           (Assign(e, ir.f(1.0), Op.SUB), Assign(f, ir.sub(ir.add(m, m), ir.f(1.0)))),
           (Assign(f, ir.sub(m, ir.f(1.0))),)),
        Let("z", FLOAT, ir.mul(f, f)),
        Let("p", FLOAT, ir.mul(ir.mul(_poly(f, (
            7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1)), f), z)),
        Return(ir.call("vec3", f, e, Var("p"))))
    return ir.Function("vg_logpoly", ((FLOAT, "x0"),), "vec3", body, (
        "x = 2^e * (1 + f) with f in [sqrt(.5) - 1, sqrt(2) - 1] exactly (subnormals scaled "
        "by\n2^24 first); returns (f, e, the polynomial of log(1 + f) - f + f^2 / 2) (Cephes)."))


def _log(t, name, y, value, note) -> ir.Function:
    """log and log2 of the reduction (vg_logpoly): ``y(f, e, p)`` the correction,
    ``value(f, e, y)`` the result; 0, infinities, negatives and NaN first."""
    x = Var("x")
    f, e, p = Var("q.x"), Var("q.y"), Var("q.z")
    return _unary(name, (
        If(ir.or_(ir.not_(ir.gt(x, ir.f(0.0))), _isinf(t, x)), (Return(ir.Select(
            ir.eq(x, ir.f(0.0)), ir.Un(Op.NEG, ir.call("vg_inf")),
            ir.Select(ir.gt(x, ir.f(0.0)), x, ir.call("vg_nan")))),)),
        Let("q", "vec3", ir.call("vg_logpoly", x)),
        Let("y", FLOAT, y(f, e, p)),
        *value(f, e, Var("y"))), note)


def log(t) -> ir.Function:
    def half_f2(f):
        return ir.mul(ir.f(0.5), ir.mul(f, f))
    return _log(t, "vg_log",
                lambda f, e, p: ir.sub(ir.sub(p, ir.mul(ir.f(2.12194440e-4), e)), half_f2(f)),
                lambda f, e, y: (Return(ir.add(ir.add(f, y), ir.mul(ir.f(0.693359375), e))),),
                "log with numpy's accuracy near 1 and for subnormals (the driver's is 1e-3 off "
                "there).")


def log2(t) -> ir.Function:
    k = Var("k")
    return _log(t, "vg_log2",
                lambda f, e, p: ir.sub(p, ir.mul(ir.f(0.5), ir.mul(f, f))),
                lambda f, e, y: (Let("k", FLOAT, ir.f(0.44269504088896340736)), Return(
                    ir.add(ir.add(ir.add(ir.add(ir.mul(y, k), ir.mul(f, k)), y), f), e))),
                "log2 as vg_log (Cephes log2f).")


# --- numpy's meaning of sqrt, sign, int(), signbit, ceil and x ^ y in the shaders (C has
# its own: codegen/build/cmath.py, and libm) --------------------------------------------
def signbit(t) -> ir.Function:
    """The sign bit (true for -0.0 and negative NaNs): the top bit of the float's high word
    (``high_word``: the float's bits, a double's upper half)."""
    return ir.Function("vg_signbit", ((FLOAT, "x"),), BOOL, (Return(ir.ne(
        ir.shr(ir.call("high_word", Var("x")), 31), ir.u(0))),),
        "The sign bit (true for -0.0 and negative NaNs).")


def sqrt(t) -> ir.Function:
    x = Var("x")
    return _unary("vg_sqrt", (Return(ir.Select(ir.lt(x, ir.f(0.0)), ir.call("vg_nan"),
                                               ir.call("sqrt", x))),))


def sign(t) -> ir.Function:
    """numpy's sign: NaN gives x itself (npy's sign returns its operand for NaN)."""
    x = Var("x")
    return _unary("vg_sign", (If(_isnan(t, x), (Return(x),)), Return(ir.call("sign", x))))


def toint(t) -> ir.Function:
    return ir.Function("vg_toint", ((FLOAT, "x"),), INT,
                       (Return(ir.call("to_int", ir.call("floor", Var("x")))),),
                       "int(x) floors.")


def ceil(t) -> ir.Function:
    x, r = Var("x"), Var("r")
    return _unary("vg_ceil", (
        Let("r", FLOAT, ir.call("ceil", x)),
        Return(ir.Select(ir.and_(ir.eq(r, ir.f(0.0)), ir.call("signbit", x)), ir.f(-0.0), r))),
        "ceil keeping the sign of zero (the driver's double ceil gives +0 for -0 and -1e-300).")


def power(t) -> ir.Function:
    """x ^ y: the special cases of C's pow in order, then vg_powpos of |x| (and, where the
    target has no double for vg_powpos's once-rounded result, vg_powi for small integral
    y: products, closer than exp(y log x)); the sign of x for odd integral y."""
    x, y, ax, r = Var("x"), Var("y"), Var("ax"), Var("r")
    integral, odd = Var("integral"), Var("odd")
    one, zero = ir.f(1.0), ir.f(0.0)
    wide = "f64" in t.types
    last = (Assign(r, ir.call("vg_powpos", ax, y)),)
    if not wide:
        last = (If(ir.and_(integral, ir.le(ir.call("abs", y), ir.f(64.0))),
                   (Assign(r, ir.call("vg_powi", ax, ir.call("to_int", y))),), last),)
    body = (
        If(ir.eq(y, ir.f(0.5)), (Return(ir.call("vg_sqrt", x)),)),
        If(ir.or_(ir.eq(y, zero), ir.eq(x, one)), (Return(one),)),
        If(ir.or_(_isnan(t, x), _isnan(t, y)), (Return(ir.call("vg_nan")),)),
        Let("ax", FLOAT, ir.call("abs", x)),
        If(_isinf(t, y), (If(ir.eq(ax, one), (Return(one),)),
                          Return(ir.Select(ir.eq(ir.gt(ax, one), ir.gt(y, zero)),
                                           ir.call("vg_inf"), zero)))),
        Let("integral", BOOL, ir.eq(ir.call("floor", y), y)),
        Let("odd", BOOL, ir.and_(ir.and_(integral, ir.lt(ir.call("abs", y), ir.f(16777216.0))),
                                 ir.eq(ir.sub(y, ir.mul(ir.f(2.0), ir.call(
                                     "floor", ir.mul(y, ir.f(0.5))))), one))),
        If(ir.and_(ir.and_(ir.lt(x, zero), ir.not_(integral)), ir.not_(_isinf(t, x))),
           (Return(ir.call("vg_nan")),)),
        Let("r", FLOAT, None),
        If(ir.or_(ir.eq(ax, zero), _isinf(t, ax)),
           (Assign(r, ir.Select(ir.eq(ir.eq(ax, zero), ir.lt(y, zero)), ir.call("vg_inf"),
                                zero)),), last),
        Return(ir.Select(ir.and_(odd, ir.call("signbit", x)), ir.Un(Op.NEG, r), r)))
    return ir.Function("vg_pow", ((FLOAT, "x"), (FLOAT, "y")), FLOAT, body, (
        "x ^ y with numpy's (C pow's) meaning: (-2)^2 = 4, (-2)^0.5 = NaN, 0^-1 = inf; x ^ "
        "0.5 is\nsqrt(x) (numpy's power for a scalar 0.5: (-inf)^0.5 is NaN, (-0)^0.5 is -0)."))


def powpos_f32(t) -> ir.Function:
    """x ^ y for finite x > 0 and finite y where the target has no double (WGSL): exp(y
    log x) in f32."""
    t_ = Var("t")
    return ir.Function("vg_powpos", ((FLOAT, "x"), (FLOAT, "y")), FLOAT, (
        Let("t", FLOAT, ir.mul(Var("y"), ir.call("vg_log", Var("x")))),
        If(ir.or_(ir.gt(t_, ir.f(89.0)), ir.lt(t_, ir.f(-104.0))),
           (Return(ir.Select(ir.gt(t_, ir.f(0.0)), ir.call("vg_inf"), ir.f(0.0))),)),
        Return(ir.call("vg_exps", t_, ir.i(0)))), (
        "x ^ y for finite x > 0 and finite y: exp(y log x) in f32 (relative error about\n"
        "|y log x| 2^-24: with no f64 there is no once-rounded vg_powpos)."))


# --- NaN, infinity and the double-precision helpers OpenGL lacks (GLSL: doubles; WGSL
# has no f64) -------------------------------------------------------------------------
def _special(name, word32, word64):
    """A float of the kernel's type from its high word (NaN, infinity), through a variable:
    WGSL's constant expressions cannot be NaN or infinite."""
    def build(t) -> ir.Function:
        return ir.Function(name, (), FLOAT, (
            Let("bits", UINT, ir.hexu(word64 if t.dtype == "float64" else word32),
                mutable=True, comment="a variable: WGSL constant expressions cannot be NaN"
                if name == "vg_nan" else None),
            Return(ir.call("float_high", Var("bits")))))
    return build


def _by_bits(name, compare):
    """NaN and infinity by their bits (WGSL has neither isnan nor isinf)."""
    def build(t) -> ir.Function:
        return ir.Function(name, ((FLOAT, "x"),), BOOL, (Return(compare(
            ir.band(ir.call("bits", Var("x")), ir.hexu(0x7FFFFFFF)), ir.hexu(0x7F800000))),),
            "NaN and infinity by their bits (WGSL has neither isnan nor isinf)."
            if name == "vg_isnan" else None)
    return build


def _d(value) -> ir.Lit:
    return ir.Lit(float(value), F64)


def _dpow2(e):
    """2^e as a double from its exponent bits."""
    return ir.call("f64_words", ir.u(0), ir.shl(ir.call("to_uint", ir.add(e, ir.i(1023))), 20))


def dpow2(t) -> ir.Function:
    return ir.Function("vg_dpow2", ((INT, "e"),), F64, (Return(_dpow2(Var("e"))),),
                       "2^e as a double, for e in [-1022, 1023] (its exponent bits).")


def powpos_f64(t) -> ir.Function:
    """x ^ y for finite x > 0, finite y, in double precision rounded once to float."""
    x, y, hi, e, m, f, s, q, t_, k, r, p = (
        Var(c) for c in ("x", "y", "hi", "e", "m", "f", "s", "q", "t", "k", "r", "p"))
    # the series of atanh (q) and of exp (p) in Horner's form, a step a line
    series_q = [Assign(q, ir.add(ir.mul(q, s), ir.div(_d(1.0), _d(n))))
                for n in (17, 15, 13, 11, 9, 7, 5, 3)]
    series_p = [Assign(p, ir.add(ir.div(ir.mul(p, r), _d(n)), _d(1.0)))
                for n in range(12, 1, -1)]
    body = (
        Let("hi", UINT, ir.call("f64_high", ir.call("to_f64", x))),
        Let("e", INT, ir.sub(ir.call("to_int", ir.shr(hi, 20)), ir.i(1023)), mutable=True),
        Let("m", F64, ir.call("f64_words", ir.call("f64_low", ir.call("to_f64", x)),
                              ir.bor(ir.band(hi, ir.hexu(0x000FFFFF)), ir.hexu(0x3FF00000))),
            mutable=True),
        If(ir.gt(m, _d(1.4142135623730951)), (Assign(m, _d(0.5), Op.MUL),
                                              Assign(e, ir.i(1), Op.ADD))),
        Let("f", F64, ir.div(ir.sub(m, _d(1.0)), ir.add(m, _d(1.0)))),
        Let("s", F64, ir.mul(f, f)),
        Let("q", F64, ir.div(_d(1.0), _d(19.0)), mutable=True), *series_q,
        Assign(q, ir.add(ir.mul(q, s), _d(1.0))),
        Let("t", F64, ir.mul(ir.call("to_f64", y), ir.add(
            ir.mul(ir.call("to_f64", e), _d(0.6931471805599453)),
            ir.mul(ir.mul(_d(2.0), f), q)))),
        If(ir.or_(ir.gt(t_, _d(89.0)), ir.lt(t_, _d(-104.0))),
           (Return(ir.Select(ir.gt(t_, _d(0.0)), ir.call("vg_inf"), ir.f(0.0))),)),
        Let("k", F64, ir.call("floor", ir.add(ir.mul(t_, _d(1.4426950408889634)), _d(0.5)))),
        Let("r", F64, ir.sub(ir.sub(t_, ir.mul(k, _d(0.6931471803691238))),
                             ir.mul(k, _d(1.9082149292705877e-10)))),
        Let("p", F64, ir.add(ir.div(r, _d(13.0)), _d(1.0)), mutable=True), *series_p,
        Assign(p, ir.add(ir.mul(p, r), _d(1.0))),
        Return(ir.call("f32", ir.mul(p, _dpow2(ir.call("to_int", k))))))
    return ir.Function("vg_powpos", ((FLOAT, "x"), (FLOAT, "y")), FLOAT, body, (
        "x ^ y for finite x > 0 and finite y: exp(y log x) in double precision (log by atanh"
        "\nseries on [sqrt(.5), sqrt(2)), exp by Taylor on |r| <= ln2 / 2), rounded once to "
        "float.\nNo loops: the driver's loop limiter counts every loop iteration of a "
        "dispatch."))


def dexp(t) -> ir.Function:
    x, k, hi, lo, r, t_, c, y, n, h = (
        Var(c) for c in ("x", "k", "hi", "lo", "r", "t", "c", "y", "n", "h"))
    F = ir.f
    poly = F(4.13813679705723846039e-08)
    for a in (-1.65339022054652515390e-06, 6.61375632143793436117e-05,
              -2.77777777770155933842e-03, 1.66666666666666019037e-01):
        poly = ir.add(F(a), ir.mul(t_, poly))
    body = (
        If(ir.not_(ir.le(ir.call("abs", x), F(708.0))), (
            If(ir.call("isnan", x), (Return(x),)),
            If(ir.gt(x, F(709.782712893383973096)), (Return(ir.call("vg_inf")),)),
            If(ir.lt(x, F(-745.13321910194110842)), (Return(F(0.0)),)))),
        Let("k", FLOAT, ir.call("floor", ir.add(ir.mul(F(1.44269504088896338700), x),
                                                F(0.5)))),
        Let("hi", FLOAT, ir.sub(x, ir.mul(k, F(6.93147180369123816490e-01)))),
        Let("lo", FLOAT, ir.mul(k, F(1.90821492927058770002e-10))),
        Let("r", FLOAT, ir.sub(hi, lo)),
        Let("t", FLOAT, ir.mul(r, r)),
        Let("c", FLOAT, ir.sub(r, ir.mul(t_, poly))),
        Let("y", FLOAT, ir.sub(F(1.0), ir.sub(ir.sub(lo, ir.div(ir.mul(r, c), ir.sub(
            F(2.0), c))), hi))),
        Let("n", INT, ir.call("to_int", k)),
        Let("h", INT, ir.div(n, ir.i(2))),
        Return(ir.mul(ir.mul(y, ir.call("vg_dpow2", h)), ir.call("vg_dpow2", ir.sub(n, h)))))
    return _unary("vg_dexp", body, (
        "exp in double precision (OpenGL has none): fdlibm's e_exp.c. x = k ln2 + r with\n"
        "|r| <= ln2 / 2 (ln2 in two parts, the first with 11 zero bits so k * ln2_hi is\n"
        "exact), exp(r) from the rational form of a Remez polynomial in r^2, then 2^k in two"
        "\nexact factors so that a subnormal result rounds once. Within 1 ulp."))


def _dlog_reduction(t) -> tuple:
    """fdlibm's e_log.c reduction for a finite x > 0 (the locals k, f, hfsq, sr): x = 2^k
    (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)] (subnormals scaled by 2^54 first), s = f /
    (2 + f), log(1 + f) = f - (hfsq - sr) with hfsq = f^2/2, sr = s (hfsq + R(s^2)), R a
    Remez polynomial."""
    F = ir.f
    x, k, m, f, s, z, z2, t1, t2, hfsq = (
        Var(c) for c in ("x", "k", "m", "f", "s", "z", "z2", "t1", "t2", "hfsq"))
    return (
        Let("x", FLOAT, Var("x0"), mutable=True), Let("k", FLOAT, F(0.0), mutable=True),
        If(ir.lt(x, F(2.2250738585072014e-308)),
           (Assign(x, F(18014398509481984.0), Op.MUL), Assign(k, F(-54.0)))),
        Assign(k, ir.call("to_float", ir.sub(ir.call("to_int", ir.shr(
            ir.call("f64_high", x), 20)), ir.i(1023))), Op.ADD),
        Let("m", FLOAT, ir.call("f64_words", ir.call("f64_low", x), ir.bor(ir.band(
            ir.call("f64_high", x), ir.hexu(0x000FFFFF)), ir.hexu(0x3FF00000))),
            mutable=True, comment="[1, 2)"),
        If(ir.gt(m, F(1.41421356237309504880)), (Assign(m, F(0.5), Op.MUL),
                                                 Assign(k, F(1.0), Op.ADD))),
        Let("f", FLOAT, ir.sub(m, F(1.0))),
        Let("s", FLOAT, ir.div(f, ir.add(F(2.0), f))),
        Let("z", FLOAT, ir.mul(s, s)), Let("z2", FLOAT, ir.mul(z, z)),
        Let("t1", FLOAT, ir.mul(z2, ir.add(F(3.999999999940941908e-01), ir.mul(z2, ir.add(
            F(2.222219843214978396e-01), ir.mul(z2, F(1.531383769920937332e-01))))))),
        Let("t2", FLOAT, ir.mul(z, ir.add(F(6.666666666666735130e-01), ir.mul(z2, ir.add(
            F(2.857142874366239149e-01), ir.mul(z2, ir.add(
                F(1.818357216161805012e-01), ir.mul(z2, F(1.479819860511658591e-01))))))))),
        Let("hfsq", FLOAT, ir.mul(ir.mul(F(0.5), f), f)),
        Let("sr", FLOAT, ir.mul(s, ir.add(hfsq, ir.add(t1, t2)))))


def _dlog(t, name, value, note) -> ir.Function:
    """log and log2 in double precision: 0, infinities, negatives and NaN first, then
    ``value(k, f, hfsq, sr)`` of the reduction."""
    x = Var("x0")
    return ir.Function(name, ((FLOAT, "x0"),), FLOAT, (
        If(ir.or_(ir.not_(ir.gt(x, ir.f(0.0))), ir.call("isinf", x)), (Return(ir.Select(
            ir.eq(x, ir.f(0.0)), ir.Un(Op.NEG, ir.call("vg_inf")),
            ir.Select(ir.gt(x, ir.f(0.0)), x, ir.call("vg_nan")))),)),
        *_dlog_reduction(t),
        Return(value(*(Var(c) for c in ("k", "f", "hfsq", "sr"))))), note)


def dlog(t) -> ir.Function:
    return _dlog(t, "vg_dlog", lambda k, f, hfsq, sr: ir.sub(
        ir.mul(k, ir.f(6.93147180369123816490e-01)),
        ir.sub(ir.sub(hfsq, ir.add(sr, ir.mul(k, ir.f(1.90821492927058770002e-10)))), f)), (
        "log in double precision (OpenGL has none): fdlibm's e_log.c, k ln2 in two parts. "
        "Within\n1 ulp."))


def dlog2(t) -> ir.Function:
    return _dlog(t, "vg_dlog2", lambda k, f, hfsq, sr: ir.add(k, ir.mul(
        ir.sub(f, ir.sub(hfsq, sr)), ir.f(1.44269504088896340736))), (
        "log2 in double precision: k + log(1 + f) / ln2 (fdlibm's e_log.c reduction), so "
        "exact at\npowers of two. Within 2 ulp."))


# --- C's fmod in GLSL, exact, in double-precision long division (WGSL's is musl's on the
# bits: templates/helpers.wgsl.j2) -------------------------------------------------------
def _dilogb(t) -> ir.Function:
    x, sub = Var("x"), Var("sub")
    return ir.Function("vg_dilogb", ((F64, "x"),), INT, (
        Let("sub", BOOL, ir.lt(x, _d(2.2250738585072014e-308))),
        Return(ir.sub(ir.call("to_int", ir.band(ir.shr(ir.call("f64_high", ir.Select(
            sub, ir.mul(x, _d(18014398509481984.0)), x)), 20), ir.hexu(0x7FF))),
            ir.Select(sub, ir.i(54), ir.i(0))))), (
        "The exponent of a double (subnormals too), and x 2^k for 0 <= k <= 2046 (exact "
        "when\nthe result is a normal double)."))


def _dscale(t) -> ir.Function:
    k = Var("k")
    half = ir.div(k, ir.i(2))
    return ir.Function("vg_dscale", ((F64, "x"), (INT, "k")), F64, (Return(ir.mul(
        ir.mul(Var("x"), _dpow2(half)), _dpow2(ir.sub(k, half)))),))


def _nest(fn, times, r, m):
    for _ in range(times):
        r = ir.call(fn, r, m)
    return r


def _scaled_y(r, m, bits):
    """y = m 2^k, the multiple of m that leaves r / y below 2^bits."""
    return ir.call("vg_dscale", m, ir.call("max", ir.sub(ir.sub(
        ir.call("vg_dilogb", r), ir.call("vg_dilogb", m)), ir.i(bits)), ir.i(0)))


def _cfmod_head(a, b, zero):
    return (If(ir.or_(ir.or_(ir.or_(ir.call("isnan", a), ir.call("isnan", b)),
                             ir.call("isinf", a)), ir.eq(b, zero)),
               (Return(ir.call("vg_nan")),)),
            If(ir.lt(ir.call("abs", a), ir.call("abs", b)), (Return(a),)))


def cfmod_glsl(t) -> tuple:
    """C's fmod (the sign of the dividend), exact as C's, no loops (the driver's loop
    limiter counts every iteration of a dispatch): a fixed count of exact steps of long
    division r - q y in double precision (float32: 11 steps of 27 bits; float64: 42 of 50,
    the product q y exact by Dekker's split)."""
    a, b, r, m, y, tt = (Var(c) for c in ("a", "b", "r", "m", "y", "t"))
    head = (_dilogb(t), _dscale(t))
    if t.dtype == "float32":
        step = ir.Function("vg_fmodstep", ((F64, "r"), (F64, "m")), F64, (
            Let("y", F64, _scaled_y(r, m, 28)),
            Let("t", F64, ir.sub(r, ir.mul(ir.call("trunc", ir.div(r, y)), y))),
            Return(ir.Select(ir.lt(tt, _d(0.0)), ir.add(tt, y), tt))), (
            "One exact step of long division for r >= 0, m > 0 (floats held in doubles): r "
            "- q y with\ny = m 2^k the multiple that leaves q = trunc(r / y) < 2^29, so q y "
            "(29 + 24 bits) and\nr - q y (a multiple of ulp(y) below y in size) are exact; "
            "q one too large is undone by\n+ y."))
        f = Var("f")
        main = ir.Function("vg_cfmod", ((FLOAT, "a"), (FLOAT, "b")), FLOAT, (
            *_cfmod_head(a, b, ir.f(0.0)),
            Let("m", F64, ir.call("to_f64", ir.call("abs", b))),
            Let("r", F64, ir.call("to_f64", ir.call("abs", a)), mutable=True),
            Assign(r, _nest("vg_fmodstep", 4, r, m)), Assign(r, _nest("vg_fmodstep", 4, r, m)),
            Assign(r, _nest("vg_fmodstep", 3, r, m)),
            Let("f", FLOAT, ir.call("f32", r)),
            Return(ir.Select(ir.call("signbit", a), ir.Un(Op.NEG, f), f))), (
            "C's fmod (the sign of the dividend), exact as C's: 11 steps of 27 bits cover "
            "any\nfloat32 quotient."))
        return (*head, step, main)
    x, sc, q, qh, ql, yh, yl, p, e = (
        Var(c) for c in ("x", "sc", "q", "qh", "ql", "yh", "yl", "p", "e"))
    dhi = ir.Function("vg_dhi", ((F64, "x"),), F64, (Return(ir.call(
        "f64_words", ir.band(ir.call("f64_low", x), ir.hexu(0xF8000000)),
        ir.call("f64_high", x))),),
        "x = hi + lo with hi the top 26 bits of x (exact: a mask, no arithmetic to reorder).")
    step = ir.Function("vg_fmodstep", ((F64, "r"), (F64, "m")), F64, (
        Let("y", F64, _scaled_y(r, m, 51), mutable=True),
        Let("sc", F64, ir.Select(ir.gt(r, _d(6.69692879491417e+299)),
                                 _d(7.888609052210118e-31), _d(1.0))),
        Assign(r, sc, Op.MUL), Assign(y, sc, Op.MUL),
        Let("q", F64, ir.call("trunc", ir.div(r, y))),
        Let("qh", F64, ir.call("vg_dhi", q)), Let("ql", F64, ir.sub(q, qh)),
        Let("yh", F64, ir.call("vg_dhi", y)), Let("yl", F64, ir.sub(y, yh)),
        Let("p", F64, ir.mul(q, y), precise=True),
        Let("e", F64, ir.add(ir.add(ir.add(ir.sub(ir.mul(qh, yh), p), ir.mul(qh, yl)),
                                    ir.mul(ql, yh)), ir.mul(ql, yl)), precise=True),
        Let("t", F64, ir.sub(ir.sub(r, p), e), precise=True, mutable=True),
        Assign(tt, ir.Select(ir.lt(tt, _d(0.0)), ir.add(tt, y), tt)),
        Return(ir.div(tt, sc))), (
        "One exact step of long division for r >= 0, m > 0: r - q y with y = m 2^k the "
        "multiple\nthat leaves q = trunc(r / y) < 2^52; q y = p + e exactly (Dekker's "
        "product, the halves\nsplit by masks), r - p is exact (Sterbenz) and so is (r - p) "
        "- e, the remainder itself.\nValues past 2^996 are scaled by 2^-100 first."))
    steps = ir.Function("vg_fmodsteps", ((F64, "r"), (F64, "m")), F64, (
        Assign(r, _nest("vg_fmodstep", 3, r, m)), Return(_nest("vg_fmodstep", 3, r, m))),
        "Six steps: quotients below 2^300 (most of them take one).")
    main = ir.Function("vg_cfmod", ((FLOAT, "a"), (FLOAT, "b")), FLOAT, (
        *_cfmod_head(a, b, ir.f(0.0)),
        Let("m", F64, ir.call("abs", b)),
        Let("r", F64, _nest("vg_fmodsteps", 3, ir.call("abs", a), m), mutable=True),
        Assign(r, _nest("vg_fmodsteps", 4, r, m)),
        Return(ir.Select(ir.call("signbit", a), ir.Un(Op.NEG, r), r))), (
        "C's fmod (the sign of the dividend), exact as C's: 42 steps of 50 bits cover any"
        "\nfloat64 quotient."))
    return (*head, dhi, step, steps, main)


def cfmod_bits(t) -> ir.Function:
    """C's fmod on the bits alone (musl's fmodf), where the target has no double (WGSL):
    integer long division of the significands, one binary digit per iteration (at most
    277), so a driver that flushes subnormal floats to zero (lavapipe) still gets them
    right."""
    a, b, ua, ub, sa, ax, ex, ey, mx, my = (
        Var(c) for c in ("a", "b", "ua", "ub", "sa", "ax", "ex", "ey", "mx", "my"))
    signed_zero = Return(ir.call("float_bits", sa))

    def shl_by(x, n):
        return ir.Bits(ir.Bit.SHL, x, ir.call("to_uint", n))

    def significand(e, m, x):
        """m = the significand of x (exponent e), a subnormal's normalised."""
        note = (ir.Comment("subnormal: normalise the significand"),) if e is ex else ()
        return If(ir.eq(e, ir.i(0)), (
            *note, Assign(m, ir.shl(x, 9)),
            While(ir.eq(ir.shr(m, 31), ir.u(0)),
                  (Assign(e, ir.i(1), Op.SUB), Assign(m, ir.shl(m, 1)))),
            Assign(m, shl_by(x, ir.sub(ir.i(1), e)))),
            (Assign(m, ir.bor(ir.band(x, ir.hexu(0x007FFFFF)), ir.hexu(0x00800000))),))

    def digit():
        return If(ir.ge(mx, my), (If(ir.eq(mx, my), (signed_zero,)), Assign(mx, ir.sub(mx, my))))
    body = (
        Let("ua", UINT, ir.call("bits", a)),
        Let("ub", UINT, ir.band(ir.call("bits", b), ir.hexu(0x7FFFFFFF))),
        Let("sa", UINT, ir.band(ua, ir.hexu(0x80000000))),
        Let("ax", UINT, ir.band(ua, ir.hexu(0x7FFFFFFF))),
        If(ir.or_(ir.or_(ir.eq(ub, ir.u(0)), ir.gt(ub, ir.hexu(0x7F800000))),
                  ir.ge(ax, ir.hexu(0x7F800000))),
           (Return(ir.call("vg_nan")),)),
        If(ir.lt(ax, ub), (Return(a),)),
        If(ir.eq(ax, ub), (signed_zero,)),
        Let("ex", INT, ir.call("to_int", ir.shr(ax, 23)), mutable=True),
        Let("ey", INT, ir.call("to_int", ir.shr(ub, 23)), mutable=True),
        Let("mx", UINT, None), Let("my", UINT, None),
        significand(ex, mx, ax), significand(ey, my, ub),
        While(ir.gt(ex, ey), (digit(), Assign(mx, ir.shl(mx, 1)), Assign(ex, ir.i(1), Op.SUB))),
        digit(),
        While(ir.eq(ir.shr(mx, 23), ir.u(0)), (Assign(mx, ir.shl(mx, 1)),
                                                Assign(ex, ir.i(1), Op.SUB))),
        If(ir.gt(ex, ir.i(0)),
           (Assign(mx, ir.bor(ir.sub(mx, ir.hexu(0x00800000)),
                              ir.shl(ir.call("to_uint", ex), 23))),),
           (Assign(mx, ir.Bits(ir.Bit.SHR, mx, ir.call("to_uint", ir.sub(ir.i(1), ex)))),)),
        Return(ir.call("float_bits", ir.bor(mx, sa))))
    return ir.Function("vg_cfmod", ((FLOAT, "a"), (FLOAT, "b")), FLOAT, body, (
        "C's fmod (the sign of the dividend), exact, on the bits alone (musl's fmodf): "
        "integer long\ndivision of the significands, one binary digit per iteration (at "
        "most 277), so a driver\nthat flushes subnormal floats to zero (lavapipe) still "
        "gets them right."))


# float32 only, in the dialects without a C library (GLSL, WGSL)
TWINS = {"vg_exps": exps, "vg_exp": exp, "vg_atan": atan, "vg_atan2": atan2,
         "vg_asin": asin, "vg_acos": acos, "vg_sinh": sinh, "vg_cosh": cosh, "vg_tanh": tanh,
         "vg_logpoly": logpoly, "vg_log": log, "vg_log2": log2, "vg_pow": power}
# in every dtype of the shaders (printed with the kernel's target)
SHADER = {"vg_signbit": signbit, "vg_sqrt": sqrt, "vg_sign": sign, "vg_toint": toint,
          "vg_ceil": ceil, "vg_nan": _special("vg_nan", 0x7FC00000, 0x7FF80000),
          "vg_inf": _special("vg_inf", 0x7F800000, 0x7FF00000),
          "vg_isnan": _by_bits("vg_isnan", ir.gt), "vg_isinf": _by_bits("vg_isinf", ir.eq),
          "vg_dpow2": dpow2, "vg_dexp": dexp, "vg_dlog": dlog, "vg_dlog2": dlog2}

BUILDERS = {"vg_powi": powi, "vg_floordiv": floordiv, "vg_fmod": fmod,
            "vg_ifloordiv": ifloordiv, "vg_imod": imod, "vg_min": nan_min, "vg_max": nan_max,
            "vg_fmax": fmax, "vg_fmin": fmin, "vg_clamp": clamp}


# The shaders' order of definition (GLSL needs a function defined before its callers):
# the templates print a kernel's helpers in this order (``k.built`` keeps it).
ORDER = ("vg_isnan", "vg_isinf", "vg_nan", "vg_inf", "vg_min", "vg_max", "vg_fmax",
         "vg_fmin", "vg_clamp", "vg_sign", "vg_toint", "vg_sqrt", "vg_signbit", "vg_ceil",
         "vg_exps", "vg_exp", "vg_logpoly", "vg_log", "vg_log2", "vg_atan", "vg_atan2",
         "vg_asin", "vg_acos", "vg_sinh", "vg_cosh", "vg_tanh", "vg_powi", "vg_powpos",
         "vg_pow", "vg_cfmod", "vg_floordiv", "vg_fmod", "vg_ifloordiv", "vg_imod",
         "vg_dpow2", "vg_dexp", "vg_dlog", "vg_dlog2")

_CACHE: dict = {}


def printed(t, names=None) -> dict:
    """The built helpers' text in target ``t``, by name: those of ``names`` (a shader's
    helpers, the ones its template emits), or with None every one the target has (C
    keeps them all, static inline). The float32 twins print with the language's float32
    target (OpenGL's doubles have none of these functions)."""
    from ..targets import TARGETS, printer
    from . import cmath
    every = ({**BUILDERS, **cmath.BUILDERS} if t.language == "c"
             else {**BUILDERS, **SHADER, **TWINS})
    if t.language != "c":
        every["vg_powpos"] = powpos_f64 if "f64" in t.types else powpos_f32
        every["vg_cfmod"] = cfmod_glsl if "f64" in t.types else cfmod_bits
    wanted = every if names is None else [n for n in ORDER if n in names and n in every]
    out = {}
    for name in wanted:
        key = (id(t), name)
        if key not in _CACHE or _CACHE[key][0] is not t:
            twin = name in cmath.FLOAT32 if t.language == "c" else name in TWINS
            at = TARGETS.get(t.language, {}).get("float32", t) if twin else t
            fns = every[name](at)       # a function, or a helper with its own helpers
            fns = fns if isinstance(fns, tuple) else (fns,)
            _CACHE[key] = (t, "\n\n".join(printer(at).text((fn,)) for fn in fns))
        out[name] = _CACHE[key][1]
    return out
