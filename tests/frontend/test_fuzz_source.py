"""Damaged and random program text only ever raises a vgpu.VgpuError.

tests/frontend/test_source_errors.py already feeds hypothesis token soup to the front
end; this file mutates real programs (examples/*.field and the contract's):
token deletion, duplication, swaps and moves, known words inserted, random
characters (control characters and non-ASCII included), truncation, and
splices of two programs. Every mutant must compile or raise a VgpuError
whose line and column lie inside the text and whose caret display shows that
line. Mutants that do compile run briefly (tiny grid, 2 steps) on both
backends, which must agree: both succeed with the same numbers, or both
raise the same kind of VgpuError.

CI runs a fixed set (seeded); ``python -m benchmarks.reliability --fuzz N``
runs the long version.
"""
from __future__ import annotations

import random
import numpy as np
import pytest

import vgpu
from vgpu_compiler.errors import VgpuError

from strategies import (check_source_error, examples, front_end, fuzz_input, mutate,
                        random_text, run_both)

SEEDS = examples()


_front_end = front_end


def _fail(found: list, kind: str):
    shown = "\n\n".join(f"{src!r}\n  -> {type(e).__name__}: {e}" for src, e in found[:5])
    pytest.fail(f"{len(found)} {kind}; first ones:\n{shown}")


def _sweep(inputs) -> list:
    found = []
    for src in inputs:
        try:
            _front_end(src)
        except Exception as exc:            # noqa: BLE001 - this is what the test hunts
            found.append((src, exc))
    return found


def test_mutated_examples_only_raise_vgpu_errors():
    rng = random.Random(20261130)
    found = _sweep(mutate(rng, rng.choice(SEEDS), SEEDS) for _ in range(2500))
    if found:
        _fail(found, "internal errors")


def test_random_text_only_raises_vgpu_errors():
    rng = random.Random(7)
    found = _sweep(random_text(rng) for _ in range(1500))
    if found:
        _fail(found, "internal errors")


@pytest.mark.parametrize("src", [
    "field f {\x0c state x\n  dx/dt = foo\n  solve euler(dt = 1, steps = 1) }",
    "field f {\r\n state x\r\n  dx/dt = foo\r\n  solve euler(dt = 1, steps = 1) }",
    "field f { state x\n dx/dt = 1 \u2028 + foo\n solve euler(dt = 1, steps = 1) }",
    "field f {\x1c state x\n dx/dt = foo }",
    "field f { state x\x0b\n dx/dt = foo }",
    "\ufeff# BOM\nfield f { state x; dx/dt = foo; solve euler(dt = 1, steps = 1) }",
])
def test_the_caret_display_shows_the_line_of_the_error(src):
    """Found by the fuzzer: line breaks other than '\\n' (form feed, '\\x1c', U+2028 ...)
    are whitespace to the lexer but split lines in str.splitlines(), so the error
    printed the wrong source line above its caret."""
    _front_end(src)


def test_errors_through_the_api_are_vgpu_errors():
    """The same mutants through vgpu.compile / vgpu.run_field (the memoised front end)."""
    rng = random.Random(99)
    found = []
    for _ in range(300):
        src = fuzz_input(rng, SEEDS)
        try:
            vgpu.compile(src)
            vgpu.run_field(src, np.ones((2, 3)), backend="numpy", steps=1)
        except VgpuError as err:
            try:
                check_source_error(err, src)
            except AssertionError as exc:
                found.append((src, exc))
        except Exception as exc:            # noqa: BLE001
            found.append((src, exc))
    if found:
        _fail(found, "internal errors")


# --- mutants that compile run on both backends ----------------------------------------------------
@pytest.mark.parametrize("gpu", ["glsl", "wgpu", "cpu"])
def test_compiled_mutants_run_on_both_backends(gpu, request):
    request.getfixturevalue(gpu)        # fails on CI without it
    rng = random.Random(4242)
    seen, ran, found = set(), 0, []
    for _ in range(3000):
        src = mutate(rng, rng.choice(SEEDS), SEEDS)
        compiled = _front_end(src)
        if compiled is None:
            continue
        key = tuple(compiled.program.fields)        # IR equality: skip comment-only changes
        if key in seen:
            continue
        seen.add(key)
        problem = run_both(src, compiled, gpu=gpu)
        ran += 1
        if problem:
            found.append((src, problem))
        if ran >= 30:
            break
    assert ran >= 20
    if found:
        _fail(found, "backend disagreements")


@pytest.mark.slow
def test_many_mutants_only_raise_vgpu_errors():
    rng = random.Random(1)
    found = _sweep(fuzz_input(rng, SEEDS) for _ in range(30000))
    if found:
        _fail(found, "internal errors")


@pytest.mark.parametrize("src", [
    "# a comment with \x85 in it\nfield f {\n  state x\n  dx/dt = 1 +",
    "# \r old mac line break in a comment\nfield f { state x",
    "field f {\x1c state x; dx/dt = 1 +\n",
    "field f { state x\u2028\n dx/dt = (",
])
def test_the_end_of_the_text_is_inside_the_text(src):
    """Found by the long fuzz run: 'unexpected end of the text' was placed by
    str.splitlines(), which counts \\x85, \\r, \\x1c, U+2028 ... as line breaks, so its
    line was past the last line of the text."""
    _front_end(src)
