"""The compiled templates on disk (Jinja2's bytecode cache), so that a new process does
not compile templates/*.j2 to Python again before its first kernel (0.3-0.65 s for the
C kernel's templates; loading them takes milliseconds).

One file per template, ``templates/<jinja's key>.code`` under the cache folder
(disk_cache.root): a header (this format, the Python bytecode magic, the SHA-1 of
the template's text as Jinja computes it, a SHA-256 of Jinja's version and the
environment's syntax options), a SHA-256 of the code, and the code (``marshal``). A
changed template, Jinja, environment or Python, or a damaged, truncated or foreign file
is a miss (the template is compiled and written again). Code from this folder is
run, so it is trusted as the kernel caches are (disk_cache.trusted: private,
this user's own; otherwise nothing is read or written). No ``pickle``, unlike Jinja's
own FileSystemBytecodeCache.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import marshal
import os

import jinja2

from ... import disk_cache as dc

log = logging.getLogger("vgpu")
FORMAT = b"vgpu-jinja-1\0"


def folder():
    return dc.root() / "templates"


def clear() -> int:
    """Delete the compiled templates (vgpu.clear_cache, vgpuc cache clear); their number."""
    return dc.clear(folder(), ".code")


class TemplateCodeCache(jinja2.BytecodeCache):
    def __init__(self):
        self._trusted = {}          # folder -> its trust, checked once per folder

    def _folder(self):
        where = folder()            # (VGPU_CACHE_DIR may change within a process)
        ok = self._trusted.get(where)
        if ok is None:
            ok = self._trusted[where] = dc.trusted(where)
        return where if ok else None

    def _header(self, bucket) -> bytes:
        env = bucket.environment        # its syntax and whitespace options shape the code
        opts = repr((jinja2.__version__, env.block_start_string, env.block_end_string,
                     env.variable_start_string, env.variable_end_string,
                     env.comment_start_string, env.comment_end_string,
                     env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks,
                     env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
                     env.autoescape, env.optimized, sorted(env.extensions)))
        return (FORMAT + importlib.util.MAGIC_NUMBER + str(bucket.checksum).encode() + b"\0"
                + hashlib.sha256(opts.encode()).digest())

    def load_bytecode(self, bucket) -> None:
        where = self._folder()
        if where is None:
            return
        path = where / f"{bucket.key}.code"
        try:
            with open(path, "rb") as fh:
                if not dc.owned(os.fstat(fh.fileno())):
                    return
                raw = fh.read()
        except OSError:
            return
        head = self._header(bucket)
        body = raw[len(head) + 32:]
        if not raw.startswith(head) or raw[len(head):len(head) + 32] != \
                hashlib.sha256(body).digest():
            return                  # another template text, Python, or a damaged file
        try:
            bucket.code = marshal.loads(body)
        except Exception:           # noqa: BLE001 - damaged: compile the template
            bucket.reset()

    def dump_bytecode(self, bucket) -> None:
        where = self._folder()
        if where is None or bucket.code is None:
            return
        body = marshal.dumps(bucket.code)
        try:
            dc.write(where / f"{bucket.key}.code",
                     self._header(bucket) + hashlib.sha256(body).digest() + body, ".code")
        except OSError as exc:
            log.debug("vgpu: a compiled template was not written: %s", exc)
