"""Several trajectories per invocation (shader/lanes.py, templates/adaptive_lanes.glsl.j2):
the GLSL kernel of a plain adaptive method carrying two trajectories side by side gives
the one-trajectory kernel's numbers bit for bit (states, t, counters, status), whole
or cut into many dispatches, with an odd count (a copy past the end); which kernels
take it (not the one writing save_at states); the emitted text validates and renames
every local."""
from __future__ import annotations

import dataclasses
import re
import subprocess

import numpy as np
import pytest

import vgpu
from vgpu_compiler.backends.glsl import adaptive_run, build, dialect
from vgpu_compiler.backends.glsl.plan import limits
from vgpu_compiler.backends.shader import lanes as L
from vgpu_compiler.runtime import pacing
from vgpu_compiler.frontend.compile import compile_program

LORENZ = """
field lorenz {
    param sigma = 10.0
    param rho = 28.0
    param beta = 8.0 / 3.0
    state x, y, z
    dx/dt = sigma * (y - x)
    dy/dt = x * (rho - z) - y
    dz/dt = x * y - beta * z
    solve METHOD(t1 = 1, rtol = 1e-6, atol = 1e-6)
}
"""

# temporaries (a shared subexpression), t and step in the right-hand side, a helper
TEMPS = """
field temps {
    param mu = 1.0
    state x, y
    dx/dt = y + 0.1 * sin(x * y) * sin(x * y) + 0.01 * t
    dy/dt = mu * (1 - x^2) * y - x + 0.0 * step
    solve dopri5(t1 = 3, rtol = 1e-6, atol = 1e-6)
}
"""


def _lanes(monkeypatch, n: int) -> None:
    """GLSL float32/float64 kernels with ``n`` trajectories per invocation from now on
    (the kernel text depends on it: both caches emptied)."""
    for dt in ("float32", "float64"):
        monkeypatch.setitem(dialect.DIALECTS, dt,
                            dataclasses.replace(dialect.DIALECTS[dt], adaptive_lanes=n))
    vgpu.clear_cache()


def _solve(src, h0, **kw):
    return vgpu.solve(src, h0, backend="glsl", **kw)


def _same(a, b):
    for name in ("states", "t", "steps_taken", "steps_rejected", "status"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    if a.history is not None or b.history is not None:
        np.testing.assert_array_equal(a.history, b.history, err_msg="history")


CASES = [
    ("tsit5", "float32", {}),
    ("dopri5", "float64", {"t0": 0.25, "dt0": 1e-3, "dtmax": 0.05}),
    ("bs3", "float32", {"max_steps": 200}),           # some end with status 2
]


@pytest.mark.filterwarnings("ignore::vgpu.StatusWarning")
@pytest.mark.parametrize("method,dtype,kw", CASES, ids=[c[0] for c in CASES])
def test_two_lanes_give_the_same_numbers(glsl, monkeypatch, method, dtype, kw):
    src = LORENZ.replace("METHOD", method)
    n = 333                                 # odd: the last invocation's second copy idles
    h0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    rho = np.linspace(0.0, 28.0, n)
    args = dict(params={"rho": rho}, dtype=dtype, **kw)
    _lanes(monkeypatch, 1)
    one = _solve(src, h0, **args)
    _lanes(monkeypatch, 2)
    two = _solve(src, h0, **args)
    assert vgpu.cache_stats()["compiles"] >= 1
    _same(one, two)
    assert one.steps_taken.max() > one.steps_taken.min()   # the copies' steps differ
    if "max_steps" in kw:
        assert {0, 2} <= set(one.status.tolist())
    # cut into dispatches of a few attempts each: the same again
    monkeypatch.setattr(adaptive_run, "FIRST_ATTEMPTS", 1)
    monkeypatch.setattr(pacing, "TARGET_SECONDS", 1e-9)
    before = vgpu.cache_stats()["dispatches"]
    with limits(work_per_dispatch=1):                   # (first dispatch: 1 attempt)
        cut = _solve(src, h0, **args)
    assert vgpu.cache_stats()["dispatches"] - before > 10
    _same(one, cut)


def test_temporaries_time_and_step_are_renamed(glsl, monkeypatch):
    n = 101
    h0 = np.column_stack([np.linspace(0.5, 2.0, n), np.zeros(n)])
    mu = np.linspace(0.1, 5.0, n)
    _lanes(monkeypatch, 1)
    one = _solve(TEMPS, h0, params={"mu": mu}, dtype="float32")
    _lanes(monkeypatch, 2)
    two = _solve(TEMPS, h0, params={"mu": mu}, dtype="float32")
    _same(one, two)
    ref = vgpu.solve(TEMPS, h0, params={"mu": mu}, backend="numpy", dtype="float32")
    np.testing.assert_allclose(two.states, ref.states, rtol=1e-3, atol=1e-3)


def _meta_lanes(src, pt=()):
    text, kernel = build(compile_program(src).select(None), dtype="float32",
                         per_trajectory_params=pt)
    return text, kernel.meta()["lanes"]


def test_which_kernels_carry_two(glsl):
    plain = LORENZ.replace("METHOD", "tsit5")
    assert _meta_lanes(plain)[1] == 2
    assert _meta_lanes(plain, ("rho",))[1] == 2
    events = plain.replace("    solve", "    when x > 5 { x = 0 }\n    solve")
    assert _meta_lanes(events)[1] == 1                      # events: the general kernel
    fixed = LORENZ.replace("METHOD(t1 = 1, rtol = 1e-6, atol = 1e-6)", "rk4(dt = 0.01, steps = 10)")
    assert _meta_lanes(fixed)[1] == 1                       # a fixed-step method's field
    flux = plain.replace("field lorenz {", "field lorenz {\n    output tot[1]").replace(
        "    solve", "    flux tot[0] += x\n    solve")
    assert _meta_lanes(flux)[1] == 1                        # flux: an effect
    from vgpu_compiler.backends.shader.adaptive_host import dense_variant
    field = dense_variant(compile_program(plain).select(None))    # save_at, a Simulation
    assert build(field, dtype="float32")[1].meta()["lanes"] == 1


def test_every_local_is_renamed(glsl):
    for src in (LORENZ.replace("METHOD", "tsit5"), TEMPS):
        text, lanes = _meta_lanes(src)
        assert lanes == 2
        body = text[text.index("void main()"):]
        declared = re.findall(r"^\s*(?:precise\s+)?(?:float|double|int|uint|bool)\s+(\w+)\s*[=;]",
                              body, re.M)
        shared = {"vg_base", "vg_a"}                       # the invocation's own
        stray = sorted({d for d in declared if d not in shared and not re.search(r"_[01]$", d)})
        assert not stray, stray


def test_the_text_validates(glsl, validator, tmp_path):
    for src in (LORENZ.replace("METHOD", "tsit5"), TEMPS):
        path = tmp_path / "k.comp"
        path.write_text(_meta_lanes(src)[0])
        out = subprocess.run([validator, str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_rename_leaves_comments_members_and_other_names():
    names = frozenset({"s_x", "v", "e"})
    text = "e = b_state.v[0] + s_x * vg_root(s_xs, 5);  // e and s_x here stay\nv = e;"
    assert L.rename(text, 1, names) == (
        "e_1 = b_state.v[0] + s_x_1 * vg_root(s_xs, 5);  // e and s_x here stay\nv_1 = e_1;")
