"""Rosenbrock (linearly implicit) methods as data, defined once: RODAS4 (below), RODAS5P
and ROSENBROCK23 (after it, in the same form).

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
from decimal import Decimal, localcontext
from fractions import Fraction as Fr

from .pair import EmbeddedTableau

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


def _rodas_dense(b, *h) -> tuple[tuple[Fr, ...], ...]:
    """Per stage, the coefficients of s, s^2, ... of ``y0 (1 - s) + s (y1 + (1 - s) (D_1 +
    s (D_2 + s (D_3 + ...))))``, ``D_p = sum_j h[p-1][j] k_j`` (module doc: rodas.f's D2, D3
    are h[0], h[1]): ``s (m_j + h1j) + s^2 (h2j - h1j) + ... - s^(r+1) hrj``."""
    rows = []
    for j, bj in enumerate(b):
        hj = [row[j] for row in h]
        rows.append((bj + hj[0],) + tuple(hj[p] - hj[p - 1] for p in range(1, len(hj)))
                    + (-hj[-1],))
    return tuple(rows)


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


# RODAS5P: G. Steinebach, "Construction of Rosenbrock-Wanner method Rodas5P and numerical
# benchmarks within the Julia Differential Equations package", BIT Numer. Math. 63 (2023)
# 27, in the W form above, with the digits OrdinaryDiffEq.jl prints them
# (lib/OrdinaryDiffEqRosenbrock/src/rosenbrock_tableaus.jl, Rodas5PTableau: A, C, gamma,
# c, d and the three rows of H, its order-4 dense output
# ``y0 (1 - s) + s (y1 + (1 - s) (D_1 + s (D_2 + s D_3)))``). Stiffly accurate as RODAS4:
# stage 8 is evaluated at the embedded order-4 solution (the last row of a), the order-5
# solution adds K_8, and the error estimate is K_8.
_A5 = ((),
       (_d("3.0"),),
       (_d("2.849394379747939"), _d("0.45842242204463923")),
       (_d("-6.954028509809101"), _d("2.489845061869568"), _d("-10.358996098473584")),
       (_d("2.8029986275628964"), _d("0.5072464736228206"), _d("-0.3988312541770524"),
        _d("-0.04721187230404641")),
       (_d("-7.502846399306121"), _d("2.561846144803919"), _d("-11.627539656261098"),
        _d("-0.18268767659942256"), _d("0.030198172008377946")))
_A5 = _A5 + (_A5[5] + (Fr(1),), _A5[5] + (Fr(1), Fr(1)))
_C5 = ((),
       (_d("-14.155112264123755"),),
       (_d("-17.97296035885952"), _d("-2.859693295451294")),
       (_d("147.12150275711716"), _d("-1.41221402718213"), _d("71.68940251302358")),
       (_d("165.43517024871676"), _d("-0.4592823456491126"), _d("42.90938336958603"),
        _d("-5.961986721573306")),
       (_d("24.854864614690072"), _d("-3.0009227002832186"), _d("47.4931110020768"),
        _d("5.5814197821558125"), _d("-0.6610691825249471")),
       (_d("30.91273214028599"), _d("-3.1208243349937974"), _d("77.79954646070892"),
        _d("34.28646028294783"), _d("-19.097331116725623"), _d("-28.087943162872662")),
       (_d("37.80277123390563"), _d("-3.2571969029072276"), _d("112.26918849496327"),
        _d("66.9347231244047"), _d("-40.06618937091002"), _d("-54.66780262877968"),
        _d("-9.48861652309627")))
_H5 = ((_d("25.948786856663858"), _d("-2.5579724845846235"), _d("10.433815404888879"),
        _d("-2.3679251022685204"), _d("0.524948541321073"), _d("1.1241088310450404"),
        _d("0.4272876194431874"), _d("-0.17202221070155493")),
       (_d("-9.91568850695171"), _d("-0.9689944594115154"), _d("3.0438037242978453"),
        _d("-24.495224566215796"), _d("20.176138334709044"), _d("15.98066361424651"),
        _d("-6.789040303419874"), _d("-6.710236069923372")),
       (_d("11.419903575922262"), _d("2.8879645146136994"), _d("72.92137995996029"),
        _d("80.12511834622643"), _d("-52.072871366152654"), _d("-59.78993625266729"),
        _d("-0.15582684282751913"), _d("4.883087185713722")))
_B5 = _A5[7] + (Fr(1),)
_G5 = _d("0.21193756319429014")

RODAS5P = RosenbrockTableau(
    "rodas5p",
    a=_A5,
    b=_B5,
    c=(Fr(0), _d("0.6358126895828704"), _d("0.4095798393397535"), _d("0.9769306725060716"),
       _d("0.4288403609558664"), Fr(1), Fr(1), Fr(1)),
    err=(Fr(0),) * 7 + (Fr(1),),
    q=4, fsal=False,
    dense=_rodas_dense(_B5, *_H5),
    gamma=_G5,
    cmat=_C5,
    d=(_G5, _d("-0.42387512638858027"), _d("-0.3384627126235924"), _d("1.8046452872882734"),
       _d("2.325825639765069"), Fr(0), Fr(0), Fr(0)),
)


def _inverse_lower(g: list[list[Fr]]) -> list[list[Fr]]:
    """The inverse of a lower-triangular matrix, exactly (forward substitution)."""
    n = len(g)
    inv = [[Fr(0)] * n for _ in range(n)]
    for col in range(n):
        for i in range(col, n):
            acc = Fr(int(i == col)) - sum((g[i][k] * inv[k][col] for k in range(col, i)), Fr(0))
            inv[i][col] = acc / g[i][i]
    return inv


def from_standard_form(name: str, alpha, gammas, b, err, dense, q: int) -> RosenbrockTableau:
    """A Rosenbrock (or W-) method given in the standard form of HW II, VI.4 (4.4),
    ``(I - h gamma J) k_i = F(t + c_i h, y + h sum_j alpha_ij k_j) + h J sum_j gamma_ij k_j
    + h gamma_i F_t`` (``gammas``: the full lower triangle, its constant diagonal gamma;
    ``b``, ``err``, ``dense``: over the k_i), in the W form above, exactly: with
    ``U_i = sum_j gamma_ij k_j`` (so ``k = Gamma^-1 U``), stage i solves
    ``(I / gamma - h J) U_i = F_i - sum_{j<i} (Gamma^-1)_ij U_j + h gamma_i F_t``: so
    ``a = alpha Gamma^-1``, ``c_ij = -(Gamma^-1)_ij``, ``m = b Gamma^-1``, the error and dense
    weights times Gamma^-1, ``d_i = sum_j gamma_ij`` and ``c_i = sum_j alpha_ij``
    (HW II, (4.7)-(4.9))."""
    n = len(gammas)
    g = [[Fr(gammas[i][j]) if j <= i else Fr(0) for j in range(n)] for i in range(n)]
    inv = _inverse_lower(g)

    def times_inv(row):         # a row vector (over the k_i) times Gamma^-1
        return tuple(sum((Fr(row[k]) * inv[k][j] for k in range(n)), Fr(0)) for j in range(n))

    alpha_full = [tuple(alpha[i]) + (Fr(0),) * (n - len(alpha[i])) for i in range(n)]
    a = tuple(times_inv(alpha_full[i])[:i] for i in range(n))
    powers = list(zip(*dense))              # per power, over the k_i
    dense_u = list(zip(*(times_inv(p) for p in powers)))
    return RosenbrockTableau(
        name, a=a, b=times_inv(b), c=tuple(sum((Fr(x) for x in row), Fr(0)) for row in alpha),
        err=times_inv(err), q=q, fsal=False, dense=tuple(tuple(r) for r in dense_u),
        gamma=g[0][0], cmat=tuple(tuple(-inv[i][j] for j in range(i)) for i in range(n)),
        d=tuple(sum(g[i][:i + 1], Fr(0)) for i in range(n)))


def _sqrt2() -> Fr:
    """sqrt(2) to 60 digits (an exact Fraction of that decimal: far below float64's ulp)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return Fr(Decimal(2).sqrt())


# ROSENBROCK23: L. F. Shampine, M. W. Reichelt, "The MATLAB ODE Suite", SIAM J. Sci.
# Comput. 18 (1997) 1-22, section 3.1 (MATLAB's ode23s; OrdinaryDiffEq.jl's Rosenbrock23
# is the same W-method): with d = 1 / (2 + sqrt 2), e32 = 6 + sqrt 2, W = I - h d J,
#     k1 = W^-1 (F0 + h d T),                 F1 = F(t + h/2, y + h/2 k1),
#     k2 = W^-1 (F1 - k1) + k1,               y1 = y + h k2,   F2 = F(t + h, y1),
#     k3 = W^-1 (F2 - e32 (k2 - F1) - 2 (k1 - F0) + h d T),
#     error ~ h/6 (k1 - 2 k2 + k3),
#     y(t + s h) = y + h (s (1 - s) / (1 - 2d) k1 + s (s - 2d) / (1 - 2d) k2).
# Substituting W k1 = F0 + h d T and W k2 = F1 - h d J k1 gives the standard form:
# gamma_21 = -d, gamma_31 = (e32 - 2) d, gamma_32 = -e32 d (and the time weights
# gamma_i = d, 0, -d, the row sums: the T term of k3 is the paper's h d T); alpha_21 = 1/2,
# alpha_32 = 1; b = (0, 1, 0). Order 2 (propagated), the error estimate of order 3
# (q = 2), L-stable.
def _rosenbrock23() -> RosenbrockTableau:
    r2 = _sqrt2()
    d = 1 / (2 + r2)
    e32 = 6 + r2
    one = 1 / (1 - 2 * d)
    z = Fr(0)
    return from_standard_form(
        "rosenbrock23",
        alpha=((), (Fr(1, 2),), (z, Fr(1))),
        gammas=((d,), (-d, d), ((e32 - 2) * d, -e32 * d, d)),
        b=(z, Fr(1), z),
        err=(Fr(1, 6), Fr(-1, 3), Fr(1, 6)),
        dense=((one, -one), (-2 * d * one, one), (z, z)),
        q=2)


ROSENBROCK23 = _rosenbrock23()

STIFF: dict[str, RosenbrockTableau] = {t.name: t for t in (ROSENBROCK23, RODAS4, RODAS5P)}
