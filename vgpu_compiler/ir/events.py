"""Events (``when``, ``stop when``): the numbers of the location rule, defined once.

docs/language.md, "Events": a condition that is false at the start of a step
(or of the rest of one) and true at its end is located by bisection on the
fraction ``theta`` of that step, on the step's continuous extension, until the
bracket ``[lo, hi]`` is narrower than ``BRACKET[dtype]``; the event happens at
``hi`` (the bracket's true end). Starting from ``[0, 1]``, that is exactly
``BISECTIONS[dtype]`` halvings, every one exact in the working dtype. The bisection
starts on the first of ``SAMPLES`` equal sub-intervals of ``[0, 1]`` whose end holds,
so a condition that holds, stops holding and holds again inside one coarse step is
located at its first crossing that the samples see (a window narrower than
``1 / SAMPLES`` of the step, with the condition false at both its neighbouring
samples, is not seen). More than
``MAX_PER_STEP`` events in one step end the trajectory with status 4.

The continuous extension is the one ``save_at`` uses: an adaptive method's own
(``ir.step``'s ``dense``), and for a fixed-step method the cubic Hermite through
both ends of the step, values and slopes, written as ``y_start + h * (...)``:
``dense_program`` gives it as Combinations over the step's stages plus one more
"stage", the slope at the step's end ``F(t_end, y_end)`` (index ``n_stages``).
Every backend reads these; none has its own copy.
"""
from __future__ import annotations

import functools

from .embedded import hermite
from .step import Combination, StepProgram, _combination, step_program
from .tableau import Tableau

BRACKET = {"float32": 2.0 ** -20, "float64": 2.0 ** -40}
# halvings of [0, 1] until its width is narrower than BRACKET: 2^-21 < 2^-20
BISECTIONS = {"float32": 21, "float64": 41}
# Before bisecting, the condition is evaluated at every theta = j / SAMPLES (j = 1 ..
# SAMPLES - 1; theta = 1 holds, or it would not have triggered): bisection then starts on
# the first sub-interval whose end holds, [(j - 1) / SAMPLES, j / SAMPLES], and takes
# BISECTIONS - SAMPLE_HALVINGS halvings, so the bracket ends as narrow as before and a
# condition that changes once in the step gives exactly the plain bisection's theta.
SAMPLE_HALVINGS = 4
SAMPLES = 2 ** SAMPLE_HALVINGS
MAX_PER_STEP = 64


@functools.lru_cache(maxsize=None)
def dense_program(tableau: Tableau) -> tuple[tuple[Combination, ...], bool]:
    """(per power theta^1, theta^2, ... the Combination of the continuous extension,
    whether it reads the end slope as stage ``n_stages``). For an adaptive method, its
    own (bs3's Hermite reads the FSAL last stage, which is that slope already)."""
    program: StepProgram = step_program(tableau)
    if program.dense is not None:
        return program.dense, False
    rows = hermite(tuple(tableau.b) + (0,))     # the end slope as one more stage
    powers = tuple(zip(*rows))
    return tuple(_combination(p) for p in powers), True
