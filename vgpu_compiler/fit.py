"""``vgpu.fit``: every trajectory's own parameters fitted to its own data, all at once.

Independent least-squares problems, one per trajectory, solved by Levenberg–Marquardt
with the damping and stopping rules of Moré (1978) / MINPACK ``lmder`` (``mode = 1``:
the variables scaled by the Jacobian's column norms, never decreasing; ``factor =
100``; ``gtol = 0``). Every iteration is one ``solve`` of the whole ensemble with
sensitivities at ``save_at = times`` (ir/sensitivity.py): each trajectory's trial
point, its residuals and its Jacobian at once. A trajectory whose trial is accepted
moves there (and keeps that Jacobian for its next trial); one that has stopped keeps
its parameters (it is solved with them, and nothing of it changes).

Host-side numpy on top of ``vgpu.solve``, so it runs on every backend. The LM parameter
of a step (MINPACK's ``lmpar``) is found by Moré's safeguarded Newton iteration on
``||D p(par)|| = delta``, evaluated through the SVD of the scaled Jacobian (the same
``p`` as MINPACK's QR, to rounding; a rank-deficient Jacobian gives the least-norm
Gauss–Newton step). Bounds: the trial point is projected into the box, and the step
actually taken is the one the model's predicted reduction measures.

Status, per trajectory (``Fit.status``): 0 converged by ``ftol`` (actual and predicted
relative reductions of the sum of squares at most ftol), 1 by ``xtol`` (the trust
region at most ``xtol * ||D x||``), 2 ``max_iter`` solves made, 3 the solve failed at
the trajectory's accepted parameters (its ``sol.status`` not 0, or a residual not
finite), 4 singular Jacobian at the accepted parameters (rank below the number of
fitted names). MINPACK's "tolerance too small" cases (info 6, 7) count as 0 and 1.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .errors import ArgumentTypeError, CallError, ShapeError, StatusWarning, NonFiniteWarning
from .call.bound import Solution

CONVERGED_FTOL, CONVERGED_XTOL, MAX_ITER, SOLVE_FAILED, SINGULAR = 0, 1, 2, 3, 4
FACTOR = 100.0          # MINPACK's initial step bound factor
_EPS = np.finfo(np.float64).eps
_DWARF = np.finfo(np.float64).tiny


@dataclass
class Fit:
    params: dict                # name -> array of grid shape (the fitted values)
    cost: np.ndarray            # 0.5 * sum of squared weighted residuals, grid shape
    iterations: np.ndarray      # int32: solves with sensitivities made for each trajectory
    status: np.ndarray          # int8: 0 ftol, 1 xtol, 2 max_iter, 3 solve failed, 4 singular
    covariance: np.ndarray      # grid shape + (n, n): (J^T J)^-1 2 cost / (m - n)
    solution: Solution          # the solve at the fitted parameters (with sensitivities)
    names: tuple = ()           # the fitted names, in order


class FitError(CallError):
    """A ``vgpu.fit`` call whose arguments do not fit together."""


def fit(src, data, times, *, fit, params=None, h0=None, weights=None, observe=None,
        bounds=None, max_iter=100, xtol=1e-8, ftol=1e-8, **solve_args) -> Fit:
    """Fit every trajectory's ``fit`` names (params, ``init(x)``) to its own ``data``
    (shape ``(len(times),) + grid_shape + (n_observed,)``, or without the last axis when
    one state is observed). ``solve_args`` go to ``vgpu.solve`` (``dtype`` defaults to
    float64 here). See the module doc and docs/language.md, Fitting."""
    from . import api
    from .pipeline import compile as compile_source
    solve_args = dict(solve_args)
    for bad in ("save_at", "save_every", "sensitivities", "chunks", "progress"):
        if bad in solve_args:
            raise FitError(f"fit() sets {bad} itself (or has none); leave it out")
    solve_args.setdefault("dtype", "float64")
    field = compile_source(src, solve_args.get("field")).select(solve_args.get("field"))
    names = _names(fit, field)
    times = np.asarray(times, np.float64)
    if times.ndim != 1 or len(times) == 0:
        raise ShapeError(f"times must be a 1-D array of the data's times, got shape "
                         f"{times.shape}")
    observed = _observed(observe, field)
    problem = _Problem(api.solve, src, field, names, params, h0, times, observed, bounds,
                       solve_args)
    problem.bind_data(data, weights)
    return _levenberg_marquardt(problem, max_iter, xtol, ftol)


# --- the problem: parameters <-> solves, residuals and Jacobians ----------------------
def _names(fit, field) -> tuple:
    from .ir.sensitivity import parse_names
    if isinstance(fit, str):
        fit = [fit]
    parsed = parse_names(field, fit)
    for n in parsed:
        if n.state is not None and field.states[field.state_names.index(n.state)].init \
                is not None:
            raise FitError(f"fit: `{n.text}` cannot be fitted: state `{n.state}` starts "
                           f"from its start expression; declare it without one and pass its "
                           f"starting guess in h0")
    return parsed


def _observed(observe, field) -> list[int]:
    states = field.state_names
    if observe is None:
        return list(range(len(states)))
    if isinstance(observe, str):
        observe = [observe]
    out = []
    for name in observe:
        if name not in states:
            raise FitError(f"observe: `{name}` is not a state of field {field.name} "
                           f"(its states: {', '.join(states)})")
        out.append(states.index(name))
    return out


class _Problem:
    def __init__(self, solve, src, field, names, params, h0, times, observed, bounds,
                 solve_args):
        self.solve, self.src, self.field, self.names = solve, src, field, names
        self.params = dict(params or {})
        self.h0 = None if h0 is None else np.asarray(h0, np.float64)
        self.times, self.observed, self.solve_args = times, observed, solve_args
        first = self._run(None)         # the starting guesses' solve: the grid's shape
        self.grid_shape = tuple(np.shape(first.t))
        self.n = int(np.prod(self.grid_shape, dtype=np.int64))
        self.first = first
        self.theta0 = self._start()
        self.lo, self.hi = self._bounds(bounds)
        bad = (self.theta0 < self.lo) | (self.theta0 > self.hi)
        if bad.any():
            j = int(np.nonzero(bad.any(axis=0))[0][0])
            raise FitError(f"fit: the starting guess of `{names[j].text}` lies outside its "
                           f"bounds in {int(bad[:, j].sum())} trajectories")

    # the starting guesses, (n, p)
    def _start(self) -> np.ndarray:
        cols = []
        free = [s.name for s in self.field.free_states]
        for nm in self.names:
            if nm.param is not None:
                if nm.param in self.params:
                    v = np.asarray(self.params[nm.param], np.float64)
                else:
                    default = next(p.default for p in self.field.params if p.name == nm.param)
                    value = getattr(default, "value", None)
                    if value is None:
                        raise FitError(f"fit: give a starting guess for `{nm.param}` in "
                                       f"params (its default is not a number)")
                    v = np.asarray(float(value))
                cols.append(np.broadcast_to(v, self.grid_shape).reshape(-1))
            else:
                k = free.index(nm.state)
                h = self.h0.reshape(self.grid_shape + (-1,)) if self.h0 is not None else None
                if h is None:
                    raise FitError(f"fit: `{nm.text}` needs its starting guess in h0")
                cols.append(h[..., k].reshape(-1))
        return np.stack(cols, axis=-1).astype(np.float64).copy()

    def _bounds(self, bounds):
        p = len(self.names)
        lo, hi = np.full(p, -np.inf), np.full(p, np.inf)
        texts = [n.text for n in self.names]
        for key, pair in (bounds or {}).items():
            if key not in texts:
                raise FitError(f"bounds: `{key}` is not one of the fitted names "
                               f"({', '.join(texts)})")
            try:
                a, b = pair
            except (TypeError, ValueError):
                raise FitError(f"bounds[{key!r}] must be a pair (low, high), None for no "
                               f"bound, got {pair!r}") from None
            j = texts.index(key)
            lo[j] = -np.inf if a is None else float(a)
            hi[j] = np.inf if b is None else float(b)
            if not lo[j] <= hi[j]:
                raise FitError(f"bounds[{key!r}]: low {lo[j]} is above high {hi[j]}")
        return lo, hi

    def bind_data(self, data, weights) -> None:
        data = np.asarray(data, np.float64)
        given = data.shape
        want = (len(self.times),) + self.grid_shape + (len(self.observed),)
        if given not in (want, want[:-1] if len(self.observed) == 1 else want):
            raise ShapeError(f"data must have shape (len(times),) + grid_shape + "
                             f"(n_observed,) = {want}"
                             + (f" (or {want[:-1]})" if len(self.observed) == 1 else "")
                             + f", got {given}")
        w = np.ones(given) if weights is None else np.asarray(weights, np.float64)
        try:
            w = np.broadcast_to(w, given)
        except ValueError:
            raise ShapeError(f"weights of shape {np.shape(weights)} do not broadcast "
                             f"against the data's {given}") from None
        data, w = data.reshape(want), w.reshape(want)
        use = np.isfinite(data) & (w != 0)
        # (n, m): time-major residual order within a trajectory
        self.data = np.moveaxis(np.where(use, data, 0.0).reshape(len(self.times), self.n, -1),
                                1, 0).reshape(self.n, -1)
        self.w = np.moveaxis(np.where(use, w, 0.0).reshape(len(self.times), self.n, -1),
                             1, 0).reshape(self.n, -1)
        self.m = (self.w != 0).sum(axis=1)

    def _run(self, theta: np.ndarray | None) -> Solution:
        params, h0 = dict(self.params), self.h0
        if theta is not None:
            h0 = None if h0 is None else h0.reshape(self.grid_shape + (-1,)).copy()
            free = [s.name for s in self.field.free_states]
            for j, nm in enumerate(self.names):
                col = theta[:, j].reshape(self.grid_shape)
                if nm.param is not None:
                    params[nm.param] = col
                else:
                    h0[..., free.index(nm.state)] = col
            if h0 is not None and self.h0.ndim == len(self.grid_shape):
                h0 = h0[..., 0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StatusWarning)
            warnings.simplefilter("ignore", NonFiniteWarning)
            return self.solve(self.src, h0, params=params, save_at=self.times,
                              sensitivities=[n.text for n in self.names], **self.solve_args)

    def evaluate(self, theta):
        """Residuals (n, m), Jacobian (n, m, p), ok (n,) at ``theta`` (one solve)."""
        sol = self._run(theta)
        return self._residuals(sol) + (sol,)

    def _residuals(self, sol):
        T, n, p = len(self.times), self.n, len(self.names)
        hist = np.asarray(sol.history, np.float64).reshape((T, n, -1))[..., self.observed]
        sens = np.asarray(sol.history_sensitivities, np.float64).reshape(
            (T, n, -1, p))[:, :, self.observed, :]
        y = np.moveaxis(hist, 1, 0).reshape(n, -1)
        J = np.moveaxis(sens, 1, 0).reshape(n, -1, p) * self.w[..., None]
        f = self.w * (y - self.data)
        f = np.where(self.w != 0, f, 0.0)
        J = np.where((self.w != 0)[..., None], J, 0.0)
        status = np.asarray(sol.status).reshape(-1) if sol.status is not None else 0
        ok = (status == 0) & np.isfinite(f).all(axis=1) & np.isfinite(J).all(axis=(1, 2))
        return f, J, ok


# --- Levenberg–Marquardt, one problem per trajectory, vectorised -------------------
def _levenberg_marquardt(pb: _Problem, max_iter: int, xtol: float, ftol: float) -> Fit:
    if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise ArgumentTypeError(f"max_iter must be an int >= 1, got {max_iter!r}")
    if not (ftol >= 0 and xtol >= 0):
        raise ArgumentTypeError(f"ftol and xtol must be >= 0, got {ftol!r}, {xtol!r}")
    n, p = pb.n, len(pb.names)
    theta = pb.theta0.copy()
    f, J, ok = pb._residuals(pb.first)
    iters = np.ones(n, np.int32)
    status = np.full(n, -1, np.int8)
    status[~ok] = SOLVE_FAILED
    fnorm = np.linalg.norm(f, axis=1)
    D = _colnorms(J)
    D = np.where(D == 0, 1.0, D)
    xnorm = np.linalg.norm(D * theta, axis=1)
    delta = FACTOR * xnorm
    delta = np.where(delta == 0, FACTOR, delta)
    par = np.zeros(n)
    first = np.ones(n, bool)
    status[(status < 0) & _singular(J)] = SINGULAR
    status[(status < 0) & (fnorm == 0)] = CONVERGED_FTOL
    status[(status < 0) & (iters >= max_iter)] = MAX_ITER
    with np.errstate(all="ignore"):
        while (status < 0).any():
            act = status < 0
            step, par_new = _lmpar(J[act], f[act], D[act], delta[act], par[act])
            par[act] = par_new
            trial = theta.copy()
            trial[act] = np.clip(theta[act] + step, pb.lo, pb.hi)
            step = trial[act] - theta[act]
            pnorm = np.linalg.norm(D[act] * step, axis=1)
            d_act = delta[act]
            d_act = np.where(first[act], np.minimum(d_act, pnorm), d_act)
            f1, J1, ok1, _ = pb.evaluate(trial)
            iters[act] += 1
            fn = fnorm[act]
            fnorm1 = np.where(ok1[act], np.linalg.norm(f1[act], axis=1), np.inf)
            actred = np.where(0.1 * fnorm1 < fn, 1.0 - (fnorm1 / fn) ** 2, -1.0)
            Jp = np.einsum("nmp,np->nm", J[act], step)
            t1 = np.linalg.norm(Jp, axis=1) / fn
            t2 = np.sqrt(par[act]) * pnorm / fn
            prered = t1 ** 2 + t2 ** 2 / 0.5
            dirder = -(t1 ** 2 + t2 ** 2)
            ratio = np.where(prered != 0, actred / prered, 0.0)
            # the trust region and the LM parameter (lmder's rules)
            shrink = ratio <= 0.25
            temp = np.where(actred >= 0, 0.5, 0.5 * dirder / (dirder + 0.5 * actred))
            temp = np.where((0.1 * fnorm1 >= fn) | (temp < 0.1), 0.1, temp)
            par_a = par[act]
            grow = ~shrink & ((par_a == 0) | (ratio >= 0.75))
            d_new = np.where(shrink, temp * np.minimum(d_act, pnorm / 0.1),
                             np.where(grow, pnorm / 0.5, d_act))
            par_a = np.where(shrink, par_a / temp, np.where(grow, 0.5 * par_a, par_a))
            delta[act], par[act] = d_new, par_a
            accept = ratio >= 1e-4
            idx = np.nonzero(act)[0]
            acc = idx[accept]
            theta[acc], f[acc], J[acc], fnorm[acc] = trial[acc], f1[acc], J1[acc], fnorm1[accept]
            first[acc] = False
            # the scaling: never decreasing, from each new Jacobian
            D[acc] = np.maximum(D[acc], _colnorms(J1[acc]))
            xnorm[act] = np.linalg.norm(D[act] * theta[act], axis=1)
            # the tests (after every trial, as lmder's inner loop makes them)
            st = np.full(len(idx), -1, np.int8)
            small = (np.abs(actred) <= max(ftol, _EPS)) & (prered <= max(ftol, _EPS)) \
                & (0.5 * ratio <= 1)
            st[small] = CONVERGED_FTOL
            st[(st < 0) & (d_new <= max(xtol, _EPS) * xnorm[act])] = CONVERGED_XTOL
            st[(st < 0) & (fnorm[act] == 0)] = CONVERGED_FTOL
            st[(st < 0) & accept & _singular(J1[act])] = SINGULAR
            st[(st < 0) & (iters[act] >= max_iter)] = MAX_ITER
            status[act] = st
    final = pb._run(theta)
    f, J, ok = pb._residuals(final)
    cost = 0.5 * np.sum(f * f, axis=1)
    status[~ok] = SOLVE_FAILED
    cov = _covariance(J, cost, pb.m, p)
    shape = pb.grid_shape
    return Fit(params={nm.text: theta[:, j].reshape(shape) for j, nm in enumerate(pb.names)},
               cost=cost.reshape(shape), iterations=iters.reshape(shape),
               status=status.reshape(shape), covariance=cov.reshape(shape + (p, p)),
               solution=final, names=tuple(nm.text for nm in pb.names))


def _colnorms(J: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("nmp,nmp->np", J, J))


def _singular(J: np.ndarray) -> np.ndarray:
    """Rank below the number of columns (MINPACK's QR would divide by a zero pivot)."""
    if J.shape[0] == 0:
        return np.zeros(0, bool)
    s = np.linalg.svd(J, compute_uv=False)
    tol = s[:, :1] * max(J.shape[1:]) * _EPS
    return (s[:, -1:] <= tol)[:, 0] | (s[:, 0] == 0)


def _covariance(J, cost, m, p) -> np.ndarray:
    n = J.shape[0]
    out = np.full((n, p, p), np.nan)
    JTJ = np.einsum("nmi,nmj->nij", J, J)
    good = (m > p) & np.isfinite(JTJ).all(axis=(1, 2)) & ~_singular(J)
    if good.any():
        inv = np.linalg.inv(JTJ[good])
        out[good] = inv * (2 * cost[good] / (m[good] - p))[:, None, None]
    return out


def _lmpar(J, f, D, delta, par0):
    """MINPACK's lmpar, per row: the step p and LM parameter par >= 0 with
    ``p = -(J^T J + par D^2)^-1 J^T f`` and either par = 0 and ||D p|| <= 1.1 delta, or
    | ||D p|| - delta | <= 0.1 delta (at most 10 safeguarded Newton iterations, Moré
    1978), through the SVD of J D^-1."""
    if J.shape[0] == 0:
        return np.zeros(D.shape), par0
    Js = J / D[:, None, :]
    U, s, Vt = np.linalg.svd(Js, full_matrices=False)
    g = np.einsum("nmp,nm->np", U, f)
    rank_tol = s[:, :1] * max(J.shape[1:]) * _EPS
    live = s > rank_tol
    sg = np.where(live, s * g, 0.0)
    ss = s * s

    def q_of(par):
        den = ss + par[:, None]
        coef = np.where(live, sg / np.where(den > 0, den, 1.0), 0.0)
        return -np.einsum("npk,np->nk", Vt, coef), coef, den

    q0, _, _ = q_of(np.zeros(len(delta)))
    qnorm0 = np.linalg.norm(q0, axis=1)
    phi0 = qnorm0 - delta
    gauss = phi0 <= 0.1 * delta
    full = live.all(axis=1)
    # lower bound: a Newton step from 0 (full rank), else 0
    d3 = np.where(live, sg * sg / np.where(ss > 0, ss ** 3, 1.0), 0.0).sum(axis=1)
    dphi0 = -d3 / np.where(qnorm0 > 0, qnorm0, 1.0)
    parl = np.where(full & (dphi0 < 0), -phi0 / np.where(dphi0 < 0, dphi0, -1.0), 0.0)
    gnorm = np.linalg.norm(sg, axis=1)
    paru = gnorm / delta
    paru = np.where(paru == 0, _DWARF / np.minimum(delta, 0.1), paru)
    par = np.clip(par0, parl, paru)
    par = np.where(par == 0, gnorm / np.where(qnorm0 > 0, qnorm0, 1.0), par)
    done = gauss.copy()
    for _ in range(10):
        par = np.where(par == 0, np.maximum(_DWARF, 0.001 * paru), par)
        q, coef, den = q_of(par)
        qnorm = np.linalg.norm(q, axis=1)
        phi = qnorm - delta
        done |= np.abs(phi) <= 0.1 * delta
        done |= (parl == 0) & (phi <= phi0) & (phi0 < 0)
        if done.all():
            break
        d3 = np.where(live, sg * sg / np.where(den > 0, den ** 3, 1.0), 0.0).sum(axis=1)
        dphi = -d3 / np.where(qnorm > 0, qnorm, 1.0)
        parc = -(phi / np.where(dphi < 0, dphi, -1.0)) * (qnorm / delta)
        parl = np.where(~done & (phi > 0), np.maximum(parl, par), parl)
        paru = np.where(~done & (phi < 0), np.minimum(paru, par), paru)
        par = np.where(done, par, np.maximum(parl, par + parc))
    par = np.where(gauss, 0.0, par)
    q, _, _ = q_of(par)
    return q / D, par
