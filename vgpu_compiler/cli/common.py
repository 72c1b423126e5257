"""What the ``vgpuc`` subcommands share: usage errors, reading files, NAME=VALUE
arguments, and the one place that calls the front end.

Exit codes of ``vgpuc``: 0 success, 1 an error in the program or while running
it (every ``VgpuError``), 2 a usage error (a bad option, a file that cannot be
read). ``UsageError`` is the CLI's own: it is not a ``VgpuError`` because it is
never raised by the library.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
import zlib
from typing import Callable, Iterable

import numpy as np

from ..errors import VgpuError
from ..ir.ops import INT32_MAX

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A mistake in the command line itself (exit status 2)."""


def read_text(path: str) -> str:
    """The text of a file, or a UsageError that says why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a .field file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_array(path: str, key: str | None = None) -> np.ndarray:
    """An array from ``.npy``, or from ``.npz`` (the entry ``key``, else the only entry).

    ``FILE.npz:NAME`` picks the entry NAME explicitly (and it must exist).
    """
    explicit = False
    if ":" in path and not os.path.exists(path):
        path, key = path.rsplit(":", 1)
        explicit = True
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    try:
        data = np.load(path, allow_pickle=False)
    except UNREADABLE as exc:
        raise UsageError(f"{path}: not a .npy or .npz file ({_reason(exc)})") from None
    if isinstance(data, np.ndarray):
        if explicit:
            raise UsageError(f"{path}: a .npy file has no entry {key!r}")
        return data
    with data:
        name = _pick_npz_entry(path, list(data.files), key, explicit)
        try:                # an .npz entry is read here: a damaged one fails here
            return data[name]
        except UNREADABLE as exc:
            raise UsageError(f"{path}: cannot read its entry {name!r} "
                             f"({_reason(exc)})") from None


# What numpy raises for a file that is not (all) an array: an empty or truncated file,
# a damaged .npz (zip) entry, an object array (allow_pickle=False).
UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValueError) and "allow_pickle" in str(exc):
        return "it holds an object array, which vgpuc does not read"
    return str(exc) or type(exc).__name__


def _pick_npz_entry(path: str, names: list[str], key: str | None, explicit: bool) -> str:
    if key is not None and key in names:
        return key
    if len(names) == 1 and not explicit:
        return names[0]
    wanted = f" (looked for {key!r})" if key else ""
    raise UsageError(f"{path}: holds {', '.join(names) or 'nothing'}{wanted}; "
                     f"name one as {path}:NAME")


def split_assignment(text: str, option: str) -> tuple[str, str]:
    """``"k=0.5"`` -> ``("k", "0.5")``, or a UsageError naming the option."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise UsageError(f"{option} expects NAME=VALUE, got {text!r}")
    if not name.isidentifier():
        raise UsageError(f"{option}: {name!r} is not a name")
    return name, value


def parse_dims(items: Iterable[str] | None) -> dict[str, int]:
    """``--dim N=1024`` options -> ``{"N": 1024}``."""
    dims: dict[str, int] = {}
    for item in items or ():
        name, value = split_assignment(item, "--dim")
        try:
            n = int(value)
        except ValueError:
            raise UsageError(f"--dim {name}: {value!r} is not an integer") from None
        if n < 0:
            raise UsageError(f"--dim {name}: must not be negative, got {n}")
        if n > INT32_MAX:
            raise UsageError(f"--dim {name}: {n} is larger than the largest size, "
                             f"{INT32_MAX} (sizes are 32-bit ints)")
        dims[name] = n
    return dims


def parse_params(items: Iterable[str] | None) -> dict[str, float | np.ndarray]:
    """``--param k=0.5`` (a number) or ``--param k=k.npy`` (an array file)."""
    params: dict[str, float | np.ndarray] = {}
    for item in items or ():
        name, value = split_assignment(item, "--param")
        try:
            params[name] = float(value)
        except ValueError:
            params[name] = load_array(value, key=name)
    return params


def parse_inputs(items: Iterable[str] | None) -> dict[str, np.ndarray]:
    """``--input A=a.npy`` (or ``A=arrays.npz``, taking its entry ``A``)."""
    inputs: dict[str, np.ndarray] = {}
    for item in items or ():
        name, value = split_assignment(item, "--input")
        inputs[name] = load_array(value, key=name)
    return inputs


def attach_file(err: VgpuError, source: str, filename: str) -> VgpuError:
    """Give an error raised on a bare string the file it came from."""
    if err.span is not None and (err.filename in (None, "<string>") or err.source is None):
        err.with_source(err.source or source, filename)
    return err


def describe_error(err: VgpuError, filename: str | None = None) -> str:
    """The text printed for an error: located errors print themselves
    (``file:line:col: error: ...`` with the source line and a caret); others are
    prefixed with the file they concern, when there is one."""
    text = str(err)
    if err.span is not None:
        return text
    if filename:
        return f"{filename}: error: {text}"
    return f"error: {text}"


def program_text(source: str, filename: str):
    """The text as the API takes it, remembering its file (errors then name the file)."""
    from ..api import Source

    return Source(source, filename)


def compile_source(source: str, filename: str):
    """The front end's ``Compiled`` for a program text (errors carry the file name);
    memoised by the API, so a later ``vgpu.solve`` on the same text does not parse again."""
    from ..api import compile as compile_api

    try:
        return compile_api(program_text(source, filename))
    except VgpuError as err:
        raise attach_file(err, source, filename)


def select_field(compiled, name: str | None):
    """One field of a compiled program (``--field NAME``; optional when there is one)."""
    return compiled.select(name)


def all_fields(compiled) -> tuple:
    """Every field of a compiled program, in source order."""
    return tuple(compiled.program.fields)


def size_text(n_bytes: float) -> str:
    """``3.2 GiB``: a size for a message."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


# --- files out ---------------------------------------------------------------------------
def check_output(path: str, option: str) -> None:
    """Refuse an output path that cannot be written, before the run: its folder must
    exist and be writable, and the path must not be a folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: the folder {folder} is not writable")


def write_atomically(path: str, write: Callable, option: str) -> None:
    """``write(fh)`` into a temporary file beside ``path``, then renamed onto it: a
    failed write (a full disk) leaves no file, and an old one as it was."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, part = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.",
                                    suffix=".part")
    except OSError as exc:
        raise UsageError(f"cannot write {path} ({option}): {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(part, 0o666 & ~_umask())       # (mkstemp's 0600: the mode open() gives)
        os.replace(part, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(part)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path} ({option}): "
                             f"{exc.strerror or exc}") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
