"""Stage 1: program text -> lark parse tree (grammar/field.lark, LALR, positions).

Every failure becomes a :class:`SyntaxError_` with a line, a column and a
message that says what was expected; no lark exception escapes. Messages are
built from the tokens the parser would accept there (lark's ``accepts``, which
replays the parse, so LALR's merged look-aheads do not add spurious ones):
a set that can start an expression reads "expected an expression", a
comparison where none can follow is a chained comparison, and so on.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterator
import re

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import Span, SyntaxError_
from ..resources import grammar_path

_OPEN = {"LPAR", "LSQB"}
_CLOSE = {"RPAR", "RSQB"}


class BracketPostlex:
    """Drop newline tokens inside ( ) and [ ]: there they are plain white space."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        depth = 0
        for tok in stream:
            if tok.type in _OPEN:
                depth += 1
            elif tok.type in _CLOSE:
                depth = max(0, depth - 1)
            elif tok.type == "_NL" and depth:
                continue
            yield tok


OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True,
               maybe_placeholders=False)


@lru_cache(maxsize=1)
def parser() -> Lark:
    """The LALR parser, made once per process: its tables those shipped beside the
    grammar, or from the disk cache (parser_cache.py), or built from the grammar."""
    from . import parser_cache
    path = grammar_path() / "field.lark"
    text = path.read_text(encoding="utf-8")
    return parser_cache.load_or_build(text, OPTIONS, BracketPostlex(), lambda: build(text),
                                      ships=SHIPS)


SHIPS = grammar_path()      # where the shipped tables are (None: not looked at)


def build(text: str) -> Lark:
    """The LALR parser, built from the grammar's text."""
    return Lark(text, postlex=BracketPostlex(), **OPTIONS)


def ship_tables():
    """Write the parser's tables shipped beside the grammar (after a change to it:
    ``python -m vgpu_compiler.frontend.parse``); their path."""
    from . import parser_cache
    text = (grammar_path() / "field.lark").read_text(encoding="utf-8")
    return parser_cache.ship(text, OPTIONS, lambda: build(text), grammar_path())


BOM = "\ufeff"


def parse(src: str) -> Tree:
    """Parse program text into a lark tree, or raise SyntaxError_."""
    src = src[1:] if src.startswith(BOM) else src
    try:
        return parser().parse(src)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, src) from None


# --- error messages ---------------------------------------------------------
CHAINED = ("chained comparison `a < b < c` is not allowed; "
           "write `a < b and b < c`")

_COMPARE_TEXT = ("<", "<=", ">", ">=", "==", "!=")
_OPERATOR_TEXT = _COMPARE_TEXT + ("+", "-", "*", "/", "//", "%", "^", "**", "and", "or")
_STATEMENT_TEXT = ("param", "input", "output", "state", "let", "grid", "basin", "coupled",
                   "collapse", "flux", "solve", "when", "stop", "observe")
_END = {"_NL", "SEMICOLON"}


@lru_cache(maxsize=1)
def _terminal_names() -> dict[str, str]:
    """Literal text -> lark terminal name (lark names `<=` and friends itself)."""
    return {t.pattern.value: t.name for t in parser().terminals if t.pattern.type == "str"}


def _names(texts) -> set[str]:
    table = _terminal_names()
    return {table[text] for text in texts if text in table}


_READABLE = {
    "NAME": "a name", "INT": "an int", "FLOAT": "a float", "$END": "the end of the text",
}


def _describe_terminal(name: str) -> str:
    if name in _READABLE:
        return _READABLE[name]
    try:
        pattern = parser().get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return f"`{pattern.value}`" if pattern.type == "str" else name.lower()


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of the text"
    if tok.type == "_NL":
        return "end of the line"
    return f"`{tok.value}`"


def _expected(names: set[str]) -> str:
    if names & _names(("field",)):
        return "`field NAME { ... }`"
    starts = _names(("(", "-", "not")) | {"NAME", "INT", "FLOAT"}
    if len(names & starts) >= 3:
        return "an expression"
    operators, statements = _names(_OPERATOR_TEXT), _names(_STATEMENT_TEXT)
    parts = ["an operator"] if names & operators else []
    parts += ["a statement"] if len(names & statements) > 3 else []
    if "a statement" in parts:
        names = names - statements - {"NAME"}
    rest = names - operators - _END
    parts += sorted({_describe_terminal(n) for n in rest})
    if names & _END:
        parts.append("the end of the statement")
    if len(parts) <= 1:
        return "".join(parts) or "something else"
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def _accepted(exc: UnexpectedInput) -> set[str]:
    try:
        return set(exc.accepts)
    except Exception:  # noqa: BLE001 - lark could not replay the parse; fall back
        return set(getattr(exc, "expected", None) or ())


