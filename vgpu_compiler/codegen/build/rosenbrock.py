"""The linear algebra of a Rosenbrock step, once (backends/shader/rosenbrock.py lays out
the rest of it; the numpy reference is backends/numpy/rosenbrock.py, whose order of
operations this keeps):

- ``lu``: the LU factorisation of the top-left ``m x m`` block of ``W`` (``vg_W``,
  row-major, ``n`` columns) in place, with partial pivoting: in column c the first
  largest ``|a_ic|`` from row c down is the pivot (``vg_piv[c]``), its row swapped with
  row c over the whole block width (LAPACK's swaps: the multipliers already stored move
  too), then the multipliers ``l_ic = a_ic / a_cc`` below the diagonal and the update
  of the rows below; a zero pivot sets the flag ``vg_sing`` (declared by the kernel);
- ``solve``: one stage's ``W K = rhs`` (its right-hand side, the splice ``rhs``,
  assigns ``vg_x``): the row swaps, forward substitution by columns and back
  substitution by columns from the last; with sensitivity columns (``m < n``, the
  reference's ``block_solve``) each block of ``m`` after the first subtracts its
  ``W_b0 x_0`` product, then is solved with the same LU; ``K_s`` (the stage's k names)
  is then read back from ``vg_x``.

The loops' bounds are the block's size, known when the kernel is printed; ``trips``
counts their iterations (llvmpipe's loop limiter: PrintedRosenbrock.trips).
"""
from __future__ import annotations

from ...ir.ops import Op
from .. import ir
from ..ir import FLOAT, INT, Assign, Block, If, Index, Let, Loop, Var, f, i

W, PIV, X, SING = "vg_W", "vg_piv", "vg_x", "vg_sing"
C, R, J, P, B = Var("vg_c"), Var("vg_i"), Var("vg_j"), Var("vg_p"), Var("vg_b")
V, BEST, L = Var("vg_v"), Var("vg_best"), Var("vg_l")


def _w(row, col, n: int) -> ir.Index:
    return Index(W, ir.add(ir.mul(row, i(n)), col))


def _next(e) -> ir.Expr:
    return ir.add(e, i(1))


def lu(n: int, m: int) -> tuple:
    """The factorisation (the kernel declares vg_W, vg_piv and the flag vg_sing)."""
    scan = Loop(R.name, _next(C), i(m), (
        Let(V.name, FLOAT, ir.call("abs", _w(R, C, n))),
        If(ir.gt(V, BEST), (Assign(BEST, V), Assign(P, R)))), comment="the first largest |a_ic|")
    swap = Loop(J.name, i(0), i(m), (
        Let(V.name, FLOAT, _w(C, J, n)),
        Assign(_w(C, J, n), _w(P, J, n)),
        Assign(_w(P, J, n), V)))
    rows = Loop(R.name, _next(C), i(m), (
        Let(L.name, FLOAT, ir.div(_w(R, C, n), _w(C, C, n)), precise=True),
        Assign(_w(R, C, n), L),
        Loop(J.name, _next(C), i(m), (
            Assign(_w(R, J, n), ir.sub(_w(R, J, n), ir.mul(L, _w(C, J, n)))),))))
    return (Loop(C.name, i(0), i(m), (
        Let(P.name, INT, C, mutable=True),
        Let(BEST.name, FLOAT, ir.call("abs", _w(C, C, n)), mutable=True),
        scan,
        Assign(Var(SING), ir.eq(BEST, f(0.0)), op=Op.OR),
        Assign(Index(PIV, C), P),
        swap,
        rows)),)


def _substitute(n: int, m: int, base=None) -> tuple:
    """The swaps, forward and back substitution of the column ``vg_x[base + 0..m)``."""
    def x(e):
        return Index(X, e if base is None else ir.add(base, e))

    def minus(k):          # x_k -= a_kc x_c, k = vg_i
        return Assign(x(k), ir.sub(x(k), ir.mul(_w(k, C, n), x(C))))

    return (
        Loop(C.name, i(0), i(m), (
            Let(P.name, INT, Index(PIV, C)),
            Let(V.name, FLOAT, x(C)),
            Assign(x(C), x(P)),
            Assign(x(P), V))),
        Loop(C.name, i(0), i(m - 1), (Loop(R.name, _next(C), i(m), (minus(R),)),)),
        Loop(C.name, i(m - 1), i(0), (
            Assign(x(C), ir.div(x(C), _w(C, C, n))),
            Loop(R.name, i(0), C, (minus(R),))), step=-1))


def solve(stage: int, n: int, m: int, ks) -> tuple:
    """Stage ``stage``'s solve; ``ks``: its k names (K_s is written there). The splice
    ``rhs`` assigns the right-hand side to vg_x."""
    body = [ir.Splice("rhs"), *_substitute(n, m)]
    if m < n:
        xb = Index(X, ir.add(B, R))
        product = Loop(R.name, i(0), i(m), (Loop(J.name, i(0), i(m), (
            Assign(xb, ir.sub(xb, ir.mul(Index(W, ir.add(ir.mul(ir.add(B, R), i(n)), J)),
                                         Index(X, J)))),)),))
        body.append(Loop(B.name, i(m), i(n), (product, *_substitute(n, m, B)), step=m,
                         comment="the sensitivity columns: A x_b = b_b - W_b0 x_0"))
    body += [Assign(Var(k), Index(X, i(j))) for j, k in enumerate(ks)]
    return (Block(tuple(body), f"K_{stage}: W K = F + sum_j c_j K_j + dt d F_t "
                               "(swaps, forward, back)"),)


def lu_trips(m: int) -> int:
    """Loop iterations of ``lu``, at most: per column its own, the pivot scan's, the
    swap's, and the rows' with their updates."""
    return sum(1 + (m - 1 - c) + m + (m - 1 - c) * (1 + (m - 1 - c)) for c in range(m))


def solve_trips(n: int, m: int) -> int:
    """... of one ``solve``: the swaps, forward and back; each sensitivity block's
    product and its own substitution."""
    sv = m + sum(1 + (m - 1 - c) for c in range(m)) * 2
    if m < n:
        sv += (n // m - 1) * (1 + m * (1 + m) + sv)
    return sv
