"""The Test Set problems of the digit benchmarks (benchmarks/stiff_digits.py,
benchmarks/nonstiff_digits.py) are the problems they name: each field against its
independent scipy right-hand side or the Test Set's reference solution."""
from __future__ import annotations

import re
import warnings

import numpy as np
from scipy.integrate import solve_ivp

import vgpu
from benchmarks import nonstiff_digits as ns
from benchmarks import stiff_digits as sd


def test_pleiades_field_takes_scipys_dop853_steps():
    """The generated 28-state Pleiades field (21 pair lets) with dop853 against scipy's
    DOP853 on the hand-vectorised right-hand side: the same steps, the same answer."""
    src = ns.pleiades_source().replace("METHOD", "dop853")
    sol = vgpu.solve(src, backend="numpy", dtype="float64", dims={"N": 1}, rtol=1e-8,
                     atol=1e-8)
    ref = solve_ivp(ns._pleiades, (0, 3), ns._pleiades_y0(), method="DOP853", rtol=1e-8,
                    atol=1e-8)
    assert sol.steps_taken[0] == len(ref.t) - 1
    np.testing.assert_allclose(sol.states[0], ref.y[:, -1], rtol=1e-11, atol=1e-11)


def test_arenstorf_scd_uses_the_periodic_orbit():
    """One period of the Arenstorf orbit returns to its start: scipy's DOP853 at 1e-12
    scores about 9 digits against it (the reference is exact)."""
    probs = ns.problems()
    src, rhs, span, y0, ref = probs["Arenstorf"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = solve_ivp(rhs, span, y0, method="DOP853", rtol=1e-12, atol=1e-12).y[:, -1]
    assert 8 < ns.scd(got, ref) < 11


def test_hires_and_orego_fields_reach_the_test_sets_reference():
    """rodas5p at rtol = atol = 1e-6 on the HIRES and OREGO fields: as many digits
    against the Test Set's reference as scipy's Radau on the independent right-hand
    sides gets, within 1.5 (measured: 3.9 and 6.1 against Radau's 4.8 and 7.2)."""
    for prob in ("HIRES", "OREGO"):
        source, rhs, span, y0, _ = sd.PROBLEMS[prob]
        truth = np.array(sd.REFS[prob])
        sol = vgpu.solve(source().replace("rodas4(", "rodas5p("), backend="numpy",
                         dtype="float64", dims={"N": 1}, rtol=1e-6, atol=1e-6)
        radau = solve_ivp(rhs, span, y0, method="Radau", rtol=1e-6, atol=1e-6)
        mine, theirs = sd.digits(sol.states[0], truth), sd.digits(radau.y[:, -1], truth)
        assert mine > 3.5 and mine > theirs - 1.5, (prob, mine, theirs)


def _pleiades_field(method):
    return vgpu.compile(ns.pleiades_source().replace("METHOD", method)).select(None)


def test_pleiades_c_stages_load_only_the_k_they_read():
    """Each stage of the C kernel loads from the lane arrays only the other stages' k
    that it reads (its combinations y = s + dt * (...)), so the text grows with the
    tableau's entries, not with stages x stages x states: every k a stage block loads
    is named again in that block, and Pleiades with dopri5 is within the cpu limit."""
    from vgpu_compiler.backends.cpu import kernel
    text = kernel.source(_pleiades_field("dopri5"), "float64")[0]
    assert len(text) < kernel.MAX_SOURCE
    lines, blocks = text.splitlines(), 0
    for i, line in enumerate(lines):
        if "{  // stage " not in line:
            continue
        depth, j = 0, i
        while True:          # the stage's block: to its matching brace
            depth += lines[j].count("{") - lines[j].count("}")
            if depth == 0:
                break
            j += 1
        block = "\n".join(lines[i:j + 1])
        loads = re.findall(r"const double (k\d+_\w+) = A_\1\[l\];", block)
        unread = [k for k in loads if len(re.findall(rf"\b{k}\b", block)) < 2]
        assert not unread, (line.strip(), unread)
        blocks += 1
    assert blocks >= 7      # dopri5's stages, at least once each


def test_pleiades_dopri5_on_cpu_agrees_with_scipy(cpu):
    """Pleiades (28 states, 21 pair lets) with dopri5 on the cpu backend at rtol = atol
    = 1e-8: the numpy reference's steps and numbers, about scipy's RK45 (the same
    tableau) in steps, and as many correct digits against scipy's DOP853 at 2.3e-14."""
    src = ns.pleiades_source().replace("METHOD", "dopri5")
    kw = dict(dtype="float64", dims={"N": 1}, rtol=1e-8, atol=1e-8)
    got = vgpu.solve(src, backend="cpu", **kw)
    ref = vgpu.solve(src, backend="numpy", **kw)
    assert got.status[0] == 0 and got.steps_taken[0] == ref.steps_taken[0]
    np.testing.assert_allclose(got.states[0], ref.states[0], rtol=1e-10, atol=1e-10)
    y0 = ns._pleiades_y0()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        truth = solve_ivp(ns._pleiades, (0, 3), y0, method="DOP853", rtol=2.3e-14,
                          atol=2.3e-14).y[:, -1]
        rk45 = solve_ivp(ns._pleiades, (0, 3), y0, method="RK45", rtol=1e-8, atol=1e-8)
    assert abs(int(got.steps_taken[0]) - (len(rk45.t) - 1)) <= 0.02 * len(rk45.t)
    mine, theirs = ns.scd(got.states[0], truth), ns.scd(rk45.y[:, -1], truth)
    assert mine > 5 and mine > theirs - 0.2, (mine, theirs)     # measured: 5.34, 5.33
