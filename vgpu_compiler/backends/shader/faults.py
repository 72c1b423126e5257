"""A kernel's run-time error slot, as the user error it reports (every compiled backend).

A kernel that meets an integer division by zero or an index out of range writes the
error's id and the index it tried into its error slot (the first such error wins);
``NO_ERROR`` there means none. The id is a row of the kernel's error table
(``meta["errors"]``: kind, array, line, column), made by the shared lowering.
"""
from __future__ import annotations

import numpy as np

from ...errors import ProgramIndexError, Span, ZeroDivision

NO_ERROR = 0xFFFFFFFF


def raise_error(err: np.ndarray, meta: dict, bound) -> None:
    """Raise the error the slot ``err`` (uint32 words: id, then the index) holds, if any:
    ZeroDivision or ProgramIndexError, at its line of ``meta``'s error table; ``bound``:
    the call (the shapes of its inputs and outputs name the array's)."""
    if int(err[0]) == NO_ERROR:
        return
    kind, what, line, column = meta["errors"][int(err[0])]
    span = Span(line, column) if line else None
    where = f" (line {line})" if line else ""
    if kind != "index":
        raise ZeroDivision(f"integer {what} by zero{where}", span=span)
    role, shape = ("input", bound.inputs[what].shape) if what in bound.inputs else (
        "output", bound.output_shapes[what])
    at = ", ".join(str(int(np.int32(np.uint32(x)))) for x in err[1:1 + len(shape)])
    raise ProgramIndexError(f"index out of range: {what}[{at}] but {role} {what} has shape "
                            f"{tuple(shape)}{where}", span=span)
