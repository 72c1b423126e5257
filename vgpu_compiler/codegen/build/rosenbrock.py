"""The linear algebra of a Rosenbrock step, once (backends/shader/rosenbrock.py lays out
the rest of it; the numpy reference is backends/numpy/rosenbrock.py, whose order of
operations this keeps):

- ``setup`` (a kernel of one trajectory an invocation: GLSL, WGSL): the arrays, zeroed
  every attempt (the Jacobian writes only its nonzero entries), F(t_n, state) kept
  aside for a reject, the Jacobian's block (the splice ``jac``, in stage 0's context),
  then ``W = I / gamma - dt * J`` in place (numpy: ``J * (-dt)``, then the diagonal's
  ``+ 1 / gamma``: the nonzero entries only), then ``lu``;
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
  ``W_b0 x_0`` product, then is solved with the same LU; observers' rows after them
  (``trailing``) by substitution, row by row; ``K_s`` (the stage's k names) is then
  read back from ``vg_x``.

The loops' bounds are the block's size, known when the kernel is printed; ``trips``
counts their iterations (llvmpipe's loop limiter: PrintedRosenbrock.trips).
"""
from __future__ import annotations

import dataclasses

from ...ir.ops import Op
from .. import ir
from ..ir import BOOL, FLOAT, INT, Array, Assign, Block, If, Index, Let, Loop, Var, f, i

W, PIV, X, SING, FT, MDT = "vg_W", "vg_piv", "vg_x", "vg_sing", "vg_Ft", "vg_mdt"
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


def setup(t, n: int, m: int, nonzero, inv_gamma: float, time: bool, k0, combos,
          reads_t: bool) -> tuple:
    """W and its LU at the step's start. ``nonzero``: J's nonzero entries (i, j);
    ``time``: the field's dF/dt is computed (vg_Ft); ``k0``: F's names (stage 0's k);
    ``combos``: (y, s) the Jacobian's block reads y as the state s; ``reads_t``: it
    reads ``tt``."""
    zero = f(0.0)
    arrays = [Array(W, FLOAT, i(n * n), precise=True), Array(PIV, INT, i(n)),
              Array(X, FLOAT, i(n), precise=True)]
    arrays += [Array(FT, FLOAT, i(n), precise=True)] if time else []
    if t.lane_block:        # (C: loops, the text n long, not n * n)
        clear = [Loop(R.name, i(0), i(n * n), (Assign(Index(W, R), zero),))]
        clear += [Loop(R.name, i(0), i(n), (Assign(Index(FT, R), zero),))] if time else []
    else:
        clear = [Assign(Index(W, i(j)), zero, comment=t.zero_note) for j in range(n * n)]
        clear += [Assign(Index(FT, i(j)), zero) for j in range(n)] if time else []
    jac = Block((*((Let("tt", FLOAT, Var("t_n")),) if reads_t else ()),
                 *(Let(y, FLOAT, Var(x), precise=True) for y, x in combos),
                 ir.Splice("jac")),
                "J and dF/dt at the step's start" if time else "J at the step's start")
    off = set(nonzero)
    if t.lane_block:        # (C: loops over every entry, a zero's sign numpy's too)
        at, diag = Index(W, R), Index(W, ir.mul(R, i(n + 1)))
        scale = [Loop(R.name, i(0), i(n * n), (Assign(at, ir.mul(at, Var(MDT))),),
                      comment="(numpy: J * (-dt), then the diagonal)"),
                 Loop(R.name, i(0), i(n), (Assign(diag, ir.add(diag, f(inv_gamma))),))]
    else:                   # (the nonzero entries only)
        scale = []
        for r in range(n):
            for c in range(n):
                at = Index(W, i(r * n + c))
                if r == c:
                    scale.append(Assign(at, ir.add(ir.mul(at, Var(MDT)), f(inv_gamma))))
                elif (r, c) in off:
                    scale.append(Assign(at, ir.mul(at, Var(MDT))))
    return (
        ir.Comment("rodas4 (shader/rosenbrock.py): W = I / gamma - dt * J at (t_n, state), "
                   "its LU with\npartial pivoting; F(t_n, state) is kept aside for a reject"),
        *arrays, *clear,
        *(Let(f"vg_F0_{j}", FLOAT, Var(k)) for j, k in enumerate(k0)),
        jac,
        Let(MDT, FLOAT, ir.Un(Op.NEG, Var("u_dt"))),
        *scale,
        Let(SING, BOOL, ir.Lit(False, BOOL), mutable=True,
            comment="a zero pivot: W singular (the step is halved)"),
        *lu(n, m))


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


def _blocks_end(n: int, m: int, trailing: int) -> int:
    """The rows the LU's blocks cover (the states', then each sensitivity block)."""
    return (n - trailing) // m * m


def solve(stage: int, n: int, m: int, ks, trailing: int = 0, lower=()) -> tuple:
    """Stage ``stage``'s solve; ``ks``: its k names (K_s is written there). The splice
    ``rhs`` assigns the right-hand side to vg_x. ``trailing``: the last rows, observers'
    (ir/observers.py), solved after the blocks by substitution as the reference's
    ``block_solve``: ``x_i = (b_i - W_ij x_j - ...) / W_ii`` over ``lower``'s
    ``(i, (j, ...))``, the j where J_ij is not the constant 0, increasing."""
    body = [ir.Splice("rhs"), *_substitute(n, m)]
    end = _blocks_end(n, m, trailing)
    if m < end:
        xb = Index(X, ir.add(B, R))
        product = Loop(R.name, i(0), i(m), (Loop(J.name, i(0), i(m), (
            Assign(xb, ir.sub(xb, ir.mul(Index(W, ir.add(ir.mul(ir.add(B, R), i(n)), J)),
                                         Index(X, J)))),)),))
        body.append(Loop(B.name, i(m), i(end), (product, *_substitute(n, m, B)), step=m,
                         comment="the sensitivity columns: A x_b = b_b - W_b0 x_0"))
    if end < n:
        cols, rows = dict(lower), []
        for r in range(end, n):
            xr = Index(X, i(r))
            rows += [Assign(xr, ir.sub(xr, ir.mul(_w(i(r), i(c), n), Index(X, i(c)))))
                     for c in cols.get(r, ())]
            rows.append(Assign(xr, ir.div(xr, _w(i(r), i(r), n))))
        rows[0] = dataclasses.replace(rows[0], comment="the observers' rows")
        body += rows
    body += [Assign(Var(k), Index(X, i(j))) for j, k in enumerate(ks)]
    return (Block(tuple(body), f"K_{stage}: W K = F + sum_j c_j K_j + dt d F_t "
                               "(swaps, forward, back)"),)


def lu_trips(m: int) -> int:
    """Loop iterations of ``lu``, at most: per column its own, the pivot scan's, the
    swap's, and the rows' with their updates."""
    return sum(1 + (m - 1 - c) + m + (m - 1 - c) * (1 + (m - 1 - c)) for c in range(m))


def solve_trips(n: int, m: int, trailing: int = 0) -> int:
    """... of one ``solve``: the swaps, forward and back; each sensitivity block's
    product and its own substitution (the observers' rows: no loop)."""
    sv = m + sum(1 + (m - 1 - c) for c in range(m)) * 2
    end = _blocks_end(n, m, trailing)
    if m < end:
        sv += (end // m - 1) * (1 + m * (1 + m) + sv)
    return sv
