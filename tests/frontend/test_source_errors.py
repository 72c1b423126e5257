"""Every kind of mistake in program text: its class, line, column and the caret display."""
from __future__ import annotations

import pytest

from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import (DeclarationError, NameError_, SourceError, SyntaxError_,
                                  TypeError_, VgpuError)

BASE = "field f {\n  state x\n  dx/dt = -x\n  solve euler(dt = 0.1, steps = 10)\n%s\n}"

# name: (extra lines from line 5 on, error class, line, column, words in the message)
CASES = {
    "unknown name": ("  let r = foo + 1", NameError_, 5, 11, "unknown name `foo`"),
    "suggestion": ("  let r = xx", NameError_, 5, 11, "did you mean `x`"),
    "duplicate": ("  param x", NameError_, 5, 9, "already declared as a state"),
    "dim vs param": ("  param N\n  input A[N]", NameError_, 6, 11, "already declared"),
    "builtin declared": ("  param t", NameError_, 5, 9, "built-in name"),
    "function declared": ("  let sin = 1", NameError_, 5, 7, "function name"),
    "init declared": ("  state init", NameError_, 5, 9, "function name"),
    "function as value": ("  let r = exp + 1", NameError_, 5, 11, "`exp` is a function"),
    "second equation": ("  dx/dt = 1", DeclarationError, 5, 3, "second equation for `x`"),
    "equation of non-state": ("  dq/dt = 1", NameError_, 5, 4, "`q` is not declared"),
    "equation of a param": ("  param p\n  dp/dt = 1", NameError_, 6, 4, "is a param"),
    "bool as number": ("  let r = (x > 1) + 1", TypeError_, 5, 12, "not a number"),
    "bool derivative": ("  state y\n  dy/dt = y > 0", TypeError_, 6, 11, "not a number"),
    "number as condition": ("  basin l < 4\n  collapse when x + 1", TypeError_, 6, 17,
                            "expected a condition"),
    "not of number": ("  let r = where(not x, 1, 2)", TypeError_, 5, 21, "expected a condition"),
    "and of number": ("  let r = where(x and x > 0, 1, 2)", TypeError_, 5, 17,
                      "expected a condition"),
    "bool == bool": ("  let r = where((x > 0) == (x < 1), 1, 2)", TypeError_, 5, 18,
                     "not a number"),
    "where bool branch": ("  let r = where(x > 0, x > 1, 0)", TypeError_, 5, 24, "not a number"),
    "float index": ("  input A[N]\n  let r = A[x]", TypeError_, 6, 13, "must be an int"),
    "rank": ("  input A[N, M]\n  let r = A[1]", TypeError_, 6, 11, "takes 2 indices, not 1"),
    "bare input": ("  input A[N]\n  let r = A + 1", TypeError_, 6, 11, "`A[e1]`"),
    "output read": ("  output H[3]\n  let r = H[0]", NameError_, 6, 11,
                    "written only by `flux`"),
    "output bare": ("  output H[3]\n  let r = H", NameError_, 6, 11, "written only"),
    "index a state": ("  let r = x[0]", TypeError_, 5, 11, "only inputs and coupled"),
    "call a state": ("  let r = x(0)", TypeError_, 5, 11, "not a function"),
    "int literal too big": ("  let r = 2147483648", TypeError_, 5, 11, "32 bits"),
    "negative too big": ("  let r = -2147483649", TypeError_, 5, 11, "32 bits"),
    "unknown function": ("  let r = sinn(x)", NameError_, 5, 11, "did you mean `sin`"),
    "arity": ("  let r = atan2(x)", TypeError_, 5, 11, "takes 2 arguments, not 1"),
    "where arity": ("  let r = where(x > 0, 1)", TypeError_, 5, 11, "takes 3 arguments"),
    "second solve": ("  solve rk4(dt = 1, steps = 1)", DeclarationError, 5, 3,
                     "second `solve`"),
    "second collapse": ("  basin l < 4\n  collapse when x > 0\n  collapse when x < 0",
                        DeclarationError, 7, 3, "at most one"),
    "second grid": ("  grid i < N\n  grid j < M", DeclarationError, 6, 3, "second `grid`"),
    "param default uses a state": ("  param p = x", NameError_, 5, 13, "param default"),
    "param default uses t": ("  param p = t", NameError_, 5, 13, "the time `t`"),
    "param cycle": ("  param p = q\n  param q = 2 * p", NameError_, 5, 3, "p -> q -> p"),
    "param self": ("  param p = p + 1", NameError_, 5, 3, "p -> p"),
    "coupled without basin": ("  coupled s = x", DeclarationError, 5, 11, "needs a `basin`"),
    "collapse without basin": ("  collapse when x > 0", DeclarationError, 5, 3,
                               "needs a `basin`"),
    "coupled uses coupled": ("  basin l < 4\n  coupled s = x, c = s + 1", NameError_, 6, 22,
                             "coupled expression may not use `s`"),
    "coupled uses a let that uses coupled": (
        "  basin l < 4\n  let r = sum(s)\n  coupled s = x, c = r", NameError_, 7, 22,
        "`r`, which uses `s`"),
    "coupled index count": ("  basin l < 4\n  coupled s = x\n  let r = s[1, 2]", TypeError_,
                            7, 11, "takes 1 index, not 2"),
    "reduce a state": ("  let r = sum(x)", TypeError_, 5, 11, "coupled name"),
    "one-argument min of a state": ("  let r = min(x)", TypeError_, 5, 11, "two-argument"),
    "init of a number": ("  let r = init(3)", TypeError_, 5, 11, "name of a state"),
    "flux into input": ("  input A[3]\n  flux A[0] += 1", TypeError_, 6, 8, "is an input"),
    "flux rank": ("  output H[3]\n  flux H[0, 1] += 1", TypeError_, 6, 3, "takes 1 index"),
    "flux unknown": ("  flux Q[0] += 1", NameError_, 5, 8, "`Q` is not declared"),
    "flux float index": ("  output H[3]\n  flux H[x] += 1", TypeError_, 6, 10, "must be an int"),
    "grid rank 4": ("  grid i < A, j < B, k < C, m < D", DeclarationError, 5, 3, "1 to 3"),
    "grid size 0": ("  grid i < 0", DeclarationError, 5, 12, "from 1"),
    "basin rank": ("  grid i < A\n  basin l < 4, m < 4", DeclarationError, 6, 3,
                   "at most the grid's rank"),
    "basin too big": ("  basin l < 512",
                      DeclarationError, 5, 3, "at most 256"),
    "basin size name": ("  basin l < K", DeclarationError, 5, 13, "int literals"),
    "let cycle": ("  let a = b + 1\n  let b = a", NameError_, 5, 7, "a -> b -> a"),
    "start uses later state": ("  state y = z, z", NameError_, 5, 13, "declared at or after"),
    "start uses itself": ("  state y = y + 1", NameError_, 5, 13, "declared at or after"),
    "start uses dt": ("  state y = dt", NameError_, 5, 13, "step size `dt`"),
    "start uses a coupled": ("  basin l < 2\n  coupled s = x\n  state y = s", NameError_, 7, 13,
                             "coupled name"),
    "start uses init": ("  state y = init(x)", NameError_, 5, 13, "`init(...)`"),
    "unknown edge": ("  basin l < 4\n  coupled s = x edge wobble", NameError_, 6, 22,
                     "unknown edge rule"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_source_error(name):
    extra, cls, line, column, words = CASES[name]
    src = BASE % extra
    with pytest.raises(cls) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, line, column, words)


def _assert_reported(err: VgpuError, src: str, line: int, column: int, words: str) -> None:
    assert isinstance(err, SourceError)
    assert (err.line, err.column) == (line, column), err.message
    assert words in err.message
    text = str(err)
    assert text.startswith(f"bad.field:{line}:{column}: error: ")
    source_line = src.splitlines()[line - 1]
    caret_line = " " * (column - 1) + "^"
    assert f"\n    {source_line}\n    {caret_line}" in text


@pytest.mark.parametrize("solve, cls, column, words", [
    ("solve rk5(dt = 1, steps = 1)", NameError_, 9, "unknown method `rk5`"),
    ("solve rk4(dt = 1, steps = 1, h = 2)", NameError_, 32, "unknown argument `h`"),
    ("solve rk4(dt = 1, dt = 2, steps = 1)", DeclarationError, 21, "given twice"),
    ("solve rk4(dt = 1)", DeclarationError, 3, "needs `steps = ...`"),
    ("solve rk4(steps = 1)", DeclarationError, 3, "needs `dt = ...`"),
    ("solve rk4(dt = 1, steps = 2.5)", TypeError_, 29, "`steps` must be an int"),
    ("solve rk4(dt = 1, steps = 10 / 2)", TypeError_, 29, "`steps` must be an int"),
    ("solve rk4(dt = x, steps = 1)", NameError_, 18, "solve argument may not use `x`"),
    ("solve rk4(dt = 1, steps = 1, t0 = t)", NameError_, 37, "the time `t`"),
    ("solve rk4(dt = 1, steps = step)", NameError_, 29, "step number"),
])
def test_solve_errors(solve, cls, column, words):
    src = "field f {\n  state x\n  dx/dt = -x\n  " + solve + "\n}"
    with pytest.raises(cls) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, 4, column, words)


