"""Rosenbrock (linearly implicit) methods as data: RODAS4, defined once.

Hairer & Wanner, *Solving Ordinary Differential Equations II*, 2nd ed., Springer
1996, section VI.4 (Table 4.2 and the text around it), with the coefficients of
Hairer's Fortran code rodas.f (http://www.unige.ch/~hairer/software.html;
subroutine ROCOE, METH = 1: "RODAS4"), which uses the transformed variables of
HW II, VI.4 (4.7)-(4.9): with ``E = I / (gamma * h) - J`` (J = dF/dy at the
step's start (t, y), one LU per step), stage i solves

    E k_i = F(t + c_i h, y + sum_{j<i} a_ij k_j) + sum_{j<i} (c_ij / h) k_j + h d_i F_t

(``F_t = dF/dt`` at (t, y), only for fields that read ``t``), and the solution is
``y + sum_j m_j k_j``. RODAS4 is stiffly accurate: its fifth stage state
``y + sum a_5j k_j`` (c_5 = 1) plus k_5 is the embedded order-3 solution, the
sixth stage is evaluated there (c_6 = 1), and the order-4 solution adds k_6; so
``m = (a_51, a_52, a_53, a_54, 1, 1)``, the embedded weights are
``(a_51, a_52, a_53, a_54, 1, 0)`` and the error estimate is k_6 itself
(rodas.f's ``ERR`` is the norm of AK6).

VGPU holds the same method with the unknowns divided by h, ``K_i = k_i / h``
(multiply the equation above by h): stage i solves

    W K_i = F(t + c_i dt, y + dt * sum_{j<i} a_ij K_j) + sum_{j<i} c_ij K_j + dt d_i F_t,
    W = I / gamma - dt * J,

so every sum over the stages is a ``Combination`` of ir.step (``h + dt * sum w_j K_j``)
exactly as for the explicit pairs, and the error estimate, the update and the
continuous extension read the K_i as they read an explicit method's k_i. (W is h
times rodas.f's E: the same pivots are chosen, up to rounding.)

Continuous extension (rodas.f, the dense output prepared after an accepted step
and function ``CONTRO``): ``y(t + s h) = y0 (1 - s) + s (y1 + (1 - s) (D2 + s D3))``
with ``D2 = sum_j d2j k_j``, ``D3 = sum_j d3j k_j`` (j = 1..5, the D21..D35 of
ROCOE). Written as ``y0 + h * sum_p s^p * (...)`` (ir.embedded's form):
``y0 + h * sum_j K_j * (s (m_j + d2j) + s^2 (d3j - d2j) - s^3 d3j)``.

The coefficients are exactly the decimals rodas.f prints (``Fraction`` of the
decimal text): a backend rounds each to its working dtype once.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as Fr

from .embedded import EmbeddedTableau

MAX_STATES = 32             # the n x n matrix of a trajectory lives in registers


@dataclass(frozen=True)
class RosenbrockTableau(EmbeddedTableau):
    """An embedded pair whose stages are linearly implicit (module doc, the K form):
    ``a``, ``b``, ``c``, ``err``, ``q``, ``dense`` mean what they mean for an
    explicit pair, over the K_i; ``fsal`` is False (the next step starts with
    F(t, y) at its own start). ``gamma``: the diagonal, ``W = I / gamma - dt * J``;
    ``cmat[i]``: the c_ij, j < i (the earlier stages' K added to stage i's right-
    hand side); ``d[i]``: the weight of ``dt * dF/dt`` there."""

    gamma: Fr
    cmat: tuple[tuple[Fr, ...], ...]
    d: tuple[Fr, ...]


def _d(text: str) -> Fr:
    return Fr(text)


# rodas.f, ROCOE, METH = 1 (digits as printed there; 0.386 etc. as printed)
_A = ((),
      (_d("1.544"),),
      (_d("0.9466785280815826"), _d("0.2557011698983284")),
      (_d("3.314825187068521"), _d("2.896124015972201"), _d("0.9986419139977817")),
      (_d("1.221224509226641"), _d("6.019134481288629"), _d("12.53708332932087"),
       _d("-0.6878860361058950")))
_C = ((),
      (_d("-5.6688"),),
      (_d("-2.430093356833875"), _d("-0.2063599157091915")),
      (_d("-0.1073529058151375"), _d("-9.594562251023355"), _d("-20.47028614809616")),
      (_d("7.496443313967647"), _d("-10.24680431464352"), _d("-33.99990352819905"),
       _d("11.70890893206160")),
      (_d("8.083246795921522"), _d("-7.981132988064893"), _d("-31.52159432874371"),
       _d("16.31930543123136"), _d("-6.058818238834054")))
_D2 = (_d("10.12623508344586"), _d("-7.487995877610167"), _d("-34.80091861555747"),
       _d("-7.992771707568823"), _d("1.025137723295662"), Fr(0))
_D3 = (_d("-0.6762803392801253"), _d("6.087714651680015"), _d("16.43084320892478"),
       _d("24.76722511418386"), _d("-6.594389125716872"), Fr(0))
_B = _A[4] + (Fr(1), Fr(1))


def _rodas_dense(b, d2, d3) -> tuple[tuple[Fr, ...], ...]:
    """Per stage, the coefficients of s, s^2, s^3 (module doc)."""
    return tuple((bj + d2j, d3j - d2j, -d3j) for bj, d2j, d3j in zip(b, d2, d3))


RODAS4 = RosenbrockTableau(
    "rodas4",
    a=_A + (_A[4] + (Fr(1),),),
    b=_B,
    c=(Fr(0), _d("0.386"), _d("0.21"), _d("0.63"), Fr(1), Fr(1)),
    err=(Fr(0),) * 5 + (Fr(1),),
    q=3, fsal=False,
    dense=_rodas_dense(_B, _D2, _D3),
    gamma=Fr(1, 4),
    cmat=_C,
    d=(Fr(1, 4), _d("-0.1043"), _d("0.1035"), _d("-0.03620000000000023"), Fr(0), Fr(0)),
)

STIFF: dict[str, RosenbrockTableau] = {RODAS4.name: RODAS4}
