"""The LALR parser's tables on disk, so that a new process does not rebuild them from
grammar/field.lark (0.5-0.8 s; loading them takes a few hundredths).

One JSON file, ``parser/field-<key>.json`` under ``VGPU_CACHE_DIR`` (``~`` expanded) or
``platformdirs.user_cache_dir("vgpu")``; the key is a SHA-256 of the grammar's text,
lark's version and the parser's options, so a changed grammar or lark makes a new file.
JSON, not pickle: a file is data, never code. The file holds a SHA-256 of its payload;
anything damaged, truncated, foreign or refused by lark is ignored and the parser is
built from the grammar (and written again). Trust is the kernel caches': the folder is
made private (0700) when created, and a file is read only from a folder this user owns
and no one else can write, and only when this user owns it; otherwise the parser is
built and nothing is written. Writes go to a temporary file moved into place
(``os.replace``): another process sees the old file, the new one, or none.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger("vgpu")
FORMAT = 1


def folder() -> Path:
    env = os.environ.get("VGPU_CACHE_DIR")
    if env:
        return Path(os.path.expanduser(env)) / "parser"
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu")) / "parser"


def key(grammar_text: str, options: dict) -> str:
    import lark
    h = hashlib.sha256()
    for part in (str(FORMAT), lark.__version__, grammar_text, repr(sorted(options.items()))):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def load_or_build(grammar_text: str, options: dict, postlex, build: Callable):
    """The parser: from the disk file of (grammar, options), else ``build()`` (and then
    written to that file). ``postlex`` is the parser's post-lexer (not stored)."""
    where = folder()
    path = where / f"field-{key(grammar_text, options)}.json"
    trusted = _trusted(where)
    if trusted:
        parser = _load(path, postlex)
        if parser is not None:
            return parser
    parser = build()
    if trusted:
        try:
            _store(where, path, parser)
        except (OSError, TypeError, ValueError) as exc:      # a full disk, a lark surprise
            log.debug("vgpu: the parser tables were not written to %s: %s", path, exc)
    return parser


def _trusted(where: Path) -> bool:
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = where.stat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        log.debug("vgpu: %s is not private to this user: the parser is built, not cached",
                  where)
        return False
    return True


def _load(path: Path, postlex):
    from lark import Lark
    try:
        with open(path, "rb") as fh:
            if hasattr(os, "getuid") and os.fstat(fh.fileno()).st_uid != os.getuid():
                return None
            raw = fh.read()
    except OSError:
        return None
    try:
        entry = json.loads(raw.decode("utf-8"))
        payload = entry["payload"]
        if entry.get("format") != FORMAT or entry.get("sha256") != _digest(payload):
            raise ValueError("not this format, or its checksum does not match")
        tables = _decode(payload)
        return Lark._load_from_dict(tables["data"], tables["memo"], postlex=postlex)
    except Exception as exc:        # noqa: BLE001 - anything damaged: build the parser
        log.debug("vgpu: ignoring the damaged parser tables %s: %s", path, exc)
        return None


def _store(where: Path, path: Path, parser) -> None:
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    data = dict(data, options={k: v for k, v in data["options"].items() if k != "postlex"})
    payload = _encode({"data": data, "memo": memo})
    text = json.dumps({"format": FORMAT, "sha256": _digest(payload), "payload": payload},
                      separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=where)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _digest(payload) -> str:
    return hashlib.sha256(json.dumps(payload, separators=(",", ":")).encode("utf-8")).hexdigest()


# lark's serialised tables are dicts (some with int keys), tuples, lists and scalars: in
# JSON a dict is {"d": [[key, value], ...]} and a tuple {"t": [...]}, so both survive.
def _encode(x):
    if isinstance(x, dict):
        return {"d": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"t": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} of the parser tables")


def _decode(x):
    if isinstance(x, dict):
        if "d" in x:
            return {_decode(k): _decode(v) for k, v in x["d"]}
        return tuple(_decode(v) for v in x["t"])
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x
