"""Part of stage 3: ``interp(A, e1, ..., u)``, a table read between its samples, as IR.

The call is written out in ops every backend already has (reads, ``where``,
``min``/``max``, ``int``), so the numpy oracle, the C, GLSL and WGSL backends,
the range analysis and the derivatives all see ordinary nodes:

    k      = max(min(int(where(u > 0, min(u, last), 0)), last - 1), 0)
    inside = A[.., k] + (u - float(k)) * (A[.., min(k + 1, last)] - A[.., k])
    interp = where(u < 0, A[.., 0], where(u >= last, A[.., last], inside))

``last`` is the last index of the table's last axis. ``k`` is ``floor(u)`` for
``0 <= u < last`` and in range for every ``u`` (NaN and inf too: the int
conversion never sees them), so only the leading indices can be out of range,
an error as for ``A[e1, ...]``. A NaN ``u`` fails both comparisons and reaches
``inside`` through ``u - float(k)``: NaN. ``u == last`` reads ``A[last]``
exactly (the formula would give ``A[last-1] + (A[last] - A[last-1])``, which
rounds). The derivative in ``u`` (ir/diff.py, for a Jacobian) comes out of the
expansion as the slope ``A[k+1] - A[k]`` of the segment, 0 outside the table:
reads and ``float(k)`` of an int do not vary.
"""
from __future__ import annotations

from ..errors import Span
from ..ir import nodes as N
from ..ir.ops import Op, Type

I, F, B = Type.INT, Type.FLOAT, Type.BOOL


def expand(array: str, lead: tuple[N.Expr, ...], u: N.Expr, extent: N.Expr,
           span: Span | None) -> N.Expr:
    """The IR of ``interp(array, *lead, u)``: ``u`` FLOAT, ``lead`` INT, ``extent`` the
    INT length of the table's last axis (a dim symbol or a literal)."""
    def app(op, args, typ):
        return N.Apply(op, tuple(args), typ, span)

    def read(k):
        return N.Load(array, lead + (k,), F, span, interp=True)

    zero_f, one_i = N.Const(0.0, F), N.Const(1, I)
    last = app(Op.SUB, (extent, one_i), I)
    last_f = app(Op.TO_FLOAT, (last,), F)
    safe_u = app(Op.WHERE, (app(Op.GT, (u, zero_f), B), app(Op.MIN, (u, last_f), F),
                            zero_f), F)
    k = app(Op.MAX, (app(Op.MIN, (app(Op.TO_INT, (safe_u,), I),
                                  app(Op.SUB, (last, one_i), I)), I),
                     N.Const(0, I)), I)
    k1 = app(Op.MIN, (app(Op.ADD, (k, one_i), I), last), I)
    at_k = read(k)
    frac = app(Op.SUB, (u, app(Op.TO_FLOAT, (k,), F)), F)
    inside = app(Op.ADD, (at_k, app(Op.MUL, (frac, app(Op.SUB, (read(k1), at_k), F)), F)), F)
    above = app(Op.WHERE, (app(Op.GE, (u, last_f), B), read(last), inside), F)
    return app(Op.WHERE, (app(Op.LT, (u, zero_f), B), read(N.Const(0, I)), above), F)