@pytest.mark.parametrize("src, cls, line, column, words", [
    ("field f {\n  state x\n  dx/dt = 1\n}", DeclarationError, 1, 7, "no `solve`"),
    ("field f {\n  solve euler(dt = 1, steps = 1)\n}", DeclarationError, 1, 7, "no state"),
    ("field f {\n  state x, y\n  dx/dt = 1\n  solve euler(dt = 1, steps = 1)\n}",
     DeclarationError, 2, 12, "`y` has no equation"),
    ("field f { state x; dx/dt = 1; solve euler(dt = 1, steps = 1) }\n"
     "field f { state x; dx/dt = 1; solve euler(dt = 1, steps = 1) }",
     NameError_, 2, 7, "second field named `f`"),
    ("# nothing here\n", DeclarationError, 1, 1, "no field"),
    ("field f { state x; dx/dt = 1 <", SyntaxError_, 1, 31, "end of the text"),
])
def test_field_level_errors(src, cls, line, column, words):
    with pytest.raises(cls) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, line, column, words)


def test_every_source_error_is_a_vgpu_error_with_a_position():
    """Random junk never lets a Python or lark exception escape."""
    junk = ["field", "field f {", "}", "field f { dx/dt }", "field f { d/dt = 1 }",
            "field f { state x = }", "field f { flux [0] += 1 }", "\x00", "field f {\t\r\n}",
            "field f { let r = 1e }", "field f { let r = 08 }", "field f { let r = a.b }",
            "field f { let r = 'a' }", "field f { let r = a[] }", "field f { let r = () }",
            "field f { solve rk4() }", "field f { state x,, y }", "field f { grid }",
            "field f { basin l < 1.5 }", "field f { input A[] }", "field f { output H[-1] }",
            "field f { coupled }", "field f { collapse x }", "field f { let r = f(,) }",
            "field f { state x; dx/dt = 1; solve euler(dt = 1, steps = 1) } }",
            "field f { d x y / dt = 1 }", "field f { let r = 1 +\n }"]
    for src in junk:
        with pytest.raises(VgpuError) as info:
            compile_program(src)
        assert info.value.line is not None and info.value.column is not None, src


