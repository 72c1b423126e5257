"""Deep and wide expressions, long let chains and fields with many states (issue 19,
items 6 and 14).

Every case either runs on numpy AND on GLSL with equal results, or fails with a
located ``VgpuError``; never a RecursionError, never a crash. The front end, the
passes and the GLSL printer walk expressions on explicit stacks; the GLSL printer
cuts deep nesting into temporaries (``render.MAX_NEST``) and refuses, with a
BackendError at the expression, nesting it cannot cut past ``render.MAX_DEPTH``.
The deepest cases run in a child interpreter with a timeout, so that a crash in a
driver cannot take pytest down.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vgpu
from vgpu_compiler import pipeline
from vgpu_compiler.backends.glsl import MAX_STATES, build, emit_glsl
from vgpu_compiler.backends.glsl.render import MAX_DEPTH, MAX_NEST
from vgpu_compiler.frontend.compile import compile_program
from vgpu_compiler.errors import BackendError, VgpuError
from vgpu_compiler.ir.dump import dump

ROOT = Path(__file__).resolve().parents[2]
DT = 0.01


def field(deriv: str, lets: str = "", extra: str = "", steps: int = 3) -> str:
    return (f"field f {{\n input w[N]\n state x\n{lets}{extra} dx/dt = {deriv}\n"
            f" solve euler(dt = {DT}, steps = {steps})\n}}\n")


def lets_chain(n: int, reverse: bool) -> str:
    """``a{k} = a{k-1} + 0.001`` for k < n; declared last-first when ``reverse``."""
    lines = [" let a0 = x\n"] + [f" let a{k} = a{k - 1} + 0.001\n" for k in range(1, n)]
    return "".join(reversed(lines) if reverse else lines)


# name -> source; scale 10 gives parentheses 1000 deep, sums of 2000 terms ...
def cases(scale: int = 1) -> dict:
    n_par, n_sum, n_call = 100 * scale, 200 * scale, 100 * scale
    return {
        f"parens{n_par}": field("(" * n_par + "x" + " * 0.5 + 0.25)" * n_par),
        f"sum{n_sum}": field(" + ".join(["x"] * n_sum) + " * 0.001"),
        f"calls{n_call}": field("sin(" * n_call + "x" + ")" * n_call),
        f"where{n_call}": field("where(x > 0, " * n_call + "x" + ", 1.0)" * n_call),
        f"neg{n_call}": field("-" * n_call + "x"),
        f"not{n_call}": field("where(" + "not " * n_call + "x > 1, 1.0, 2.0)"),
        f"max{n_call}": field("max(" * n_call + "x" + ", 0.9 - 0.001 * x)" * n_call),
        f"lets{n_sum}": field(f"a{n_sum - 1}", lets_chain(n_sum, False)),
        f"revlets{n_sum}": field(f"a{n_sum - 1}", lets_chain(n_sum, True)),
        f"index{n_sum}": field("w[(" + " + ".join(["i"] * n_sum) + ") % N]"),
        f"and{n_sum}": field("where(" + " and ".join(f"x > -{k}" for k in range(n_sum))
                          + ", 1.0, 2.0)"),
    }


def call(src: str, backend: str):
    h0 = np.linspace(0.5, 1.5, 8, dtype=np.float32)
    w = np.linspace(-1.0, 1.0, 8, dtype=np.float32)         # w[N]: N is the grid's extent
    return vgpu.run_field(src, h0, inputs={"w": w}, backend=backend)


# --- the front end and numpy, against values worked out here ----------------------------
def _euler(f):
    """Three euler steps of dx/dt = f(x) from call()'s h0, in float32."""
    x = np.linspace(0.5, 1.5, 8).astype(np.float32)
    for _ in range(3):
        x = (x + np.float32(DT) * f(x)).astype(np.float32)
    return x


@pytest.mark.parametrize("n", [200, 400, 2000])
def test_a_flat_sum_runs_on_numpy(n):
    src = field(" + ".join(["x"] * n))
    got = call(src, "numpy")
    np.testing.assert_allclose(got, _euler(lambda x: n * x), rtol=1e-4)


