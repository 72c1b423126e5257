"""The LALR parser's tables on disk, so that a new process does not rebuild them from
grammar/field.lark (0.4-0.8 s per process; loading them takes about 0.01 s).

One file, ``parser/field-<key>.tables`` under the cache folder (disk_cache.root:
``VGPU_CACHE_DIR`` or the user cache folder); the key is a SHA-256 of the grammar's text,
lark's version and the parser's options, so a changed grammar or lark makes a new file.
The file is a header (this format), a SHA-256 of the rest, and lark's serialised tables
(dicts, tuples, lists, strings and numbers: ``marshal``, which builds values and runs no
code, unlike ``pickle``). A damaged, truncated or foreign file, or tables lark refuses,
are ignored and the parser is built from the grammar (and written again). Trust is the
kernel caches' (disk_cache.trusted): the folder is made private (0700) when
created, and a file is read only from a folder this user owns and no one else can
write, and only when this user owns it; otherwise the parser is built and nothing is
written. Writes go to a temporary file moved into place (disk_cache.write).

The package ships the tables too, beside the grammar (``grammar/field-<lark's
version>-<key>.tables``, the same format), so that even the first process on an empty
cache folder builds nothing (0.1-0.3 s of a cold first call): found only when the
grammar, lark's version and the options are the ones they were made from (the name
says so), checked as a cache file is (it is read with the package's code, so it is
trusted as that is); otherwise the cache folder and the build as above. Written by
``python -m vgpu_compiler.frontend.parse`` after a change to the grammar
(tests/api/test_startup_caches.py fails until then).
"""
from __future__ import annotations

import hashlib
import logging
import marshal
import os
from pathlib import Path
from typing import Callable

from .. import disk_cache as dc

log = logging.getLogger("vgpu")
FORMAT = 1
HEADER = b"vgpu-lark-%d\0" % FORMAT


def folder() -> Path:
    return dc.root() / "parser"


def clear() -> int:
    """Delete the stored tables (vgpu.clear_cache, vgpuc cache clear); their number."""
    return dc.clear(folder(), ".tables")


def key(grammar_text: str, options: dict) -> str:
    import lark
    h = hashlib.sha256()
    for part in (str(FORMAT), lark.__version__, grammar_text, repr(sorted(options.items()))):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def shipped(grammar_text: str, options: dict, where: Path) -> Path:
    """The name of the tables shipped in the folder ``where`` for (grammar, options)
    under this lark."""
    import lark
    return where / f"field-{lark.__version__}-{key(grammar_text, options)}.tables"


def load_or_build(grammar_text: str, options: dict, postlex, build: Callable,
                  ships: Path | None = None):
    """The parser: from the tables shipped in the folder ``ships`` (when they are this
    grammar's), else from the disk file of (grammar, options), else ``build()`` (and
    then written to that file). ``postlex`` is the parser's post-lexer (not stored)."""
    if ships is not None:
        parser = _load(shipped(grammar_text, options, ships), postlex, owned=False)
        if parser is not None:
            return parser
    where = folder()
    path = where / f"field-{key(grammar_text, options)}.tables"
    trusted = _trusted(where)
    if trusted:
        parser = _load(path, postlex)
        if parser is not None:
            return parser
    parser = build()
    if trusted:
        try:
            _store(path, parser)
        except (OSError, TypeError, ValueError) as exc:      # a full disk, a lark surprise
            log.debug("vgpu: the parser tables were not written to %s: %s", path, exc)
    return parser


def _trusted(where: Path) -> bool:
    if dc.trusted(where):
        return True
    log.debug("vgpu: %s is not private to this user: the parser is built, not cached", where)
    return False


def _load(path: Path, postlex, owned: bool = True):
    """The parser of the tables in ``path``, or None (missing, damaged, refused; with
    ``owned``, a file this user does not own)."""
    from lark import Lark
    try:
        with open(path, "rb") as fh:
            if owned and not dc.owned(os.fstat(fh.fileno())):
                return None
            raw = fh.read()
    except OSError:
        return None
    body = raw[len(HEADER) + 32:]
    if not raw.startswith(HEADER) or raw[len(HEADER):len(HEADER) + 32] != \
            hashlib.sha256(body).digest():
        log.debug("vgpu: ignoring the damaged parser tables %s", path)
        return None
    try:
        tables = marshal.loads(body)
        return Lark._load_from_dict(tables["data"], tables["memo"], postlex=postlex)
    except Exception as exc:        # noqa: BLE001 - tables lark refuses: build the parser
        log.debug("vgpu: ignoring the parser tables %s: %s", path, exc)
        return None


def _store(path: Path, parser) -> None:
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data = dict(data, options={k: v for k, v in data["options"].items() if k != "postlex"})
    body = marshal.dumps({"data": data, "memo": memo})     # ValueError: not plain data
    dc.write(path, HEADER + hashlib.sha256(body).digest() + body, ".tables")


def ship(grammar_text: str, options: dict, build: Callable, where: Path) -> Path:
    """Write the tables of (grammar, options) for the package into ``where``, in place of
    any shipped before; their path."""
    for old in where.glob("field-*.tables"):
        old.unlink()
    path = shipped(grammar_text, options, where)
    parser = build()
    _store(path, parser)
    path.chmod(0o644)
    return path

