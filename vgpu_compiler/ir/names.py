"""Names for the hidden states a lowering adds to a field (ir/sensitivity.py's tangents,
ir/observers.py's observers): a name no name of the field already is, so a hidden state
never shadows a state, param, input, output, dim, grid index or noise."""
from __future__ import annotations

from .nodes import Field


def taken_names(field: Field) -> set[str]:
    """Every name ``field`` declares."""
    taken = {s.name for s in field.states} | {p.name for p in field.params}
    taken |= {a.name for a in field.inputs + field.outputs} | set(field.dims)
    taken |= {a.index for a in field.grid + (field.basin or ())}
    taken |= {n.name for n in field.noises}
    return taken


def unique(base: str, taken: set[str]) -> str:
    """``base``, with ``_`` appended until it is not in ``taken``; added to ``taken``."""
    out = base
    while out in taken:
        out += "_"
    taken.add(out)
    return out
