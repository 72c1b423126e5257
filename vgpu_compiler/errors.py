"""Every error a user can cause is a VgpuError subclass, one class per kind.

Source errors carry ``filename``, ``line`` and ``column`` (1-based) and print
the offending source line with a caret under the column, in the compiler
convention ``file:line:col: error: message``. Columns count characters (a tab
is one); the caret's padding repeats the line's tabs, so it lines up however
wide a terminal shows them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A position in the source: 1-based line and column, and where it ends."""

    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None


class VgpuError(Exception):
    """Base class of every error a user of VGPU can cause."""

    kind = "error"

    def __init__(self, message: str, *, span: Span | None = None,
                 source: str | None = None, filename: str | None = None):
        self.message = message
        self.span = span
        self.source = source
        self.filename = filename or "<string>"
        super().__init__(self._render())

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span else None

    @property
    def source_line(self) -> str | None:
        if self.span is None or self.source is None:
            return None
        # The lexer counts lines at "\n" only; str.splitlines() would also split at
        # "\f", "\v", "\x1c" .. "\x1e", "\x85", U+2028 and U+2029 and show another line.
        lines = self.source.split("\n")
        lines[0] = lines[0].removeprefix("\ufeff")   # the parser skips a byte-order mark
        if 1 <= self.span.line <= len(lines):
            return lines[self.span.line - 1].rstrip("\r")
        return ""

    def _render(self) -> str:
        if self.span is None:
            return self.message
        head = f"{self.filename}:{self.span.line}:{self.span.column}: error: {self.message}"
        text = self.source_line
        if text is None:
            return head
        width = 1
        if self.span.end_line == self.span.line and self.span.end_column:
            width = max(1, self.span.end_column - self.span.column)
        # tabs before the column stay tabs, so the caret lines up however wide they show
        pad = "".join("\t" if c == "\t" else " " for c in text[:self.span.column - 1])
        pad += " " * (self.span.column - 1 - len(pad))
        caret = pad + "^" + "~" * (width - 1)
        return f"{head}\n    {text}\n    {caret}"

    def with_source(self, source: str, filename: str | None = None) -> "VgpuError":
        """Attach program text (and a file name) to an error raised without it."""
        self.source = source
        if filename:
            self.filename = filename
        self.args = (self._render(),)
        return self


# --- errors in the program text -------------------------------------------
class SourceError(VgpuError):
    """An error located in the program text."""


class SyntaxError_(SourceError):
    """The text does not parse (unexpected token or character)."""

    kind = "syntax error"


class NameError_(SourceError):
    """An unknown, duplicate or misused name."""

    kind = "name error"


class TypeError_(SourceError):
    """An expression of the wrong type (int / float / bool) or rank."""

    kind = "type error"


class DeclarationError(SourceError):
    """A missing, duplicate or malformed declaration (state, solve, basin ...)."""

    kind = "declaration error"


class ProgramIndexError(SourceError):
    """An index outside an input, output or coupled array, found while running."""

    kind = "index error"


class ZeroDivision(SourceError):
    """An integer ``//`` or ``%`` by zero, found while running."""

    kind = "division by zero"


# --- errors in the call -----------------------------------------------------
class CallError(VgpuError):
    """A bad argument to run_field / solve (shape, dtype, missing or unknown name)."""


class ShapeError(CallError):
    """An array of the wrong shape, or dims that disagree."""


class MissingError(CallError):
    """A param, input or dim that the field needs was not given."""


class UnknownNameError(CallError):
    """A name in params / inputs / dims / field= that the program does not declare."""


class ArgumentTypeError(CallError):
    """An argument of the wrong kind: not real numbers, a bad dtype, steps or dt, an unknown backend."""


class BackendError(VgpuError):
    """A backend cannot run this program (no GL context, an unsupported float64 function)."""


class CacheError(VgpuError):
    """The kernel cache cannot be used as asked."""


# Readable public names (the trailing underscores only avoid shadowing builtins).
VgpuSyntaxError = SyntaxError_
VgpuNameError = NameError_
VgpuTypeError = TypeError_
VgpuIndexError = ProgramIndexError
VgpuZeroDivisionError = ZeroDivision


class NonFiniteWarning(RuntimeWarning):
    """Some trajectories became NaN or infinite (one warning per call, with a count)."""


class StatusWarning(RuntimeWarning):
    """Some trajectories of an adaptive run ended early (status 2-4: max_steps reached,
    step size underflow, too many events; one warning per call, with counts)."""


class ToleranceWarning(UserWarning):
    """An adaptive method's rtol is below what the working dtype resolves (issued before
    the run: its steps would shrink without gaining accuracy, and may underflow)."""
