"""codegen/build/helpers.py: the math helpers written once as IR.

Each is defined in no template (the templates insert its printed text), the same
algorithm prints with one skeleton in every dialect, and the printed C gives Python's
int // and % and numpy's float // and % and x ** n bit for bit (the shaders' numbers are
the conformance tests': test_glsl_ieee, test_glsl_accuracy, test_wgsl, test_cpu_math).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_codegen_printer import skeleton
from vgpu_compiler.codegen.build import cmath as CM
from vgpu_compiler.codegen.build import helpers as H
from vgpu_compiler.codegen.targets import TARGETS

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_no_template_defines_a_built_helper():
    for path in TEMPLATES.glob("helpers.*.j2"):
        text = path.read_text()
        built = {**H.BUILDERS, **({} if path.name == "helpers.c.j2" else H.TWINS)}
        for name in built:          # (C's float functions are libm's)
            assert not re.search(rf"^\S[^\n]*\b{name}\(", text, re.M), (path.name, name)


def test_cs_inline_math_is_built_and_forced_inline():
    """codegen/build/cmath.py: helpers.c.j2 writes none of it (only the library wrappers
    under the same names), and the inline math prints always_inline (the lane loops
    vectorise through it), the float32-only ones in float32 in either dtype."""
    text = (TEMPLATES / "helpers.c.j2").read_text()
    for dtype in ("float32", "float64"):
        built = H.printed(TARGETS["c"][dtype])
        for key, build in CM.BUILDERS.items():
            name = build(TARGETS["c"][dtype]).name
            assert not re.search(rf"always_inline\)\) \w+ {name}\(", text), name
            head = built[key].split("\n")[1 if built[key].startswith("//") else 0]
            forced = head.startswith("static inline __attribute__((always_inline)) ")
            assert forced == (key not in ("vg_sign", "vg_toint", "vg_pow")), head
            if key in CM.FLOAT32:
                assert "double" not in head.split("(")[2] or key == "vg_pow2d", head
                assert built[key] == H.printed(TARGETS["c"]["float32"])[key]
    assert "VG_FMAF(kf, " in H.printed(TARGETS["c"]["float32"])["vg_exp"]


@pytest.mark.parametrize("name", sorted(H.BUILDERS))
def test_one_skeleton_in_every_dialect(name):
    """The same statements in GLSL (both dtypes), WGSL and C, but for what a target has:
    C's unrolled steps of a literal exponent, WGSL's tests by the bits."""
    texts = {(lang, dt): H.printed(t, [name])[name] for lang, ds in TARGETS.items()
             for dt, t in ds.items()}
    assert skeleton(texts["glsl", "float32"]) == skeleton(texts["glsl", "float64"]) or \
        name == "vg_powi"           # (float32 rounds a huge exponent to 24 bits first)
    if name not in ("vg_powi", "vg_floordiv", "vg_fmod"):
        assert skeleton(texts["glsl", "float32"]) == skeleton(texts["wgsl", "float32"]) \
            == skeleton(texts["c", "float32"])


@pytest.mark.parametrize("name", sorted(H.TWINS))
def test_the_float32_twins_are_one(name):
    glsl, wgsl = (H.printed(TARGETS[lang]["float32"], [name])[name]
                  for lang in ("glsl", "wgsl"))
    assert skeleton(glsl) == skeleton(wgsl) or name == "vg_pow"   # (no f64: vg_powi for
    assert H.printed(TARGETS["glsl"]["float64"], [name])[name] == glsl     # small integral y)


PROGRAM = """#include <math.h>
#include <stdbool.h>
#include <stdio.h>
static unsigned fails;
static void vg_fail(unsigned id, int a, int b, int c) {{ fails += id + a + b + c; }}
static inline {F} vg_nan(void) {{ return ({F})NAN; }}
static inline {F} vg_floor({F} x) {{ return floor(x); }}
{text}
int main(void) {{
    int a, b; double x, y;
    while (scanf("%d %d %lf %lf", &a, &b, &x, &y) == 4) {{
        int q = vg_ifloordiv(a, b, 1u), r = vg_imod(a, b, 1u);
        printf("%d %d %a %a %a %u\\n", q, r, (double)vg_floordiv(({F})x, ({F})y),
               (double)vg_fmod(({F})x, ({F})y), (double)vg_powi(({F})x, b), fails);
    }}
    return 0;
}}
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_printed_c_gives_pythons_and_numpys_numbers(dtype, cpu, tmp_path):
    from vgpu_compiler.backends.cpu import toolchain
    t = TARGETS["c"][dtype]
    text = "\n".join(H.printed(t)[n] for n in
                     ("vg_powi", "vg_floordiv", "vg_fmod", "vg_ifloordiv", "vg_imod"))
    src = tmp_path / "h.c"
    src.write_text(PROGRAM.format(F=t.F, text=text))
    exe = tmp_path / "h"
    build = subprocess.run([toolchain.compiler(), "-O2", "-fwrapv", "-ffp-contract=off",
                            "-Wall", "-Werror", "-o", str(exe), str(src), "-lm"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    ints = [(7, 2), (-7, 2), (7, -2), (-7, -2), (5, -1), (-2**31, -1), (3, 0), (0, 5),
            (-2**31, 3), (2**31 - 1, -7)]
    floats = [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (1.0, 0.0), (-0.0, 3.0), (0.0, -3.0),
              (1e30, 3.0), (np.inf, 2.0), (2.0, np.inf), (np.nan, 1.0), (1.1, 0.1)]
    rows = [(a, b, x, y) for (a, b), (x, y) in zip(ints * 2, floats + floats[::-1])]
    run = subprocess.run([str(exe)], capture_output=True, text=True,
                         input="\n".join(f"{a} {b} {x!r} {y!r}" for a, b, x, y in rows))
    d = np.dtype(dtype).type
    fails = 0
    for (a, b, x, y), line in zip(rows, run.stdout.splitlines()):
        q, r, fd, fm, pw, nfail = line.split()
        if b == 0:
            fails += 2          # (one report each of // and %)
            assert (int(q), int(r)) == (0, 0)
        else:
            want_q = np.int32(a) // np.int32(b) if (a, b) != (-2**31, -1) else -2**31
            assert (int(q), int(r)) == (int(want_q), int(np.int32(a) % np.int32(b)))
        assert int(nfail) == fails
        with np.errstate(all="ignore"):
            for got, want in ((fd, np.floor_divide(d(x), d(y))),
                              (fm, np.remainder(d(x), d(y))),
                              (pw, np.power(np.float64(d(x)), b) if b >= 0 else
                               1.0 / np.power(np.float64(d(x)), -b))):
                got = d(float.fromhex(got))
                assert np.isnan(got) == np.isnan(d(want)), (x, y, b)
                if not np.isnan(got):
                    assert got.tobytes() == d(want).tobytes(), (x, y, b, got, want)
