"""How an error message names a call argument: in Python words or in ``vgpuc``'s.

The library raises the same errors for ``vgpu.solve(...)`` and ``vgpuc run``, but a
message must name what the user typed: ``params={'k': value}`` in Python,
``--param k=VALUE`` on the command line. Messages that name an argument build the
name with the functions below; ``vgpuc`` runs its commands inside
``command_line()``, which switches the spelling for the calling thread (a context
variable: Python callers, other threads and other contexts keep Python words).
"""
from __future__ import annotations

import contextlib
import contextvars

_CLI = contextvars.ContextVar("vgpu_cli_spelling", default=False)

# call argument -> the vgpuc option that gives it
OPTIONS = {
    "params": "--param", "inputs": "--input", "dims": "--dim", "h0": "--h0",
    "field": "--field", "backend": "--backend", "dtype": "--dtype", "steps": "--steps",
    "dt": "--dt", "t0": "--t0", "save_every": "--save-every",
    "t1": "--t1", "rtol": "--rtol", "atol": "--atol", "dt0": "--dt0", "dtmax": "--dtmax",
    "max_steps": "--max-steps", "save_at": "--save-at",
}
# what the value of one entry is called, per mapping argument (Python, CLI)
_VALUES = {"params": ("value", "VALUE"), "inputs": ("array", "FILE.npy"),
           "dims": ("...", "...")}

@contextlib.contextmanager
def command_line():
    """Inside, messages name vgpuc's options instead of Python arguments."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)


def name(arg: str) -> str:
    """``h0`` / ``--h0``: the argument as the subject of a sentence."""
    return OPTIONS[arg] if _CLI.get() else arg


def keyword(arg: str) -> str:
    """``params=`` / ``--param``: where a value is given."""
    return OPTIONS[arg] if _CLI.get() else f"{arg}="


def entry(arg: str, key: str) -> str:
    """``dims['N']`` / ``--dim N``: one entry of a mapping argument."""
    return f"{OPTIONS[arg]} {key}" if _CLI.get() else f"{arg}[{key!r}]"


def give_entry(arg: str, key: str) -> str:
    """``params={'k': value}`` / ``--param k=VALUE``: how to give one entry."""
    python, cli_value = _VALUES[arg]
    if _CLI.get():
        return f"{OPTIONS[arg]} {key}={cli_value}"
    return f"{arg}={{{key!r}: {python}}}"


def setting(arg: str, value: str) -> str:
    """``backend='numpy'`` / ``--backend numpy``: an argument with its value."""
    return f"{OPTIONS[arg]} {value}" if _CLI.get() else f"{arg}={value!r}"


def field_choice() -> str:
    """How to choose one field of a program with several."""
    return "--field NAME" if _CLI.get() else "field=NAME"
