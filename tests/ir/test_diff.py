"""ir/diff.py: symbolic derivatives against central finite differences, on random states,
for every float op and for generated expressions; simplification; the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from vgpu_compiler.errors import TypeError_
from vgpu_compiler.ir.diff import NotDifferentiable, derivative
from vgpu_compiler.ir.evaluate import Context, evaluate
from vgpu_compiler.ir.nodes import Apply, Const, Load, Sym
from vgpu_compiler.ir.ops import Op, SymKind, Type

F, I, B = Type.FLOAT, Type.INT, Type.BOOL
X = Sym(SymKind.STATE, "x", F)
Y = Sym(SymKind.STATE, "y", F)
P = Sym(SymKind.PARAM, "p", F)
T = Sym(SymKind.TIME, "t", F)


def c(v):
    return Const(float(v), F)


def ap(op, *args, t=F):
    return Apply(op, tuple(args), t)


class Values(Context):
    def __init__(self, x, y):
        self.v = {"x": x, "y": y, "p": np.full_like(x, 0.7), "t": np.full_like(x, 0.3)}

    def symbol(self, node):
        return self.v[node.name]

    def array(self, name):
        return np.linspace(-1, 1, 5)


def value(e, x, y):
    with np.errstate(all="ignore"):
        return np.broadcast_to(evaluate(e, Values(x, y), np.float64), x.shape)


def check(e, wrt=X, n=64, seed=0, lo=0.2, hi=1.4):
    """The symbolic derivative equals a central difference where both are finite."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(lo, hi, n), rng.uniform(lo, hi, n)
    h = 1e-6
    d = value(derivative(e, wrt), x, y)
    if wrt is X:
        fd = (value(e, x + h, y) - value(e, x - h, y)) / (2 * h)
    else:
        fd = (value(e, x, y + h) - value(e, x, y - h)) / (2 * h)
    ok = np.isfinite(d) & np.isfinite(fd) & (np.abs(fd) < 1e6)
    assert ok.sum() > n // 2, "too few finite samples"
    scale = 1 + np.abs(fd[ok])
    np.testing.assert_array_less(np.abs(d[ok] - fd[ok]) / scale, 1e-4)


UNARY = [Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH,
         Op.EXP, Op.LOG, Op.LOG2, Op.SQRT, Op.ABS, Op.NEG]


@pytest.mark.parametrize("op", UNARY, ids=lambda o: o.value)
def test_every_unary_function(op):
    inner = ap(Op.MUL, c(0.6), X)           # stays inside asin/acos's domain
    check(ap(op, inner))


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.ATAN2, Op.MIN,
                                Op.MAX], ids=lambda o: o.value)
def test_every_binary_op_in_both_operands(op):
    check(ap(op, X, ap(Op.ADD, Y, ap(Op.MUL, c(0.5), X))))
    check(ap(op, ap(Op.SIN, Y), X), wrt=X)
    check(ap(op, X, Y), wrt=Y)


def test_power_with_constant_exponent_stays_a_power():
    d = derivative(ap(Op.POW, X, c(3.0)), X)
    assert d == ap(Op.MUL, c(3.0), ap(Op.POW, X, c(2.0)))
    check(ap(Op.POW, X, c(3.0)), lo=-2, hi=2)
    check(ap(Op.POW, X, c(0.5)))


def test_where_clamp_and_piecewise():
    check(ap(Op.WHERE, ap(Op.GT, X, c(0.8), t=B), ap(Op.MUL, X, X), ap(Op.SIN, X)))
    check(ap(Op.CLAMP, ap(Op.MUL, c(2), X), c(0.9), c(2.0)))
    check(ap(Op.ABS, ap(Op.SUB, X, c(0.8))))


def test_constants_and_other_symbols_give_zero_and_simplify():
    assert derivative(ap(Op.ADD, P, ap(Op.MUL, T, Y)), X) == c(0.0)
    assert derivative(ap(Op.MUL, P, X), X) == P                 # p * 1: no factor 1 left
    assert derivative(ap(Op.ADD, X, c(2)), X) == c(1.0)
    assert derivative(ap(Op.MUL, c(2), ap(Op.MUL, c(3), X)), X) == c(6.0)   # folded
    load = Load("A", (ap(Op.TO_INT, X, t=I),), F)
    assert derivative(ap(Op.MUL, load, X), X) == load       # an index is not differentiated
    check(T and ap(Op.MUL, T, ap(Op.EXP, X)), wrt=X)


def test_with_respect_to_time():
    e = ap(Op.MUL, ap(Op.SIN, T), X)
    assert derivative(e, T) == ap(Op.MUL, ap(Op.COS, T), X)


@pytest.mark.parametrize("op", [Op.FLOOR, Op.CEIL, Op.SIGN])
def test_step_functions_are_refused_where_they_vary(op):
    with pytest.raises(NotDifferentiable) as e:
        derivative(ap(Op.MUL, ap(op, X), X), X)
    assert isinstance(e.value, TypeError_) and "step function" in e.value.message
    assert derivative(ap(Op.MUL, ap(op, P), X), X) == ap(op, P)     # constant in x: fine


def test_int_of_a_varying_value_is_refused_but_conditions_are_fine():
    with pytest.raises(NotDifferentiable):
        derivative(ap(Op.TO_FLOAT, ap(Op.TO_INT, X, t=I)), X)
    cond = ap(Op.GT, ap(Op.FLOOR, X), c(0), t=B)     # floor inside a condition: fine
    assert derivative(ap(Op.WHERE, cond, X, P), X) == ap(Op.WHERE, cond, c(1.0), c(0.0))


def test_coupled_values_are_refused():
    with pytest.raises(NotDifferentiable):
        derivative(ap(Op.MUL, Sym(SymKind.COUPLED, "s", F), X), X)


def _random_expr(rng, depth):
    if depth == 0 or rng.random() < 0.2:
        return [X, Y, P, T, c(round(rng.uniform(0.5, 2), 2))][rng.integers(5)]
    kind = rng.integers(4)
    if kind == 0:
        op = [Op.SIN, Op.COS, Op.EXP, Op.TANH, Op.ATAN, Op.NEG][rng.integers(6)]
        arg = _random_expr(rng, depth - 1)
        if op is Op.EXP:
            arg = ap(Op.TANH, arg)          # keep values moderate
        return ap(op, arg)
    if kind == 1:
        u = _random_expr(rng, depth - 1)            # sqrt(1 + u^2): always defined
        return ap(Op.SQRT, ap(Op.ADD, c(1.0), ap(Op.MUL, u, u)))
    op = [Op.ADD, Op.SUB, Op.MUL][rng.integers(3)]
    return ap(op, _random_expr(rng, depth - 1), _random_expr(rng, depth - 1))


@pytest.mark.parametrize("seed", range(40))
def test_generated_expressions_against_finite_differences(seed):
    rng = np.random.default_rng(seed)
    e = _random_expr(rng, 5)
    check(e, wrt=X, seed=seed)
    check(e, wrt=Y, seed=seed + 100)


def test_deep_expression_differentiates_without_recursion():
    e = X
    for k in range(5000):
        e = ap(Op.ADD, ap(Op.MUL, c(1.0001), e), ap(Op.SIN, X)) if k % 2 else ap(Op.MUL, e, c(0.9999))
    d = derivative(e, X)
    assert d is not None
