"""The disk key of a C kernel computed without rendering it: a new process whose library
is already on disk loads it without Jinja (not imported, no template rendered).

What determines the C text, and so the key (with the compiler, its flags and the CPU:
toolchain.key):

- everything the template is given (``fingerprint``): the printed kernel's pieces and the
  kernel description they read through, the dialect, the lane count and the other
  arguments, digested canonically: dataclasses by their type and fields (those shown in
  their repr: a span is not), objects by their type and attributes, Enums by name,
  numbers by repr, dicts in their order (the template iterates them so), sets sorted;
  each container or object is the SHA-256 of its parts, digested once however often it
  is met (a shared subtree costs nothing, and what is shared does not change the key);
  and the source of every module whose classes appear there (the templates call their
  properties and methods);
- the bytes of every C template (templates/*.c.j2) and of the Python that renders them
  (``RENDERERS``: the filters, the text's last rewrites), and Jinja's version.

A value that cannot be written out so (a function, a foreign object, expressions nested
past Python's recursion limit) raises ``Unkeyable``: the kernel is then rendered and keyed by its text, as before.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.util
import re
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from ...runtime.kernel_cache import hash_files

FORMAT = "vgpu-c-plan-1"
HERE = Path(__file__).resolve().parent
# the Python that shapes the text besides the printed pieces: this backend's kernel module
# (its arguments and the text's last rewrite), and every module of the shader stage and of
# codegen/ (the template environment, the IR builders, printer and lane passes that the
# templates call while rendering: a change to any of them changes the key)
RENDERERS = (HERE / "kernel.py",
             *sorted((HERE.parent / "shader").glob("*.py")),
             *sorted((HERE.parents[1] / "codegen").rglob("*.py")))
_ATOMS = (str, int, bool, type(None))


class Unkeyable(TypeError):
    """A template argument that has no canonical text (render and key by the text)."""


def fingerprint(**arguments) -> str:
    """A canonical digest of the template's arguments (``Unkeyable`` if one has none),
    with the source of every module whose classes they hold (their properties and
    methods, which the templates call, are code too)."""
    seen: dict = {}
    modules: set = set()
    try:
        h = hashlib.sha256(_digest(arguments, seen, modules))
    except RecursionError:          # a program nested past Python's stack: keyed by its text
        raise Unkeyable("the kernel's expressions are nested too deeply to digest") from None
    for name in sorted(modules):
        h.update(name.encode() + b"\0" + _module_digest(name))
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _module_digest(name: str) -> bytes:
    path = getattr(sys.modules.get(name), "__file__", None)
    if not path:
        raise Unkeyable(f"module {name} has no source file")
    return hashlib.sha256(Path(path).read_bytes()).digest()


def _digest(x, seen: dict, modules: set) -> bytes:
    """The atom's text, or the SHA-256 of the type and the parts' digests: structural, so
    an object met twice (found by id, its digest reused) reads as its copy would."""
    if isinstance(x, _ATOMS) or isinstance(x, (float, Fraction, Decimal)):
        return f"{type(x).__name__}:{x!r}".encode()
    if isinstance(x, enum.Enum):
        return f"enum:{type(x).__qualname__}.{x.name}".encode()
    hit = seen.get(id(x))
    if hit is not None:
        return hit[0]
    if isinstance(x, (tuple, list)):
        parts = [type(x).__name__.encode()] + [_digest(v, seen, modules) for v in x]
    elif isinstance(x, dict):         # in its order: the template iterates it so
        parts = [b"dict"] + [d for k, v in x.items() for d in (_digest(k, seen, modules),
                                                               _digest(v, seen, modules))]
    elif isinstance(x, (set, frozenset)):
        parts = [b"set"] + sorted(_digest(v, seen, modules) for v in x)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        modules.add(type(x).__module__)
        parts = [f"dc:{type(x).__module__}.{type(x).__qualname__}".encode()]
        for f in dataclasses.fields(x):
            if f.repr:
                parts += [f.name.encode(), _digest(getattr(x, f.name), seen, modules)]
    elif type(x).__module__.startswith("vgpu_compiler.") and hasattr(x, "__dict__") \
            and not callable(x):
        modules.add(type(x).__module__)
        parts = [f"obj:{type(x).__module__}.{type(x).__qualname__}".encode()]
        for k, v in vars(x).items():
            parts += [k.encode(), _digest(v, seen, modules)]
    else:
        raise Unkeyable(f"{type(x).__module__}.{type(x).__qualname__}")
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    out = h.digest()
    seen[id(x)] = (out, x)           # (x held: no id is reused while digesting)
    return out


def renderer_digest(templates: Path) -> str:
    """SHA-256 of every C template, the renderers' Python and Jinja's version (read from
    its files: Jinja is not imported); a template is read again when its size or time
    changes (one edited while a process runs: Jinja reloads it too). The renderers are
    read once a process: their code is what the process has loaded, whatever the files
    say later."""
    stamp = []
    for path in sorted(templates.glob("*.c.j2")):
        st = path.stat()
        stamp.append((str(path), st.st_size, st.st_mtime_ns))
    return _files_digest(tuple(stamp))


@functools.lru_cache(maxsize=16)
def _files_digest(stamp: tuple) -> str:
    h = hashlib.sha256(FORMAT.encode() + b"\0" + _renderers_digest().encode() + b"\0")
    return hash_files(h, [Path(path) for path, _, _ in stamp]).hexdigest()


@functools.lru_cache(maxsize=1)
def _renderers_digest() -> str:
    return hash_files(hashlib.sha256(_jinja_version().encode() + b"\0"), RENDERERS).hexdigest()


def _jinja_version() -> str:
    spec = importlib.util.find_spec("jinja2")
    try:
        text = Path(spec.origin).read_text(encoding="utf-8")
    except (AttributeError, TypeError, OSError):
        return "unknown"
    found = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
    return found.group(1) if found else "unknown"
