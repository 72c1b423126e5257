"""Stochastic fields in the front end: `noise`, the linearity rule, the split into drift and
coefficients, and every misuse the language lists (an error naming the noise, at it)."""
from __future__ import annotations

import numpy as np
import pytest

from vgpu_compiler.errors import DeclarationError, NameError_, TypeError_
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.ir.dump import dump
from vgpu_compiler.ir.nodes import Const, Sym
from vgpu_compiler.ir.ops import SymKind, Type


def field(body: str, method: str = "euler"):
    src = ("field f {\n  param a = 2.0\n  param b = 0.5\n  noise xi, eta\n  state x, y\n"
           + body + f"\n  solve {method}(dt = 0.01, steps = 10)\n}}")
    (f,) = compile_program(src).program.fields
    return f


def test_split_into_drift_and_coefficients():
    f = field("  dx/dt = -a * x + b * xi\n  dy/dt = x * y - (a + b) * eta + xi * y")
    xi, eta = f.noises
    assert (xi.name, xi.index, eta.name, eta.index) == ("xi", 0, "eta", 1)
    assert "a" in repr(f.derivs[0]) and "xi" not in repr(f.derivs) and "eta" not in repr(f.derivs)
    assert xi.diffusion[0] == Sym(SymKind.PARAM, "b", Type.FLOAT)
    assert xi.diffusion[1] == Sym(SymKind.STATE, "y", Type.FLOAT)
    assert eta.diffusion[0] is None
    assert "neg" in repr(eta.diffusion[1])          # -(a + b)
    assert xi.slope == () and eta.slope == ()        # euler takes no slope


def test_pure_noise_equation_has_zero_drift():
    f = field("  dx/dt = xi\n  dy/dt = -eta")
    assert f.derivs[0] == Const(0.0, Type.FLOAT) and f.derivs[1] == Const(0.0, Type.FLOAT)
    assert f.noises[0].diffusion[0] == Const(1.0, Type.FLOAT)
    assert f.noises[1].diffusion[1] == Const(-1.0, Type.FLOAT)


def test_milstein_slope_is_symbolic():
    f = field("  dx/dt = a * x + b * x * xi\n  dy/dt = sin(y) * eta", "milstein")
    assert f.noises[0].slope[0] == Sym(SymKind.PARAM, "b", Type.FLOAT)
    assert "cos" in repr(f.noises[1].slope[1])
    assert f.solver.method == "milstein" and f.solver.tableau.name == "euler"


def test_dump_shows_the_noise():
    text = dump(field("  dx/dt = -x + b * xi\n  dy/dt = eta"))
    assert "noise xi" in text and "dW" in text


# body, error class, (line, column) of the caret, words of the message
MISUSE = {
    "square": ("  dx/dt = xi * xi\n  dy/dt = 0", TypeError_, (6, 16), "noise `xi` multiplies"),
    "sin": ("  dx/dt = sin(xi)\n  dy/dt = 0", TypeError_, (6, 15), "inside `sin(...)`"),
    "division": ("  dx/dt = xi / x\n  dy/dt = 0", TypeError_, (6, 11), "in a division"),
    "power": ("  dx/dt = xi ^ 2\n  dy/dt = 0", TypeError_, (6, 11), "in a power"),
    "condition": ("  dx/dt = where(xi > 0, 1, 0)\n  dy/dt = 0", TypeError_, (6, 17),
                  "inside `where(...)`"),
    "let": ("  let r = a * xi\n  dx/dt = r\n  dy/dt = 0", NameError_, (6, 15),
            "noise `xi` used in let `r`"),
    "two noises": ("  dx/dt = x + xi * (1 + eta)\n  dy/dt = 0", TypeError_, (6, 25),
                   "noise `eta` multiplies noise `xi`"),
    "start value": ("  state z = xi\n  dx/dt = 0\n  dy/dt = 0\n  dz/dt = 0", NameError_, (6, 13),
                    "the start value of `z`"),
    "coupled": ("  basin l < 4\n  coupled c = xi\n  dx/dt = 0\n  dy/dt = 0", NameError_,
                (7, 15), "coupled expression"),
    "collapse": ("  basin l < 4\n  collapse when xi > 0\n  dx/dt = 0\n  dy/dt = 0", NameError_,
                 (7, 17), "collapse condition"),
    "flux": ("  output H[2]\n  flux H[0] += xi\n  dx/dt = 0\n  dy/dt = 0", NameError_, (7, 16),
             "flux statement"),
    "param default": ("  param c = xi\n  dx/dt = 0\n  dy/dt = 0", NameError_, (6, 13),
                      "param default"),
}