def test_deep_nesting_compiles():
    # issue 19 item 6: once refused at 1:1 (the compiler recursed); no stage recurses now
    # (tests/frontend/test_deep_programs.py runs such programs on both backends)
    src = "field f { state x; dx/dt = " + "+".join(["x"] * 3000) + "; solve euler(dt=1, steps=1) }"
    deriv = compile_program(src).select().derivs[0]
    terms = 1
    while getattr(deriv, "args", ()):
        assert deriv.args[1].name == "x"
        deriv, terms = deriv.args[0], terms + 1
    assert terms == 3000


TOKENS = ["field", "f", "{", "}", "(", ")", "[", "]", "state", "x", "dx", "/", "dt", "=",
          "+", "-", "*", "^", "<", "and", "not", "1", "2.5", ",", ";", "\n", "param",
          "solve", "rk4", "steps", "sum", "coupled", "basin", "l", "edge", "wrap", "#", "A",
          "input", "flux", "+=", "let", "where", "init", "grid", "i", "N", "collapse", "when",
          "**", "if", "then", "else", "'", "x'", "\t", "\ufeff"]


def test_random_token_soup_only_raises_vgpu_errors():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(TOKENS), max_size=40))
    def run(tokens):
        src = "field f { state x\n" + " ".join(tokens) + "\n}"
        try:
            compile_program(src)
        except VgpuError as err:
            assert err.line is not None and err.column is not None

    run()


