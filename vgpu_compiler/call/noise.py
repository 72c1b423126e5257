"""The call rules of stochastic fields (docs/language.md, Noise), in one place.

``seed_of`` checks a call's ``seed`` (an int in [0, 2^64), default 0); it is
data, like an array: never part of a call's signature, never a recompile.
``refuse_with_noise`` is the one check for call arguments that a field with
noise does not take (``save_at``: a continuous extension of a noisy path is
not defined), for the code that adds such an argument to call.
"""
from __future__ import annotations

from .. import spelling as S
from ..errors import CallError
from ..ir.nodes import Field
from ..noise.normal import key_of


def seed_of(seed) -> int:
    if seed is None or (type(seed) is int and 0 <= seed < 1 << 64):     # the usual: fast
        return seed or 0
    key_of(seed)                    # raises the ArgumentTypeError
    return int(seed)


def refuse_with_noise(field: Field, argument: str, value) -> None:
    """A CallError when ``argument`` is given (not None) for a field with noise."""
    if value is not None and field.noises:
        raise CallError(f"{argument} cannot be used with field {field.name}, which has noise "
                        f"(`{field.noises[0].name}`): a noisy path has no continuous extension "
                        f"between steps; pass {S.name('save_every')} instead")