@pytest.mark.parametrize("name", sorted(MISUSE))
def test_misuse_names_the_noise_at_it(name):
    body, cls, (line, col), words = MISUSE[name]
    with pytest.raises(cls) as e:
        field(body)
    assert words in e.value.message and "noise `" in e.value.message
    assert (e.value.line, e.value.column) == (line, col)
    assert "^" in str(e.value)


def test_other_methods_refuse_noise():
    with pytest.raises(DeclarationError) as e:
        field("  dx/dt = xi\n  dy/dt = 0", "rk4")
    assert "`rk4` cannot integrate" in e.value.message and "milstein" in e.value.message
    assert (e.value.line, e.value.column) == (8, 9)


@pytest.mark.parametrize("body, words, line", [
    ("  dx/dt = xi\n  dy/dt = xi", "noise `xi` drives `dx/dt` and `dy/dt`", 7),
    ("  dx/dt = xi + eta\n  dy/dt = 0", "has two noises", 6),
    ("  dx/dt = y * xi\n  dy/dt = 0", "reads state `y`", 6),
    ("  dx/dt = floor(x) * xi\n  dy/dt = 0", "step function", 6),
])
def test_milstein_needs_diagonal_differentiable_noise(body, words, line):
    with pytest.raises((DeclarationError, TypeError_)) as e:
        field(body, "milstein")
    assert words in e.value.message and e.value.line == line


def test_noise_is_a_keyword_and_a_name_of_its_own():
    with pytest.raises(NameError_) as e:
        field("  param xi\n  dx/dt = 0\n  dy/dt = 0")
    assert "already declared as a noise" in e.value.message


def test_unknown_method_error_wins_and_lists_milstein():
    with pytest.raises(NameError_) as e:
        field("  dx/dt = xi\n  dy/dt = 0", "foo")
    assert "milstein" in e.value.message


def _eval(expr, x, y):
    from vgpu_compiler.ir.evaluate import Context, evaluate

    class Values(Context):
        def symbol(self, node):
            return {"x": x, "y": y, "a": np.float64(2.0), "b": np.float64(0.5),
                    "t": np.float64(0.25)}[node.name]

    return np.broadcast_to(evaluate(expr, Values(), np.float64), x.shape)


def _rand_text(rng, depth=3):
    if depth == 0 or rng.random() < 0.3:
        return ["x", "y", "a", "b", "t", "1.5", "2"][rng.integers(7)]
    op = rng.integers(5)
    l, r = _rand_text(rng, depth - 1), _rand_text(rng, depth - 1)
    return [f"({l} + {r})", f"({l} - {r})", f"({l} * {r})", f"sin({l})",
            f"({l}) / (2 + {r} * {r})"][op]


SHAPES = ["{F} + {G} * xi", "{G} * xi + {F}", "{F} - xi * {G}", "-({G} * xi) + {F}",
          "({F} + xi * {G}) * 3", "{F} + 0.5 * ({G} * xi - {F})", "{G} * (xi + {F})"]
# the drift and coefficient each shape means, as (F, G) texts over {F}, {G}
MEANING = [("{F}", "{G}"), ("{F}", "{G}"), ("{F}", "-({G})"), ("{F}", "-({G})"),
           ("({F}) * 3", "({G}) * 3"), ("{F} - 0.5 * ({F})", "0.5 * ({G})"),
           ("({G}) * ({F})", "{G}")]


@pytest.mark.parametrize("seed", range(30))
def test_split_of_generated_linear_derivatives(seed):
    """The split's drift and coefficient equal what the text means, at random states."""
    rng = np.random.default_rng(seed)
    F, G = _rand_text(rng), _rand_text(rng)
    k = seed % len(SHAPES)
    F, G = f"({F})", f"({G})"
    f = field("  dx/dt = " + SHAPES[k].format(F=F, G=G) + "\n  dy/dt = eta * y")
    want_f, want_g = (m.format(F=F, G=G) for m in MEANING[k])
    ref = field(f"  dx/dt = {want_f}\n  dy/dt = {want_g}")       # (no noise used)
    x, y = rng.uniform(-2, 2, 50), rng.uniform(-2, 2, 50)
    np.testing.assert_allclose(_eval(f.derivs[0], x, y), _eval(ref.derivs[0], x, y),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_eval(f.noises[0].diffusion[0], x, y),
                               _eval(ref.derivs[1], x, y), rtol=1e-12, atol=1e-12)
    assert f.noises[1].diffusion == (None, Sym(SymKind.STATE, "y", Type.FLOAT))
