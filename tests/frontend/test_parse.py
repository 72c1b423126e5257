"""Stage 1-2: text -> lark tree -> AST (grammar/field.lark, frontend/parse.py, frontend/ast.py)."""
from __future__ import annotations

import pytest

from vgpu_compiler.errors import Span, SyntaxError_
from vgpu_compiler.frontend import ast as A
from vgpu_compiler.frontend.ast import build
from vgpu_compiler.frontend.parse import parse
from vgpu_compiler.ir.ops import Op
from vgpu_compiler.resources import grammar_path, templates_dir


def program(src: str) -> A.ProgramAST:
    return build(parse(src))


def body(src: str) -> tuple:
    return program("field f {\n" + src + "\n}").fields[0].body


def sx(e: A.Expr) -> str:
    """An s-expression of an AST expression, to pin structure."""
    if isinstance(e, A.Num):
        return repr(e.value)
    if isinstance(e, A.Name):
        return e.name
    if isinstance(e, A.Unary):
        return f"({e.op.value} {sx(e.operand)})"
    if isinstance(e, A.Binary):
        return f"({e.op.value} {sx(e.left)} {sx(e.right)})"
    if isinstance(e, A.Call):
        return f"({e.func.name} {' '.join(sx(a) for a in e.args)})"
    return f"([] {e.target.name} {' '.join(sx(a) for a in e.indices)})"


def expr(text: str) -> str:
    (let,) = body(f"let r = {text}")
    return sx(let.expr)


def test_resources_point_at_the_checkout():
    assert (grammar_path() / "field.lark").is_file()
    assert templates_dir().name == "templates"


@pytest.mark.parametrize("text, tree", [
    ("a + b * c", "(+ a (* b c))"),
    ("a * b + c", "(+ (* a b) c)"),
    ("a - b - c", "(- (- a b) c)"),
    ("a / b / c", "(/ (/ a b) c)"),
    ("a // b % c * d", "(* (% (// a b) c) d)"),
    ("2 ^ 3 ^ 2", "(^ 2 (^ 3 2))"),
    ("2^-1", "(^ 2 (neg 1))"),
    ("-a ^ 2", "(neg (^ a 2))"),
    ("- -a", "(neg (neg a))"),
    ("-a * b", "(* (neg a) b)"),
    ("a < b + 1", "(< a (+ b 1))"),
    ("not a < b and c >= d or e == f", "(or (and (not (< a b)) (>= c d)) (== e f))"),
    ("a != b or not not c > d", "(or (!= a b) (not (not (> c d))))"),
    ("a or b and c", "(or a (and b c))"),
    ("a <= b", "(<= a b)"),
    ("(a + b) * c", "(* (+ a b) c)"),
    ("A[i, j + 1] * sin(x)", "(* ([] A i (+ j 1)) (sin x))"),
    ("where(x > 0, 1, -1)", "(where (> x 0) 1 (neg 1))"),
    ("atan2(y, x) ^ 2", "(^ (atan2 y x) 2)"),
    ("f()", "(f )"),
    ("2 ** 3 ** 2", "(^ 2 (^ 3 2))"),
    ("2**-1", "(^ 2 (neg 1))"),
    ("-a ** 2", "(neg (^ a 2))"),
    ("a * b ** 2", "(* a (^ b 2))"),
    ("2 ** 3 ^ 2", "(^ 2 (^ 3 2))"),
    ("x**2*y", "(* (^ x 2) y)"),
])
def test_precedence_and_associativity(text, tree):
    assert expr(text) == tree


@pytest.mark.parametrize("text, value, is_int", [
    ("3", 3, True), ("3.0", 3.0, False), (".5", 0.5, False), ("1e-3", 1e-3, False),
    ("2.5E+3", 2500.0, False), ("10", 10, True), ("7.", 7.0, False), ("1E2", 100.0, False),
])
def test_numbers(text, value, is_int):
    (let,) = body(f"let r = {text}")
    assert let.expr == A.Num(value, is_int, let.expr.span)
    assert type(let.expr.value) is (int if is_int else float)


def test_statements_end_at_newline_semicolon_or_brace():
    stmts = body("param a = 1; param b\nstate x; dx/dt = a")
    assert [type(s).__name__ for s in stmts] == ["ParamDecl", "ParamDecl", "StateDecl", "Deriv"]
    (f,) = program("field g { state x; dx/dt = 1 }").fields
    assert len(f.body) == 2


def test_newlines_ignored_inside_brackets_and_before_brace():
    src = "field f\n\n{\n  let r = (1 +\n   2) * A[\n i,\n j]\n  dx/dt = where(x > 0,\n 1,\n 2)\n}"
    (f,) = program(src).fields
    assert sx(f.body[0].expr) == "(* (+ 1 2) ([] A i j))"
    assert f.body[1].state.name == "x"


def test_comments_and_blank_lines():
    src = "# head\n\nfield f { # one\n  # two\n\n  state x  # three\n}\n# tail\n"
    (f,) = program(src).fields
    assert len(f.body) == 1


def test_several_fields():
    p = program("field a { state x }\n\nfield b { state y }; field c { }")
    assert [f.name.name for f in p.fields] == ["a", "b", "c"]
    assert program("").fields == () and program("\n# only\n").fields == ()


def test_derivative_forms():
    d1, d2, d3 = body("dx/dt = 1\nd x / dt = 2\ndtheta / dt = 3")
    assert (d1.state.name, d2.state.name, d3.state.name) == ("x", "x", "theta")
    assert d1.state.span == Span(2, 2, 2, 3)     # the `x` in `dx`
    assert d2.state.span == Span(3, 3, 3, 4)