# --- habits from other languages get a hint --------------------------------------------
@pytest.mark.parametrize("line, column, width", [
    ("  dx/dt = if x > 0 then 1 else 2", 11, 2),
    ("  dx/dt = if (x > 0) then 1 else 2", 11, 2),
    ("  dx/dt = 1 if x > 0 else 2", 13, 2),
    ("  dx/dt = where(x > 0, 1, 2) + if x < 0 then 1 else 0", 32, 2),
    ("  if x > 0 then dx/dt = 1", 3, 2),
    ("  let r = (x > 0) then 1 else 2", 19, 4),
])
def test_if_then_else_hints_at_where(line, column, width):
    src = "field f {\n  state x\n" + line + "\n  solve euler(dt = 0.1, steps = 10)\n}"
    with pytest.raises(SyntaxError_) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, 3, column, "write `where(cond, a, b)`")
    assert info.value.span.end_column == column + width


def test_if_as_an_ordinary_name_gets_no_hint():
    src = "field f {\n  state x\n  let iff = 1 + )\n  dx/dt = x\n  solve euler(dt = 1, steps = 1)\n}"
    with pytest.raises(SyntaxError_) as info:
        compile_program(src, "bad.field")
    assert "where" not in info.value.message


@pytest.mark.parametrize("line, column, name", [
    ("  x' = -x", 3, "x"), ("  speed' = -x", 3, "speed"), ("  dx/dt = -x'", 12, "x"),
])
def test_prime_derivative_hints_at_dx_dt(line, column, name):
    src = "field f {\n  state x\n" + line + "\n  solve euler(dt = 0.1, steps = 10)\n}"
    with pytest.raises(SyntaxError_) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, 3, column, f"write `d{name}/dt = ...`")
    assert str(info.value).endswith("^" + "~" * len(name))


def test_a_quote_after_no_name_is_an_unexpected_character():
    src = "field f {\n  state x\n  dx/dt = 'a'\n  solve euler(dt = 0.1, steps = 10)\n}"
    with pytest.raises(SyntaxError_) as info:
        compile_program(src, "bad.field")
    _assert_reported(info.value, src, 3, 11, "unexpected character `'`")


# --- the caret under tabs and after a byte-order mark -----------------------------------
def test_caret_keeps_the_tabs_of_the_line():
    src = "field f {\n\tstate x\n\tdx/dt =\t-\tsigmaa\n\tsolve euler(dt = 1, steps = 1)\n}"
    with pytest.raises(NameError_) as info:
        compile_program(src, "bad.field")
    err = info.value
    assert (err.line, err.column) == (3, 12)
    shown, caret = str(err).splitlines()[1:3]
    assert shown == "    \tdx/dt =\t-\tsigmaa"
    assert caret == "    \t       \t \t^~~~~~"
    # whatever the tab width, the caret starts under the name
    for width in (2, 4, 8):
        assert shown.expandtabs(width).index("sigmaa") == caret.expandtabs(width).index("^")


def test_a_byte_order_mark_is_accepted_and_not_counted():
    src = "\ufefffield f { state x; dx/dt = sigmaa; solve euler(dt = 1, steps = 1) }"
    with pytest.raises(NameError_) as info:
        compile_program(src, "bad.field")
    err = info.value
    column = src[1:].index("sigmaa") + 1            # counted without the mark
    assert (err.line, err.column) == (1, column)
    assert str(err).splitlines()[1:] == ["    " + src[1:], "    " + " " * (column - 1) + "^~~~~~"]
    compile_program("\ufeff" + "field f { state x; dx/dt = -x; solve euler(dt = 1, steps = 1) }")
