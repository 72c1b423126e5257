"""Program text as the API takes it: ``Source`` (text that remembers its file),
``load``, ``text_of``, and ``Located`` (which attaches the text to the errors raised
inside). Light: ``import vgpu`` loads this, not the pipeline (pipeline.py, which
imports the front end's and the call's modules when a call first needs them)."""
from __future__ import annotations

import os

from .errors import ArgumentTypeError, CallError, VgpuError


class Source(str):
    """Program text that remembers the file it came from (``vgpu.load``)."""

    filename: str

    def __new__(cls, text: str, filename: str = "<string>") -> "Source":
        s = super().__new__(cls, text)
        s.filename = filename
        return s


def load(path) -> Source:
    """Read a ``.field`` file; errors in it will name the file."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"load() takes the path of a .field file (a str or a path), "
                                f"got {type(path).__name__}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise CallError(f"cannot read program file {os.fspath(path)!r}: {reason}") from None
    return Source(text, os.fspath(path))


def text_of(src) -> tuple[str, str]:
    if type(src) is str:            # the usual case, first: isinstance on an ABC is slow
        return src, "<string>"
    if isinstance(src, os.PathLike):
        src = load(src)
    if not isinstance(src, str):
        raise ArgumentTypeError(f"the program must be text (a str, or vgpu.load(path)), "
                                f"got {type(src).__name__}")
    return str(src), getattr(src, "filename", "<string>")


class Located:
    """Attach the program text to any VgpuError raised inside (source errors print a caret)."""

    def __init__(self, text: str, filename: str):
        self.text, self.filename = text, filename

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if isinstance(error, VgpuError) and error.source is None:
            error.with_source(self.text, self.filename)
        return False
