"""The step of a method as data: what one step computes, built once from its tableau.

(A Rosenbrock method, ir/rosenbrock.py, has the same parts over its K_s, plus
``implicit``: the linear system each stage solves. A backend that does not read
``implicit`` must refuse such a method: its stages are not ``k_s = F(...)``.)

The numpy backend *evaluates* a StepProgram and every printer *prints* it; no
backend reads a tableau or writes the recurrence out for a particular method.
For an explicit Runge-Kutta method with tableau (a, b, c), step n is

    stage s:  y_s = h_n + dt * sum_j a_sj * k_j       (j < s, a_sj != 0, increasing j)
              k_s = F(t_n + c_s * dt, y_s)
    update:   h_{n+1} = h_n + dt * sum_s b_s * k_s     (b_s != 0, increasing s)

A ``Combination`` is one such ``h + dt * sum(w_j * k_j)``: the only arithmetic a
backend does with the stage values. Coefficients stay exact (``Fraction``);
a backend rounds each to its working dtype once. Methods with more parts (an
embedded error estimate, a continuous extension) add fields here, computed by
the same Combination, so each backend gains them without a new recurrence.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from .embedded import EmbeddedTableau, dense_coefficients
from .rosenbrock import RosenbrockTableau
from .tableau import Tableau


@dataclass(frozen=True)
class Combination:
    """``h + dt * sum(w * k_j for j, w in terms)``; no terms: ``h`` itself."""

    terms: tuple[tuple[int, Fraction], ...]     # (stage j, weight), weights != 0, j increasing

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(j for j, _ in self.terms)


@dataclass(frozen=True)
class Stage:
    index: int
    c: Fraction                 # the stage time is t_n + c * dt
    state: Combination          # the stage state y_s, from the earlier stages' k


@dataclass(frozen=True)
class StepProgram:
    method: str
    stages: tuple[Stage, ...]
    update: Combination         # the new state h_{n+1}
    # adaptive methods (ir/embedded.py): the error estimate e = dt * sum(w_j * k_j)
    # (only the terms are used), the continuous extension y(t_n + theta*dt) =
    # h_n + dt * sum_p theta^(p+1) * sum(w_j * k_j for dense[p]'s terms), and FSAL
    error: Combination | None = None
    dense: tuple[Combination, ...] | None = None
    fsal: bool = False
    q: int = 0                  # the lower order of the pair (the controller's exponent)
    # a second error estimate and the norm that combines them (ir/embedded.py: "rms" is
    # err alone; "dop853" Hairer's, ir/controller.py's error_norm); the trailing stages
    # only the continuous extension reads (the FSAL stage is the one before them)
    error2: Combination | None = None
    norm: str = "rms"
    extra: int = 0
    # a Rosenbrock method (ir/rosenbrock.py): the linear systems of its stages
    implicit: "Implicit | None" = None

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    @property
    def last(self) -> int:
        """The last stage every step computes: F at the new state for an FSAL method."""
        return len(self.stages) - 1 - self.extra


@dataclass(frozen=True)
class Implicit:
    """The linearly implicit part of a Rosenbrock step (ir/rosenbrock.py, the K form):
    stage s solves ``W K_s = F(stage time, stage state) + rhs[s] + dt * d[s] * dF/dt``
    with ``W = I / gamma - dt * J`` (J = dF/dh at the step's start, one LU per step);
    ``rhs[s]``'s terms are ``sum(w_j * K_j)`` (no h, no dt). The stage states, the
    update, the error and the continuous extension are the StepProgram's own
    Combinations over the K_s."""

    gamma: Fraction
    rhs: tuple[Combination, ...]        # per stage
    d: tuple[Fraction, ...]             # per stage

    @property
    def reads_time_derivative(self) -> bool:
        return any(x != 0 for x in self.d)


@functools.lru_cache(maxsize=None)
def step_program(tableau: Tableau) -> StepProgram:
    """The step program of an explicit Runge-Kutta tableau."""
    stages = tuple(Stage(s, tableau.c[s], _combination(row)) for s, row in enumerate(tableau.a))
    if not isinstance(tableau, EmbeddedTableau):
        return StepProgram(tableau.name, stages, _combination(tableau.b))
    powers = tuple(zip(*dense_coefficients(tableau)))      # per power of theta, per stage
    implicit = None
    if isinstance(tableau, RosenbrockTableau):
        implicit = Implicit(tableau.gamma, tuple(_combination(row) for row in tableau.cmat),
                            tuple(Fraction(x) for x in tableau.d))
    return StepProgram(tableau.name, stages, _combination(tableau.b),
                       error=_combination(tableau.err),
                       dense=tuple(_combination(p) for p in powers),
                       fsal=tableau.fsal, q=tableau.q, implicit=implicit,
                       error2=None if tableau.err2 is None else _combination(tableau.err2),
                       norm=tableau.norm, extra=tableau.extra)


def _combination(weights) -> Combination:
    return Combination(tuple((j, Fraction(w)) for j, w in enumerate(weights) if w != 0))
