"""rodas4 on the reference backend: the stages of a Rosenbrock step, batched over rows.

Everything but the stages is the adaptive runner's (adaptive.py: the controller of
ir/controller.py, per-row t/dt/accept masks, a basin sharing one step, status and
counters, compaction, save_at through the continuous extension, events through
adaptive_events.py): ``_Rosenbrock.stage_values`` replaces the explicit stages.

One attempt of step ``dt`` from (t, h), in the K form of ir/rosenbrock.py (each
value an array over the working set's (rows, lanes), every lane its own system):

1. ``J = dF/dh`` and, when some derivative reads ``t``, ``F_t = dF/dt`` at (t, h):
   the field's derived Jacobian (``field.jacobian``, ir/jacobian.py), evaluated
   as one schedule;
2. ``W = I / gamma - dt * J``, entry by entry ``W_ij = [i == j] / gamma - dt * J_ij``,
   factored once by ``lu_factor`` (below);
3. per stage s: ``r = F_s + sum_j c_sj K_j + (dt * d_s) * F_t`` (left to right; F_0 is
   the F(t, h) the runner already has, F_s for s > 0 is F at the stage time and
   the stage state ``h + dt * sum_j a_sj K_j``), and ``K_s = lu_solve(W, r)``.

The update, the error estimate ``dt * K_6`` and the continuous extension are the
StepProgram's Combinations over the K_s, as for an explicit pair.

A field joined with its sensitivities (``field.error_states`` set) factors only its
own states' ``W`` and solves the joined system block by block (``block_solve``), so
its states are bit-identical to the call without sensitivities. A field with
observers (ir/observers.py: hidden states after all of those, ``jacobian.trailing``
rows) solves their rows last, by substitution with the states' K: an integral's
``dq/dt = e`` is the method applied to the joined system with its exact Jacobian (W
block lower triangular, ``W_qq = 1 / gamma``), the states' numbers untouched.

The LU (``lu_factor``, ``lu_solve``) is written out here, not taken from a library,
so that it is the algorithm a kernel prints: Doolittle elimination, in place, with
partial pivoting by rows. At column k the pivot is the row i >= k with the largest
``|a_ik|``, the first such row when several tie (an ``abs(a) > best`` scan from
row k down); rows k and p are swapped (``piv[k] = p``, LAPACK's convention), the
multipliers ``l_ik = a_ik / a_kk`` overwrite column k below the diagonal and
``a_ij -= l_ik * a_kj`` updates the rest. A zero pivot (W singular) gives
non-finite K; the attempt is then rejected with the error ``controller.
singular_error`` (the step halved and tried again, as rodas.f does:
docs/language.md), not ended. ``lu_solve`` applies the swaps in order, then forward
substitution with the unit lower triangle, ``y_i = b_i - l_i0 y_0 - l_i1 y_1 - ...``
(left to right, increasing j), and back substitution with the upper one,
``x_i = (y_i - u_i,n-1 x_n-1 - u_i,n-2 x_n-2 - ... - u_i,i+1 x_i+1) / u_ii``
(decreasing j): the order a column-by-column loop gives (numpy does one column
per call; a kernel may loop either way round as long as each row's terms come
in this order).
"""
from __future__ import annotations

import numpy as np

from ...call.bound import Bound, Progress, Solution
from ...ir import controller as C
from .adaptive import _AdaptiveRun
from .adaptive_events import _AdaptiveEventRun