def _message(exc: UnexpectedInput, src: str) -> str:
    if isinstance(exc, UnexpectedCharacters):
        char = src[exc.pos_in_stream] if exc.pos_in_stream < len(src) else "?"
        return f"unexpected character `{char}`{_non_ascii(char)}"
    expected = _accepted(exc)
    tok = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedEOF) or tok is None or tok.type == "$END":
        return f"unexpected end of the text; expected {_expected(expected)}"
    if tok.type in _names(_COMPARE_TEXT) and "NAME" not in expected:
        return CHAINED
    return f"unexpected {_describe_token(tok)}; expected {_expected(expected)}"


def _non_ascii(char: str) -> str:
    if char.isascii():
        return ""
    if char.isdigit() or char.isnumeric():
        return "; numbers are written with the ASCII digits 0-9"
    if char.isalpha():
        return "; names are ASCII letters, digits and `_`"
    return ""


def _span(exc: UnexpectedInput, src: str) -> Span:
    tok = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedToken) and tok is not None and tok.type == "$END":
        # Lines end at "\n" only, as the lexer counts them (str.splitlines() would also
        # split at "\r", "\x85", "\x1c", U+2028 ... and place the end past the text).
        lines = src.split("\n")
        if len(lines) > 1 and lines[-1] == "":      # a final newline ends the last line
            lines.pop()
        return Span(len(lines), len(lines[-1].rstrip("\r")) + 1)
    line = getattr(exc, "line", None) or 1
    column = getattr(exc, "column", None) or 1
    if isinstance(tok, Token) and tok.end_column and tok.end_line == line:
        return Span(line, column, line, tok.end_column)
    return Span(line, column)


def _syntax_error(exc: UnexpectedInput, src: str) -> SyntaxError_:
    hint = _prime_hint(exc, src) or _if_hint(exc, src)
    if hint is not None:
        message, span = hint
        return SyntaxError_(message, span=span, source=src)
    return SyntaxError_(_message(exc, src), span=_span(exc, src), source=src)


# --- hints for habits from other languages -------------------------------------------
_WORD = r"(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"
_IF_WORDS = ("if", "then", "else", "elif")
IF_HINT = ("there is no `if ... then ... else` in the field language; write "
           "`where(cond, a, b)`, for example `where(x > 0, 1.0, -1.0)`")


def _position(src: str, line: int, column: int) -> int:
    """The offset in ``src`` of a 1-based line and column."""
    starts = [0] + [m.end() for m in re.finditer("\n", src)]
    return starts[line - 1] + column - 1


def _prime_hint(exc: UnexpectedInput, src: str):
    """``x' = ...``: a derivative is written ``dx/dt = ...``."""
    if not isinstance(exc, UnexpectedCharacters) or src[exc.pos_in_stream:][:1] != "'":
        return None
    pos = exc.pos_in_stream
    name = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", src[src.rfind("\n", 0, pos) + 1:pos])
    if name is None:
        return None
    x = name.group()
    span = Span(exc.line, exc.column - len(x), exc.line, exc.column + 1)
    return (f"`{x}'` is not how a derivative is written here; write `d{x}/dt = ...`", span)


def _if_hint(exc: UnexpectedInput, src: str):
    """An error at or after an ``if`` / ``then`` / ``else`` word of the same line:
    the user wrote a conditional; point at its ``if`` (or at the word itself)."""
    tok = getattr(exc, "token", None)
    if not isinstance(exc, UnexpectedToken) or not isinstance(tok, Token) or not tok.line:
        return None
    start = _position(src, tok.line, 1)
    text = src[start:].split("\n", 1)[0].split("#", 1)[0]
    at = tok.column - 1
    ifs = [m for m in re.finditer(_WORD.format("if"), text) if m.start() <= at]
    words = [m.group() for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", text[:at])]
    own = tok.type == "NAME" and str(tok) in _IF_WORDS
    after_if = bool(words) and words[-1] == "if"
    if_then = bool(ifs) and re.search(_WORD.format("then"), text) is not None
    if not (own or after_if or if_then):
        return None
    col = ifs[-1].start() + 1 if ifs else tok.column
    width = len("if") if ifs else len(str(tok))
    return IF_HINT, Span(tok.line, col, tok.line, col + width)


if __name__ == "__main__":          # python -m vgpu_compiler.frontend.parse
    print(ship_tables())
