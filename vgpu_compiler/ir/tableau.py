"""Explicit Runge-Kutta integrators as Butcher tableaux: data, defined once.

Stage s:  k_s = F(t_n + c_s*dt, h_n + dt * sum_j a[s][j] * k_j)
Step:     h_{n+1} = h_n + dt * sum_s b[s] * k_s
Every backend reads these numbers; no backend has its own copy of a method.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as Fr


@dataclass(frozen=True)
class Tableau:
    name: str
    a: tuple[tuple[Fr, ...], ...]   # strictly lower triangular: a[s] has s entries
    b: tuple[Fr, ...]
    c: tuple[Fr, ...]

    @property
    def stages(self) -> int:
        return len(self.b)


TABLEAUX: dict[str, Tableau] = {
    t.name: t
    for t in (
        Tableau("euler", a=((),), b=(Fr(1),), c=(Fr(0),)),
        Tableau("midpoint", a=((), (Fr(1, 2),)), b=(Fr(0), Fr(1)), c=(Fr(0), Fr(1, 2))),
        Tableau("heun", a=((), (Fr(1),)), b=(Fr(1, 2), Fr(1, 2)), c=(Fr(0), Fr(1))),
        Tableau(
            "rk4",
            a=((), (Fr(1, 2),), (Fr(0), Fr(1, 2)), (Fr(0), Fr(0), Fr(1))),
            b=(Fr(1, 6), Fr(1, 3), Fr(1, 3), Fr(1, 6)),
            c=(Fr(0), Fr(1, 2), Fr(1, 2), Fr(1)),
        ),
    )
}