def lu_factor(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LU with partial pivoting of every matrix of ``a`` (shape ``(n, n) + batch``):
    ``(lu, piv)``, lu holding L's multipliers below the diagonal and U on and above
    it, ``piv[k]`` (shape ``(n,) + batch``) the row swapped with row k at step k."""
    n, batch = a.shape[0], a.shape[2:]
    lu = np.array(a, copy=True).reshape(n, n, -1)
    cols = np.arange(lu.shape[2])
    piv = np.empty((n, lu.shape[2]), np.intp)
    for k in range(n):
        p = k + np.argmax(np.abs(lu[k:, k, :]), axis=0)       # the first largest |a_ik|
        piv[k] = p
        row_k = lu[k].copy()                                    # (n, B)
        lu[k] = lu[p, :, cols].T
        lu[p, :, cols] = row_k.T
        if k + 1 < n:
            lower = lu[k + 1:, k, :] / lu[k, k, :]
            lu[k + 1:, k, :] = lower
            lu[k + 1:, k + 1:, :] -= lower[:, None, :] * lu[k, None, k + 1:, :]
    return lu.reshape((n, n) + batch), piv.reshape((n,) + batch)


def lu_solve(lu: np.ndarray, piv: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The solution x of ``A x = b`` for every system (``b``: shape ``(n,) + batch``),
    from ``lu_factor(A)``."""
    n, batch = lu.shape[0], lu.shape[2:]
    m = lu.reshape(n, n, -1)
    p = piv.reshape(n, -1)
    x = np.array(b, copy=True).reshape(n, -1)
    cols = np.arange(x.shape[1])
    for k in range(n):                      # the row swaps, in order
        x_k = x[k].copy()
        x[k] = x[p[k], cols]
        x[p[k], cols] = x_k
    for j in range(n - 1):                  # L y = P b (unit diagonal), by columns:
        x[j + 1:] -= m[j + 1:, j] * x[j]    # row i sees j = 0, 1, ... in turn
    for j in range(n - 1, -1, -1):          # U x = y, by columns from the last:
        x[j] /= m[j, j]                     # row i sees j = n-1, n-2, ... in turn
        x[:j] -= m[:j, j] * x[j]
    return x.reshape((n,) + batch)


def block_solve(w: np.ndarray, lu: np.ndarray, piv: np.ndarray, b: np.ndarray,
                m: int, trailing: int = 0, lower: dict | None = None) -> np.ndarray:
    """The solution of ``W x = b`` for the W of a field joined with its sensitivities
    (ir/sensitivity.py) or with observers (ir/observers.py): block lower triangular,
    its m x m diagonal blocks all the states' own ``A`` (factored once: ``lu, piv``),
    its first block column the sensitivity rows' ``dW/dh``. ``x_0 = A^-1 b_0`` (the
    very numbers of the field without sensitivities or observers), then per column
    block c: ``x_c = A^-1 (b_c - W_c0 x_0)``, the product's terms in increasing column
    order. The rows after the blocks (an event's memory, then the ``trailing``
    observers' rows) are W's lower triangle: ``x_i = (b_i - sum_j W_ij x_j) / W_ii``
    over ``lower[i]``, the j < i where J_ij is not the constant 0, increasing."""
    x = np.empty_like(b)
    x[:m] = lu_solve(lu, piv, b[:m])
    blocks = (b.shape[0] - trailing) // m
    for c in range(1, blocks):
        rows = slice(c * m, (c + 1) * m)
        r = np.array(b[rows], copy=True)
        for j in range(m):
            r -= w[rows, j] * x[j]
        x[rows] = lu_solve(lu, piv, r)
    for i in range(blocks * m, b.shape[0]):     # a memory's row is its diagonal alone;
        r = b[i]                                # an integral's reads the states' x
        for j in (lower or {}).get(i, ()):
            r = r - w[i, j] * x[j]
        x[i] = r / w[i, i]
    return x


class _Rosenbrock:
    """The stages of a Rosenbrock method (mixed into an adaptive run: see the module doc)."""

    def _rosenbrock_setup(self) -> None:
        d = self.dtype.type
        imp = self.program.implicit
        self.inv_gamma = d(float(1 / imp.gamma))
        self.rhs_terms = [self._terms(c) for c in imp.rhs]
        self.d_t = [d(float(x)) for x in imp.d]
        self.stage_terms = [self._terms(st.state) for st in self.program.stages]
        self.stage_c = [d(float(st.c)) for st in self.program.stages]
        jac = self.field.jacobian
        self.jac_nonzero = jac.nonzero()
        self.jac_roots = [jac.matrix[i][j] for i, j in self.jac_nonzero] + list(jac.time or ())
        self.jac_lower: dict = {}           # the rows after the blocks: block_solve
        for i, j in self.jac_nonzero:
            if j < i:
                self.jac_lower.setdefault(i, []).append(j)

    def jacobian_at(self, h: list, t, taken, mask) -> tuple[np.ndarray, list | None]:
        """J (shape ``(n, n) + layout``) and dF/dt (None when no derivative reads t) at
        (t, h), on every lane; the entries that are the constant 0 are not evaluated."""
        jac = self.field.jacobian
        nonzero, roots = self.jac_nonzero, self.jac_roots
        frame, _ = self.frame(dict(zip(self.names, h)), t, taken, mask)
        values = frame.run(self.schedule("jacobian", roots), mask) if roots else []
        shape, n = self.layout.shape, jac.n
        matrix = np.zeros((n, n) + shape, self.dtype)
        for (i, j), v in zip(nonzero, values):
            matrix[i, j] = v
        ft = None
        if jac.time is not None:
            ft = [np.broadcast_to(v, shape).astype(self.dtype, copy=False)
                  for v in values[len(nonzero):]]
        return matrix, ft

    def stage_values(self, h: list, k0: list, t, use, taken, mask) -> list:
        n, shape, d = len(h), self.layout.shape, self.dtype.type
        J, Ft = self.jacobian_at(h, t, taken, mask)
        # W_ij = [i == j] / gamma - dt * J_ij (as -(dt * J_ij) + 1/gamma: the same value)
        w = np.multiply(J, -use)
        diag = np.arange(n)
        w[diag, diag] += self.inv_gamma
        m = self.field.n_error          # a field joined with its sensitivities: block solve
        lu, piv = lu_factor(w if m == n else w[:m, :m])
        self.singular = (lu[diag[:m], diag[:m]] == 0).any(axis=0)     # a zero pivot
        frozen = getattr(self, "frozen", None)      # events: lanes that stopped
        ks: list = []
        for s, (terms, c) in enumerate(zip(self.stage_terms, self.stage_c)):
            if s == 0:
                f = k0
            else:
                hs = self.combine(h, ks, terms, self.stage_state)
                f = self.F(hs, t + c * use, taken, mask, s)
            rhs = np.empty((n,) + shape, self.dtype)
            for i in range(n):
                r = f[i]
                if self.rhs_terms[s]:
                    r = r + self.weighted(ks, self.rhs_terms[s], i)
                if Ft is not None and self.d_t[s] != 0:
                    r = r + (use * self.d_t[s]) * Ft[i]
                rhs[i] = r
            k = (lu_solve(lu, piv, rhs) if m == n else
                 block_solve(w, lu, piv, rhs, m, self.field.jacobian.trailing, self.jac_lower))
            if frozen is not None and frozen.any():
                k = np.where(frozen, d(0), k)
            ks.append([k[i] for i in range(n)])
        return ks


    def attempt_error(self, err_lane):
        return np.where(self.singular, self.dtype.type(C.singular_error(self.program.q)),
                        err_lane).astype(self.dtype)


class _RodasRun(_Rosenbrock, _AdaptiveRun):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        self._rosenbrock_setup()


class _RodasEventRun(_Rosenbrock, _AdaptiveEventRun):
    def __init__(self, bound: Bound, progress: Progress):
        super().__init__(bound, progress)
        self._rosenbrock_setup()


def run(bound: Bound, progress: Progress = None) -> Solution:
    # step-end observers (peak, trough, first) run where events do (as runner.py's)
    located = bool(bound.field.events or bound.field.observer_rules)
    cls = _RodasEventRun if located else _RodasRun
    with np.errstate(all="ignore"):
        return cls(bound, progress).solve()
