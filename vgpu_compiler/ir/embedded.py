"""Embedded Runge-Kutta pairs (the adaptive methods) as data, defined once.

Each method is an ``EmbeddedTableau`` (ir/pair.py says what its fields mean: the
error weights, q, FSAL, the continuous extension, the dense-only stages, a second
estimate and its norm): bs3, dopri5 and tsit5 here, dop853 in ir/dop853.py, vern7
and vern9 in ir/verner.py; ``ADAPTIVE`` names them all (the last three are built when
first looked up: their modules take 7-10 ms to import, which ``import vgpu`` and a call of
another method need not pay).
Every backend reads these numbers through ``ir.step``; none has its own copy.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from fractions import Fraction as Fr

from .pair import EmbeddedTableau, _d, hermite, lean  # noqa: F401  (the form, and its helpers)


# Bogacki & Shampine, "A 3(2) pair of Runge-Kutta formulas", Appl. Math. Lett. 2 (1989)
# 321-325: the 3rd-order solution propagates (b), the 2nd-order one estimates the error
# (bhat = 7/24, 1/4, 1/3, 1/8); FSAL. Dense output: cubic Hermite (as scipy's RK23 and
# OrdinaryDiffEq.jl's BS3 use: both ends' values and slopes).
_BS3_B = (Fr(2, 9), Fr(1, 3), Fr(4, 9), Fr(0))
BS3 = EmbeddedTableau(
    "bs3",
    a=((), (Fr(1, 2),), (Fr(0), Fr(3, 4)), (Fr(2, 9), Fr(1, 3), Fr(4, 9))),
    b=_BS3_B,
    c=(Fr(0), Fr(1, 2), Fr(3, 4), Fr(1)),
    err=(Fr(2, 9) - Fr(7, 24), Fr(1, 3) - Fr(1, 4), Fr(4, 9) - Fr(1, 3), -Fr(1, 8)),
    q=2, fsal=True, dense=None)

# Dormand & Prince, "A family of embedded Runge-Kutta formulae", J. Comput. Appl. Math.
# 6 (1980) 19-26 (the 5th-order solution propagates); error weights E and the dense
# output P of Hairer's dopri5.f (Shampine's 4th-order interpolant, Hairer-Norsett-Wanner
# I, II.6), exactly as scipy.integrate's RK45 holds them (RK45.E, RK45.P).
_DP_B = (Fr(35, 384), Fr(0), Fr(500, 1113), Fr(125, 192), Fr(-2187, 6784), Fr(11, 84), Fr(0))
DOPRI5 = EmbeddedTableau(
    "dopri5",
    a=((),
       (Fr(1, 5),),
       (Fr(3, 40), Fr(9, 40)),
       (Fr(44, 45), Fr(-56, 15), Fr(32, 9)),
       (Fr(19372, 6561), Fr(-25360, 2187), Fr(64448, 6561), Fr(-212, 729)),
       (Fr(9017, 3168), Fr(-355, 33), Fr(46732, 5247), Fr(49, 176), Fr(-5103, 18656)),
       _DP_B[:6]),
    b=_DP_B,
    c=(Fr(0), Fr(1, 5), Fr(3, 10), Fr(4, 5), Fr(8, 9), Fr(1), Fr(1)),
    err=(Fr(-71, 57600), Fr(0), Fr(71, 16695), Fr(-71, 1920), Fr(17253, 339200),
         Fr(-22, 525), Fr(1, 40)),
    q=4, fsal=True,
    dense=((Fr(1), Fr(-8048581381, 2820520608), Fr(8663915743, 2820520608),
            Fr(-12715105075, 11282082432)),
           (Fr(0), Fr(0), Fr(0), Fr(0)),
           (Fr(0), Fr(131558114200, 32700410799), Fr(-68118460800, 10900136933),
            Fr(87487479700, 32700410799)),
           (Fr(0), Fr(-1754552775, 470086768), Fr(14199869525, 1410260304),
            Fr(-10690763975, 1880347072)),
           (Fr(0), Fr(127303824393, 49829197408), Fr(-318862633887, 49829197408),
            Fr(701980252875, 199316789632)),
           (Fr(0), Fr(-282668133, 205662961), Fr(2019193451, 616988883),
            Fr(-1453857185, 822651844)),
           (Fr(0), Fr(40617522, 29380423), Fr(-110615467, 29380423),
            Fr(69997945, 29380423))))

# Tsitouras, "Runge-Kutta pairs of order 5(4) satisfying only the first column
# simplifying assumption", Comput. Math. Appl. 62 (2011) 770-775: tableau, error weights
# (btilde) and the interpolant's polynomials b_i(theta) = sum_p r_ip theta^p, as
# OrdinaryDiffEq.jl (tsit_tableaus.jl, Tsit5ConstantCache / Tsit5Interp, high-precision
# values) and diffrax (_tsit5_tableau) print them. The 5th-order solution propagates:
# b = the last row of a (FSAL, b_7 = 0).
_TS_A7 = (_d("0.09646076681806522951816731316512876333711995"),
          Fr(1, 100),
          _d("0.4798896504144995747752495322905965199130404622"),
          _d("1.379008574103741893192274821856872770756462643"),
          _d("-3.290069515436080679901047585711363850115683291"),
          _d("2.324710524099773982415355918398765796109060233"))
TSIT5 = EmbeddedTableau(
    "tsit5",
    a=((),
       (Fr(161, 1000),),
       (_d("-0.008480655492356988544426874250230774675121177393"),
        _d("0.3354806554923569885444268742502307746751211774")),
       (_d("2.897153057105493432130432594192938764924887288"),
        _d("-6.359448489975074843148159912383825625952700647"),
        _d("4.362295432869581411017727318190886861027813360")),
       (_d("5.325864828439256604428877920840511317836476253"),
        _d("-11.74888356406282787774717033978577296188744178"),
        _d("7.495539342889836208304604784564358155658679162"),
        _d("-0.09249506636175524925650207933207191611349983406")),
       (_d("5.861455442946420028659251486982647890394337666"),
        _d("-12.92096931784710929170611868178335939541780752"),
        _d("8.159367898576158643180400794539253485181918321"),
        _d("-0.07158497328140099722453054252582973869127213147"),
        _d("-0.02826905039406838290900305721271224146717633627")),
       _TS_A7),
    b=_TS_A7 + (Fr(0),),
    c=(Fr(0), Fr(161, 1000), Fr(327, 1000), Fr(9, 10),
       _d("0.9800255409045096857298102862870245954942137980"), Fr(1), Fr(1)),
    err=(_d("-0.001780011052225771443378550607539534775944678804"),
         _d("-0.0008164344596567469032236360633546862401862537590"),
         _d("0.007880878010261996010314727672526304238628733777"),
         _d("-0.1447110071732629075371651479726351167209227123"),
         _d("0.5823571654525552250199376106520421794260781240"),
         _d("-0.4580821059291869466616365188325542974428047280"),
         Fr(1, 66)),
    q=4, fsal=True,
    dense=((_d("0.999999999999999974283372471559910888475488471328"),
            _d("-2.763706197274825911336735930481400260916070804192"),
            _d("2.91325546182191274375068099306808"), _d("-1.0530884977290216")),
           (Fr(0), _d("0.13169999999999999727"), _d("-0.22339999999999999818"),
            _d("0.1017")),
           (Fr(0), _d("3.93029623689475152850687446709813398"),
            _d("-5.94103387213150473470249202589458001"), _d("2.490627285651252793")),
           (Fr(0), _d("-12.411077166933676983734381540685453484102414134010752"),
            _d("30.3381886302823215981729903691836576"), _d("-16.54810288924490272")),
           (Fr(0), _d("37.50931341651103919496903965334519631242339792120440212"),
            _d("-88.1789048947664011014276693541209817"), _d("47.37952196281928122")),
           (Fr(0), _d("-27.896526289197287805948263144598643896"),
            _d("65.09189467479367152629021928716553658"), _d("-34.87065786149660974")),
           (Fr(0), Fr(3, 2), Fr(-4), Fr(5, 2))))

class _Methods(Mapping):
    """name -> EmbeddedTableau: a tableau given, or ``(module, name)`` of one imported
    when first looked up (then kept: the same object every time)."""

    def __init__(self, entries: dict):
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> EmbeddedTableau:
        got = self._entries[name]
        if isinstance(got, tuple):
            module, attr = got
            got = self._entries[name] = getattr(
                importlib.import_module(module, __package__), attr)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


ADAPTIVE: Mapping[str, EmbeddedTableau] = _Methods({
    "bs3": BS3, "dopri5": DOPRI5, "tsit5": TSIT5, "dop853": (".dop853", "DOP853"),
    "vern7": (".verner", "VERN7"), "vern9": (".verner", "VERN9")})
_LAZY = {"DOP853": "dop853", "VERN7": "vern7", "VERN9": "vern9"}


def __getattr__(name: str):         # embedded.DOP853 etc., as before
    if name in _LAZY:
        return ADAPTIVE[_LAZY[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dense_coefficients(tab: EmbeddedTableau) -> tuple[tuple[Fr, ...], ...]:
    """Per stage, the coefficients of theta^1, theta^2, ... of the continuous extension."""
    return tab.dense if tab.dense is not None else hermite(tab.b)
