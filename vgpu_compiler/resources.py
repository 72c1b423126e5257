"""Where the grammar and the GLSL templates live.

In a checkout they are the top-level ``grammar/`` and ``templates/`` folders;
in an installed wheel they travel inside the package as the data packages
``vgpu_compiler.grammar`` and ``vgpu_compiler.templates`` (see pyproject.toml).
"""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent


def _locate(folder: str) -> Path:
    installed = _PACKAGE / folder                 # a wheel: data packages inside vgpu_compiler
    if installed.is_dir():
        return installed
    return _CHECKOUT / folder                      # a checkout or an editable install


def grammar_path() -> Path:
    """The folder holding ``field.lark``."""
    return _locate("grammar")


def templates_dir() -> Path:
    """The folder holding the GLSL templates."""
    return _locate("templates")


def cache_root():
    """The user's cache folder of vgpu: ``VGPU_CACHE_DIR`` (``~`` expanded) or
    ``platformdirs.user_cache_dir("vgpu")`` (the parser's and the templates' compiled
    forms live in folders under it)."""
    import os
    env = os.environ.get("VGPU_CACHE_DIR")
    if env:
        return Path(os.path.expanduser(env))
    import platformdirs
    return Path(platformdirs.user_cache_dir("vgpu"))


def private_folder(folder: Path) -> bool:
    """Whether files in ``folder`` may be trusted, as the kernel caches do: made private
    (mode 0700) if missing, then used only when this user owns it and no one else can
    write it (no check on Windows)."""
    import os
    import stat
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    return not hasattr(os, "getuid") or (st.st_uid == os.getuid() and not st.st_mode & 0o022)


def own_file(fh) -> bool:
    """Whether the open file ``fh`` belongs to this user (always, on Windows)."""
    import os
    return not hasattr(os, "getuid") or os.fstat(fh.fileno()).st_uid == os.getuid()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder moved into place
    (``os.replace``): another process reads the old file, the new one, or none."""
    import os
    import tempfile
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def clear_folder(folder: Path) -> int:
    """Delete the files of ``folder`` (not its hidden ones: writes in flight); their
    number. Always safe: a reader that opened a file keeps it, a later one rebuilds."""
    n = 0
    try:
        items = list(folder.iterdir())
    except OSError:
        return 0
    for p in items:
        if p.name.startswith(".") or not p.is_file():
            continue
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n
