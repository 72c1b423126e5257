"""The form of an embedded Runge-Kutta pair (ir/embedded.py holds the methods).

An ``EmbeddedTableau`` is a ``Tableau`` (a, b, c: the propagated solution) plus
- ``err``: the weights of the error estimate, ``e = dt * sum_s err_s * k_s``
  (b minus the embedded weights, or the reverse: only |e| is used);
- ``q``: the lower order of the pair (the controller's exponent is -1/(q+1));
- ``fsal``: the last stage is F at the new state (first-same-as-last), so an
  accepted step's last k is the next step's first;
- ``dense``: the continuous extension ``y(t + theta*dt) = y + dt * sum_s
  k_s * sum_p dense[s][p] * theta^(p+1)``; None means the cubic Hermite
  interpolant through both step ends (``hermite``), built from ``b`` and the
  FSAL last stage;
- ``extra``: how many of the last stages only the continuous extension reads (dop853,
  vern7, vern9: b and err are 0 there); a kernel that never saves or locates an event
  runs ``lean(tableau)``, without them;
- ``err2``, ``norm``: a second error estimate and how the two make the step's error
  (``"rms"``: err alone, the contract's norm; ``"dop853"``: Hairer's combination of the
  5th- and 3rd-order estimates, ir/controller.py's ``error_norm``).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import KW_ONLY, dataclass
from fractions import Fraction as Fr

from .tableau import Tableau


@dataclass(frozen=True)
class EmbeddedTableau(Tableau):
    err: tuple[Fr, ...]
    q: int
    fsal: bool
    dense: tuple[tuple[Fr, ...], ...] | None
    _: KW_ONLY
    extra: int = 0
    err2: tuple[Fr, ...] | None = None
    norm: str = "rms"

    @property
    def step_stages(self) -> int:
        """The stages every step computes (the FSAL stage is the last of them)."""
        return len(self.a) - self.extra


@functools.lru_cache(maxsize=None)
def lean(tab):
    """``tab`` without its dense-only stages (the same steps; no continuous extension
    of its own: a kernel without save_at or events never reads it)."""
    if not isinstance(tab, EmbeddedTableau) or not tab.extra:
        return tab
    m = tab.step_stages
    return dataclasses.replace(tab, a=tab.a[:m], b=tab.b[:m], c=tab.c[:m], err=tab.err[:m],
                               err2=None if tab.err2 is None else tab.err2[:m],
                               dense=None, extra=0)


def _d(text: str) -> Fr:
    """A coefficient printed in decimal by its source, exactly as printed."""
    return Fr(text)


def hermite(b: tuple[Fr, ...]) -> tuple[tuple[Fr, ...], ...]:
    """Cubic Hermite through (y0, f0) and (y1, f1) with y1 = y0 + dt*sum b_s k_s,
    f0 = k_0 and f1 = k_last (FSAL), in the powers theta, theta^2, theta^3:
    y(theta) = y0 + dt*[(3 theta^2 - 2 theta^3) B + (theta - 2 theta^2 + theta^3) f0
                        + (theta^3 - theta^2) f1],  B = sum b_s k_s."""
    last = len(b) - 1
    rows = []
    for s, bs in enumerate(b):
        row = [Fr(0), 3 * bs, -2 * bs]
        if s == 0:
            row = [row[0] + 1, row[1] - 2, row[2] + 1]
        if s == last:
            row = [row[0], row[1] - 1, row[2] + 1]
        rows.append(tuple(row))
    return tuple(rows)