@pytest.mark.parametrize("n", [100, 300, 1000])
def test_deep_parentheses_run_on_numpy(n):
    src = field("(" * n + "x" + " * 0.5)" * n)          # x * 0.5^n: 0 for n >= 300
    got = call(src, "numpy")
    expect = _euler(lambda x: (x.astype(np.float64) * 0.5 ** n).astype(np.float32))
    np.testing.assert_allclose(got, expect, rtol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_long_let_chain_runs_on_numpy(reverse):
    n = 2000
    got = call(field(f"a{n - 1}", lets_chain(n, reverse)), "numpy")
    expect = _euler(lambda x: x + np.float32(0.001 * (n - 1)))
    np.testing.assert_allclose(got, expect, rtol=1e-4)


def test_errors_deep_inside_are_found_at_their_place():
    depth = 1500
    src = field("(" * depth + "x + nope" + ")" * depth)
    with pytest.raises(VgpuError) as info:
        compile_program(src)
    assert "unknown name `nope`" in info.value.message
    assert (info.value.line, info.value.column) == (4, 14 + depth)
    src = field(" + ".join(["x"] * 1000) + " + (x > 1)")
    with pytest.raises(VgpuError, match="condition") as info:
        compile_program(src)
    assert info.value.line == 4


def test_the_ir_of_a_deep_field_dumps_and_folds():
    n = 3000
    folded = dump(compile_program(field(" + ".join(["1"] * n) + " + x")).select())
    assert "    dx/dt = (3000.0 + x)\n" in folded
    text = dump(compile_program(field(" + ".join(["x"] * n))).select())
    assert "    dx/dt = " + "(" * (n - 1) + "x" + " + x)" * (n - 1) + "\n" in text


# --- the GLSL printer, without a driver ---------------------------------------------------
def _nesting(text: str) -> int:
    """The deepest parenthesis nesting of GLSL code (comments, which quote the source, aside)."""
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    depth = most = 0
    for ch in code:
        depth += ch == "("
        depth -= ch == ")"
        most = max(most, depth)
    return most


@pytest.mark.parametrize("name", list(cases(10)))
def test_printed_glsl_stays_shallow(name):
    src = cases(10)[name]
    text = emit_glsl(compile_program(src).select(), source=src)
    assert _nesting(text) <= 3 * MAX_NEST + 10


def test_deep_printed_glsl_validates(tmp_path, validator):
    exe = validator
    src = cases(10)["sum2000"]
    path = tmp_path / "deep.comp"
    path.write_text(emit_glsl(compile_program(src).select(), source=src))
    run = subprocess.run([exe, "-S", "comp", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


UNCUTTABLE = field("where(x > 0, " * (MAX_DEPTH + 20) + "w[0]" + ", w[1] + x)" * (MAX_DEPTH + 20))
# a coupled value is printed whole (no temporaries before it in the kernel's layout)
DEEP_COUPLED = ("field f {\n input w[N]\n state x\n basin l < 4\n coupled s = "
                + " + ".join(["x"] * (MAX_DEPTH + 50)) + "\n dx/dt = sum(s) * 0.0001 - x\n"
                " solve euler(dt = 0.01, steps = 3)\n}\n")
DEEP_START = ("field f {\n input w[N]\n state y, x = " + " + ".join(["y"] * (MAX_DEPTH + 50))
              + "\n dy/dt = 0.0\n dx/dt = -x\n solve euler(dt = 0.01, steps = 3)\n}\n")
REFUSED = {"where": (UNCUTTABLE, 4), "coupled": (DEEP_COUPLED, 5), "start": (DEEP_START, 3)}


@pytest.mark.parametrize("name", list(REFUSED))
def test_nesting_that_cannot_be_cut_is_a_located_backend_error(name):
    # input reads inside `where` branches cannot move out of them: no temporaries
    src, line = REFUSED[name]
    with pytest.raises(BackendError, match=f"more than {MAX_DEPTH} levels") as info:
        emit_glsl(compile_program(src).select())
    assert info.value.line == line and info.value.column > 10


# --- end to end: GLSL against numpy ---------------------------------------------------------
@pytest.mark.parametrize("name", list(cases(1)) + ["parens300", "sum400", "calls300",
                                                   "where300", "revlets400"])
def test_deep_programs_agree_on_both_backends(name, glsl):
    all_cases = {**cases(1), **cases(3), **cases(2)}
    src = all_cases[name]
    want = call(src, "numpy")
    np.testing.assert_allclose(call(src, "glsl"), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(call(src, "auto"), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(REFUSED))
def test_auto_runs_uncuttable_nesting_on_numpy_with_one_warning(name, glsl,
                                                                monkeypatch, caplog):
    src, line = REFUSED[name]
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())
    want = call(src, "numpy")
    with pytest.raises(BackendError, match="numpy") as info:
        call(src, "glsl")
    assert info.value.line == line and "^" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        for _ in range(2):
            np.testing.assert_array_equal(call(src, "auto"), want)
    # one warning for each compiled backend that refuses it (the printer is theirs alike)
    from vgpu_compiler import backends as registry
    refusing = [b for b in registry.auto_order() if b.name != "numpy" and b.available()[0]]
    assert len([r for r in caplog.records if r.name == "vgpu"]) == len(refusing)


DEEPEST = """
import json, sys
sys.path.insert(0, "tests/frontend")
import numpy as np
import test_deep_programs as t
out = {}
for name, src in t.cases(10).items():
    try:
        want = t.call(src, "numpy")
        got = {b: t.call(src, b) for b in ("glsl", "auto")}
        out[name] = all(bool(np.allclose(g, want, rtol=1e-4, atol=1e-6)) for g in got.values())
    except t.VgpuError as e:
        out[name] = f"{type(e).__name__} at {e.line}:{e.column}: {e.message}"
print(json.dumps(out))
"""

def test_the_deepest_programs_in_a_child_process(glsl, tmp_path):
    """Parentheses 1000 deep, sums of 2000 terms, 1000 nested calls and where()s, let
    chains of 2000 both ways: every one agrees on numpy, glsl and auto."""
    code = DEEPEST
    env = dict(os.environ, PYTHONPATH=str(ROOT), VGPU_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=540,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {name: True for name in cases(10)}, out


# --- many states (item 14) --------------------------------------------------------------------
def chain(n: int) -> str:
    """dx_k/dt = x_{k-1} - x_k: every state live across the step loop."""
    lines = ["field chain {", " state " + ", ".join(f"x{k}" for k in range(n)), " dx0/dt = -x0"]
    lines += [f" dx{k}/dt = x{k - 1} - x{k}" for k in range(1, n)]
    return "\n".join(lines + [" solve rk4(dt = 0.01, steps = 4)", "}"]) + "\n"


def test_lowering_takes_a_large_field():
    text = emit_glsl(compile_program(chain(2000)).select())
    assert "k3_x1999 = y_x1998 - y_x1999;" in text


def test_a_field_past_the_state_limit_is_refused_and_auto_uses_numpy(glsl, monkeypatch,
                                                                        caplog):
    n = 1000
    assert n > MAX_STATES
    src = chain(n)
    with pytest.raises(BackendError, match=f"at most {MAX_STATES}") as info:
        build(compile_program(src).select())
    assert "numpy" in info.value.message and info.value.line == 1
    h0 = np.random.default_rng(14).uniform(size=(4, n)).astype(np.float32)
    want = vgpu.run_field(src, h0, backend="numpy")
    with pytest.raises(BackendError, match=f"{n} states"):
        vgpu.run_field(src, h0, backend="glsl")
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())
    with caplog.at_level(logging.WARNING, logger="vgpu"):
        for _ in range(2):
            np.testing.assert_array_equal(vgpu.run_field(src, h0), want)
    # one warning for each compiled backend that refuses it (cpu: at most 256 states too)
    from vgpu_compiler import backends as registry
    refusing = [b for b in registry.auto_order() if b.name != "numpy" and b.available()[0]]
    assert len([r for r in caplog.records if r.name == "vgpu"]) == len(refusing)


def test_the_state_limit_can_be_set(glsl, monkeypatch, fresh_cache):
    monkeypatch.setenv("VGPU_GLSL_MAX_STATES", "6")
    h0 = np.random.default_rng(6).uniform(size=(3, 6)).astype(np.float32)
    np.testing.assert_allclose(vgpu.run_field(chain(6), h0, backend="glsl"),
                               vgpu.run_field(chain(6), h0, backend="numpy"), rtol=1e-5)
    with pytest.raises(BackendError, match="at most 6"):
        vgpu.run_field(chain(7), np.ones((3, 7), np.float32), backend="glsl")


@pytest.mark.parametrize("value", ["many", "0", "-3"])
def test_a_bad_state_limit_is_a_backend_error(glsl, monkeypatch, fresh_cache, value):
    monkeypatch.setenv("VGPU_GLSL_MAX_STATES", value)
    with pytest.raises(BackendError, match="VGPU_GLSL_MAX_STATES"):
        vgpu.run_field(chain(2), np.ones((3, 2), np.float32), backend="glsl")


def test_a_deep_exponent_runs_on_every_backend(glsl, monkeypatch):
    # -0.0 is never folded, so this exponent stays a chain of 2000 negations, which
    # the printer's `^` rule (render._integer_exponent) follows without recursion
    src = field("x ^ (" + "-" * 2000 + "0.0)")
    want = call(src, "numpy")
    np.testing.assert_array_equal(want, _euler(lambda x: np.ones_like(x)))
    np.testing.assert_array_equal(call(src, "glsl"), want)
    monkeypatch.setattr(pipeline, "_fallback_reasons", set())
    np.testing.assert_array_equal(call(src, "auto"), want)


def mean_field(n: int) -> str:
    """Every derivative reads one let that sums every state (coupling between all)."""
    lines = ["field mean {", " state " + ", ".join(f"x{k}" for k in range(n)),
             " let m = (" + " + ".join(f"x{k}" for k in range(n)) + f") / {n}"]
    lines += [f" dx{k}/dt = m - x{k} + 0.1 * x{(7 * k + 3) % n}" for k in range(n)]
    return "\n".join(lines + [" solve rk4(dt = 0.01, steps = 4)", "}"]) + "\n"


def test_lowering_walks_a_shared_let_once_per_block(monkeypatch):
    # was once per derivative per block: quadratic (2000 states: 55 s, now 2 s)
    lowering = importlib.import_module("vgpu_compiler.backends.glsl.lower")
    visits, real = [0], lowering._walk

    def counting(roots):
        for x in real(roots):
            visits[0] += 1
            yield x

    monkeypatch.setattr(lowering, "_walk", counting)
    f = compile_program(mean_field(400)).select()
    emit_glsl(f)
    nodes, stack = set(), list(f.derivs)
    while stack:
        e = stack.pop()
        if id(e) not in nodes:
            nodes.add(id(e))
            stack.extend(getattr(e, "args", ()) + getattr(e, "index", ()))
    assert 0 < visits[0] <= 12 * len(nodes)


def test_a_mean_coupled_field_agrees_on_both_backends(glsl, fresh_cache):
    src = mean_field(40)
    h0 = np.random.default_rng(40).uniform(size=(5, 40)).astype(np.float32)
    np.testing.assert_allclose(vgpu.run_field(src, h0, backend="glsl"),
                               vgpu.run_field(src, h0, backend="numpy"), rtol=1e-5, atol=1e-6)


def test_a_long_chain_of_param_defaults(glsl):
    """3,000 params, each defaulting to the next plus one, declared first to last: the
    checker's cycle search and the call's default evaluation walk them on a stack."""
    n = 3000
    decls = "\n".join(f" param p{k} = p{k + 1} + 1" for k in range(n)) + f"\n param p{n} = 1"
    src = f"field f {{\n{decls}\n state x\n dx/dt = p0\n solve euler(dt = 1, steps = 1)\n}}"
    for backend in ("numpy", "glsl"):
        np.testing.assert_array_equal(vgpu.run_field(src, np.zeros(2), backend=backend),
                                      np.full(2, n + 1.0, np.float32))
    # given in the call, p{n} changes every default above it
    out = vgpu.run_field(src, np.zeros(2), params={f"p{n}": 5.0}, backend="numpy")
    np.testing.assert_array_equal(out, np.full(2, n + 5.0, np.float32))