def test_declarations():
    stmts = body("""param p
param q = 2 * p
input A[M, 3], B[3]
output H[64, K]
state x, y = 0, z
grid i < M, j < 4
basin l < 8, m < 8
coupled s = x edge wrap, c = y
collapse when x < 0
flux H[i, 0] += x
solve rk4(dt = 0.1, steps = K, t0 = 1)""")
    p, q, inp, out, st, grid, basin, coupled, collapse, flux, solve = stmts
    assert p.default is None and sx(q.default) == "(* 2 p)"
    assert [a.name.name for a in inp.arrays] == ["A", "B"] and inp.kind == "input"
    assert [type(d).__name__ for d in inp.arrays[0].dims] == ["Name", "Num"]
    assert out.kind == "output" and out.arrays[0].dims[1].name == "K"
    assert [(s.name.name, s.init is None) for s in st.items] == [
        ("x", True), ("y", False), ("z", True)]
    assert grid.kind == "grid" and [a.index.name for a in grid.axes] == ["i", "j"]
    assert basin.kind == "basin" and basin.axes[1].extent.value == 8
    assert coupled.items[0].edge.name == "wrap" and coupled.items[1].edge is None
    assert sx(collapse.cond) == "(< x 0)"
    assert flux.target.name == "H" and [sx(e) for e in flux.indices] == ["i", "0"]
    assert sx(flux.value) == "x"
    assert solve.method.name == "rk4"
    assert [(a.name.name, sx(a.value)) for a in solve.args] == [
        ("dt", "0.1"), ("steps", "K"), ("t0", "1")]


def test_glsl_words_are_ordinary_names():
    (let,) = body("let main = void + uniform * gl_Position - float_ + layout")
    assert let.name.name == "main"


def test_keywords_are_not_names():
    for word in ["field", "param", "state", "when", "edge", "and", "not", "solve", "grid"]:
        with pytest.raises(SyntaxError_):
            parse(f"field f {{ let {word} = 1 }}")


def test_a_byte_order_mark_at_the_start_is_skipped():
    src = "field f {\n  state x\n  dx/dt = -x\n}"
    assert program("\ufeff" + src) == program(src)     # spans too: columns as shown


@pytest.mark.parametrize("digit", ["\uff11\uff10", "\u0663", "\u0967", "\u00b2", "\U0001d7d9"])
def test_numbers_are_ascii_digits_only(digit):
    with pytest.raises(SyntaxError_) as info:
        parse(f"field f {{ let r = {digit} }}")
    assert (info.value.line, info.value.column) == (1, 19)
    assert "ASCII digits" in info.value.message or "unexpected character" in info.value.message


@pytest.mark.parametrize("name", ["\u00e9t\u00e9", "x\u00e9", "\u03b1", "x\u0663", "_\u0131"])
def test_names_are_ascii_only(name):
    """Identifiers are exactly [A-Za-z_][A-Za-z0-9_]* (Python's \\w would take more)."""
    with pytest.raises(SyntaxError_) as info:
        parse(f"field f {{ let {name} = 1 }}")
    bad = next(k for k, c in enumerate(name) if not c.isascii())
    assert (info.value.line, info.value.column) == (1, 15 + bad)


def test_spans_are_one_based_and_cover_the_node():
    (let,) = body("let r = a +  bb")
    assert let.span == Span(2, 1, 2, 16)
    assert let.expr.span == Span(2, 9, 2, 16)
    assert let.expr.right.span == Span(2, 14, 2, 16)


@pytest.mark.parametrize("src, line, column, words", [
    ("field f { let a = 1 < 2 < 3 }", 1, 25, "chained comparison"),
    ("field f { let a = (1 ==\n 2 != 3) }", 2, 4, "chained comparison"),
    ("field f { let a = }", 1, 19, "expected an expression"),
    ("field f { let a = 2 ^ * 3 }", 1, 23, "expected an expression"),
    ("field f { let a = 1 $ }", 1, 21, "unexpected character `$`"),
    ("field f { state x", 1, 18, "end of the text"),
    ("field f { let a = (1 + 2 }", 1, 26, "`)`"),
    ("field f { let a = 1 let b = 2 }", 1, 21, "end of the statement"),
    ("field { }", 1, 7, "expected a name"),
    ("state x", 1, 1, "expected `field NAME { ... }`"),
    ("field f { solve rk4(dt = 1 steps = 2) }", 1, 28, "unexpected `steps`"),
    ("field f { dx/dy = 1 }", 1, 14, "dx/dt"),
    ("field f { e x/dt = 1 }", 1, 13, "dx/dt"),
    ("field f { let state = 1 }", 1, 15, "unexpected `state`"),
    ("field f { 3x = 1 }", 1, 11, "unexpected `3`"),
    ("field f { let a = 2 *** 3 }", 1, 23, "expected an expression"),
    ("field f { let a = 1\uff10 }", 1, 20, "ASCII digits 0-9"),
    ("field f { let \u00e9 = 1 }", 1, 15, "names are ASCII letters"),
])
def test_syntax_errors(src, line, column, words):
    from vgpu_compiler.frontend.compile import compile_program
    with pytest.raises(SyntaxError_) as info:
        compile_program(src, "bad.field")
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert words in err.message
    text = str(err)
    assert text.startswith(f"bad.field:{line}:{column}: error:")
    assert "\n    " + src.splitlines()[line - 1] + "\n" in text
    assert "\n    " + " " * (column - 1) + "^" in text
