"""The step-size controller of the adaptive methods: the contract's rules, once.

Hairer, Norsett & Wanner, Solving ODEs I, II.4 (as scipy.integrate's RK45/RK23):
- the error of a step from y to y' with embedded estimate e is
  ``err = sqrt(mean_i (e_i / (atol + rtol * max(|y_i|, |y'_i|)))^2)``;
  the step is accepted when ``err <= 1``;
- the next step is ``dt * min(FACTOR_MAX, max(FACTOR_MIN, SAFETY * err^(-1/(q+1))))``
  (q: the pair's lower order), never growing right after a rejection, at most dtmax;
- a step whose end would reach or pass t1, or fall short of it by less than
  END_ULPS units in the last place of t1, is cut to end exactly at t1;
- a proposed step below UNDERFLOW[dtype] * |t| (or a non-finite err) ends the
  trajectory with status UNDERFLOW_STATUS;
- (rodas4) an attempt whose matrix W is singular is rejected with err
  ``singular_error(q)``: the step is halved.
The functions take numpy arrays (or scalars) and are what the numpy backend
runs; the kernels' controller is built once from the same constants and formulas
(codegen/build/controller.py) and printed for each compiled backend.
"""
from __future__ import annotations

import numpy as np

SAFETY = 0.9
FACTOR_MIN = 0.2
FACTOR_MAX = 5.0
END_ULPS = 8
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-6
DEFAULT_MAX_STEPS = 100_000
UNDERFLOW = {"float64": 1e-14, "float32": 1e-6}

# Solution.status
REACHED_END = 0
STOPPED = 1
MAX_STEPS = 2
STEP_UNDERFLOW = 3
TOO_MANY_EVENTS = 4


def scale(y, y_new, rtol, atol):
    """The per-component tolerance ``atol + rtol * max(|y|, |y'|)``."""
    return atol + rtol * np.maximum(np.abs(y), np.abs(y_new))


def factor(err, q: int, after_reject):
    """The step-size factor for an error norm ``err`` (an array); at most 1 where
    ``after_reject`` (the attempt before this one was rejected). err = 0 gives
    FACTOR_MAX; a non-finite err gives FACTOR_MIN (its lane ends with status 3)."""
    dtype = np.asarray(err).dtype
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        raw = dtype.type(SAFETY) * np.power(err, dtype.type(-1.0 / (q + 1)))
    f = np.minimum(dtype.type(FACTOR_MAX), np.maximum(dtype.type(FACTOR_MIN), raw))
    f = np.where(np.isfinite(err), f, dtype.type(FACTOR_MIN))
    return np.where(after_reject, np.minimum(f, dtype.type(1)), f).astype(dtype)


def singular_error(q: int) -> float:
    """The error norm a Rosenbrock attempt whose ``W`` is singular (a zero pivot) takes:
    a rejection whose factor ``SAFETY * err^(-1/(q+1))`` is 1/2 (to rounding), so the
    step is halved and tried again, as Hairer's rodas.f does; in a basin the largest
    error still rules."""
    return (SAFETY / 0.5) ** (q + 1)


def end_gap(t1, dtype) -> float:
    """How far short of t1 a step may end and still be cut to end at t1."""
    d = np.dtype(dtype)
    return float(END_ULPS * np.spacing(np.abs(d.type(t1))))


def underflow(dt, t, dtype):
    """Where a proposed step is too small for the working precision at time t."""
    d = np.dtype(dtype)
    return ~(dt > d.type(UNDERFLOW[d.name]) * np.abs(t))


def error_norm(sq, sq2, n: int, norm: str = "rms"):
    """The error of a step from ``sq = sum_i (e_i / scale_i)^2`` over its n states (and
    ``sq2``, the same sum of a second estimate): ``"rms"`` is the contract's
    ``sqrt(sq / n)``; ``"dop853"`` Hairer's combination of DOP853's 5th-order (sq) and
    3rd-order (sq2) estimates, ``sq / sqrt((sq + 0.01 sq2) n)``, 0 where sq is 0 (as
    scipy's DOP853._estimate_error_norm). The printers write the same formula."""
    d = np.asarray(sq).dtype.type
    if norm == "rms":
        return np.sqrt(sq / d(n))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = sq / np.sqrt((sq + d(0.01) * sq2) * d(n))
    return np.where(sq == 0, d(0), out).astype(np.asarray(sq).dtype)


def rms(x, axis=0):
    """The root mean square over the states (the first axis of a stacked array)."""
    return np.sqrt(np.mean(np.square(x), axis=axis))


def initial_step(f, t0, y0, f0, span, q: int, rtol, atol, dtmax, smallest=lambda x: x,
                 n: int | None = None):
    """Hairer's starting step (HNW I, II.4; scipy's select_initial_step).

    ``y0``, ``f0``: arrays (n_states, ...) of the state and F there; ``span``: t1 - t0;
    ``f(t, y, h0)`` evaluates F at the trial point (h0: the trial step);
    ``smallest(x)``: the value a group of lanes shares (a basin: the smallest of its
    lanes'), applied to the trial step and to the result. The compiled kernels
    print the same steps (codegen/build/first_step.py). ``n``: the norms measure the first n
    states only (a field joined with its sensitivities: Field.error_states)."""
    d = y0.dtype.type
    m = slice(None, n)
    sc = atol + np.abs(y0[m]) * rtol
    d0, d1 = rms(y0[m] / sc), rms(f0[m] / sc)
    small = (d0 < 1e-5) | (d1 < 1e-5)
    with np.errstate(all="ignore"):
        h0 = np.where(small, d(1e-6), d(0.01) * d0 / d1)
    h0 = smallest(np.minimum(h0, span))
    f1 = f(t0 + h0, [a + h0 * b for a, b in zip(y0, f0)], h0)
    with np.errstate(all="ignore"):
        d2 = rms((f1[m] - f0[m]) / sc) / h0
        big = np.maximum(d1, d2)
        h1 = np.where(big <= 1e-15, np.maximum(d(1e-6), h0 * d(1e-3)),
                      np.power(d(0.01) / big, d(1.0 / (q + 1))))
    step = smallest(np.minimum(np.minimum(d(100) * h0, h1), span))
    step = np.minimum(step, dtmax)
    ok = np.isfinite(step) & (step > 0)
    return np.where(ok, step, np.minimum(span, dtmax)).astype(y0.dtype)
