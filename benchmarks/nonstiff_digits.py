"""Significant correct digits of dop853, vern7 and vern9 beside scipy's DOP853 on two
non-stiff problems (issue 31), float64, one trajectory each:

- Arenstorf: the restricted three-body orbit (Hairer, Norsett & Wanner I, II.0) over one
  period T = 17.0652165601579625588917206249; the orbit is periodic, so the reference at
  T is the initial state (exact, not computed);
- Pleiades: seven bodies in the plane, masses 1..7, to t = 3 (the Test Set for IVP
  Solvers' PLEI, Mazzia & Magherini; HNW I, II.10), 28 states, the 21 pairwise distances
  as lets. Reference: scipy DOP853 at rtol = atol = 2.3e-14 (scipy's floor, 100 eps),
  checked against scipy Radau at 1e-13 when --check is given.

"digits" (scd) is -log10 of the largest error of a final component, relative where the
reference is away from zero: max_i |y_i - ref_i| / max(|ref_i|, 1) (Arenstorf's y and
y' are 0 at T; Pleiades' components are O(1)). Tolerances rtol = atol = 1e-6 ... 1e-12.
The VGPU columns run on the numpy reference (the compiled backends take the same steps
in float64: tests/conformance/test_more_explicit_methods.py). With --kernel, Pleiades' kernel size
and its first call's time (the compile) on cpu and glsl, per method, each in a fresh
process and cache folder.

    python -m benchmarks.nonstiff_digits [--backend numpy] [--json out.json] [--kernel]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

import numpy as np

from .tight import PERIOD, SRC as ARENSTORF_SRC, VY0, _f as _arenstorf

METHODS = ("dop853", "vern7", "vern9")
TOLS = (1e-6, 1e-8, 1e-10, 1e-12)
BODIES = 7
PLEI_X = (3, 3, -1, -3, 2, -2, 2)
PLEI_Y = (3, -3, 2, 0, 0, -4, 4)
PLEI_U = (0, 0, 0, 0, 0, 1.75, -1.5)
PLEI_V = (0, 0, 0, -1.25, 1, 0, 0)


def pleiades_source() -> str:
    """The Pleiades as a field: x_i, y_i, u_i = x_i', v_i = y_i'; one let per pair."""
    n = range(1, BODIES + 1)
    starts = [f"x{i} = {PLEI_X[i - 1]}, y{i} = {PLEI_Y[i - 1]}, u{i} = {PLEI_U[i - 1]}, "
              f"v{i} = {PLEI_V[i - 1]}" for i in n]
    lines = ["field pleiades {"] + [f"    state {s}" for s in starts]
    for i in n:
        for j in n:
            if i < j:
                lines.append(f"    let q{i}_{j} = (x{i} - x{j}) * (x{i} - x{j}) + "
                             f"(y{i} - y{j}) * (y{i} - y{j})")
                lines.append(f"    let r{i}_{j} = q{i}_{j} * sqrt(q{i}_{j})")
    for i in n:
        fx = " + ".join(f"{j} * (x{j} - x{i}) / r{min(i, j)}_{max(i, j)}" for j in n if j != i)
        fy = " + ".join(f"{j} * (y{j} - y{i}) / r{min(i, j)}_{max(i, j)}" for j in n if j != i)
        lines += [f"    dx{i}/dt = u{i}", f"    dy{i}/dt = v{i}",
                  f"    du{i}/dt = {fx}", f"    dv{i}/dt = {fy}"]
    lines += ["    solve METHOD(t1 = 3, rtol = 1e-6, atol = 1e-6)", "}"]
    return "\n".join(lines)


def _pleiades(t, s):
    x, y = s[0::4], s[1::4]
    m = np.arange(1, BODIES + 1)
    dx, dy = x[None, :] - x[:, None], y[None, :] - y[:, None]
    r3 = (dx * dx + dy * dy) ** 1.5
    np.fill_diagonal(r3, np.inf)
    out = np.empty(4 * BODIES)
    out[0::4], out[1::4] = s[2::4], s[3::4]
    out[2::4], out[3::4] = (m * dx / r3).sum(1), (m * dy / r3).sum(1)
    return out


def _pleiades_y0():
    return np.array([v for i in range(BODIES)
                     for v in (PLEI_X[i], PLEI_Y[i], PLEI_U[i], PLEI_V[i])], float)


def scd(got, ref) -> float:
    return float(-np.log10(np.max(np.abs(np.asarray(got) - ref)
                                  / np.maximum(np.abs(ref), 1.0))))


def problems(check: bool = False) -> dict:
    from scipy.integrate import solve_ivp
    y0 = _pleiades_y0()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = solve_ivp(_pleiades, (0, 3), y0, method="DOP853", rtol=2.3e-14,
                        atol=2.3e-14).y[:, -1]
        if check:
            other = solve_ivp(_pleiades, (0, 3), y0, method="Radau", rtol=1e-13,
                              atol=1e-13).y[:, -1]
            print(f"Pleiades reference: DOP853 2.3e-14 and Radau 1e-13 agree to "
                  f"{scd(other, ref):.2f} digits")
    arenstorf0 = np.array([0.994, 0.0, 0.0, VY0])
    return {  # name: (source with METHOD, rhs, span, y0, reference at the end)
        "Arenstorf": (ARENSTORF_SRC, _arenstorf, (0.0, PERIOD), arenstorf0, arenstorf0),
        "Pleiades": (pleiades_source(), _pleiades, (0.0, 3.0), y0, ref),
    }


def measure(backend: str = "numpy", check: bool = False) -> list[dict]:
    import vgpu
    from scipy.integrate import solve_ivp
    rows = []
    for prob, (src, rhs, span, y0, ref) in problems(check).items():
        for rtol in TOLS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sp = solve_ivp(rhs, span, y0, method="DOP853", rtol=rtol, atol=rtol)
            row = dict(problem=prob, rtol=rtol, scipy_steps=len(sp.t) - 1,
                       scipy_digits=scd(sp.y[:, -1], ref))
            for name in METHODS:
                sol = vgpu.solve(src.replace("METHOD", name), backend=backend,
                                 dtype="float64", dims={"N": 1}, rtol=rtol, atol=rtol)
                assert int(sol.status[0]) == 0, (prob, name, rtol, sol.status)
                row[f"{name}_steps"] = int(sol.steps_taken[0])
                row[f"{name}_digits"] = scd(sol.states[0], ref)
            rows.append(row)
            print("| " + " | ".join([prob, f"{rtol:.0e}"] + [
                f"{row[f'{m}_steps']} / {row[f'{m}_digits']:.2f}" for m in METHODS] + [
                f"{row['scipy_steps']} / {row['scipy_digits']:.2f}"]) + " |", flush=True)
    return rows


_FIRST_CALL = """
import sys, time, warnings
import vgpu
src = open(sys.argv[1]).read()
began = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        vgpu.solve(src, backend=sys.argv[2], dtype="float64", dims={"N": 1})
    except vgpu.VgpuError as exc:
        print("refused:", str(exc).splitlines()[0])
        raise SystemExit(0)
print("first call s:", time.perf_counter() - began)
"""


def kernel_cost(methods=METHODS, backends=("cpu", "glsl"), limit=300.0) -> list[dict]:
    """Pleiades' kernel: its size (``vgpuc compile``; the cpu backend's own refusal says
    the C size when it is over its limit) and the first call's time in a fresh process
    and cache folder (the C compiler, or the GL driver's), at most ``limit`` seconds."""
    import subprocess
    import sys
    out = []
    src = pleiades_source()
    for backend in backends:
        for name in methods:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "p.field")
                with open(path, "w") as fh:
                    fh.write(src.replace("METHOD", name))
                env = dict(os.environ, VGPU_CACHE_DIR=os.path.join(tmp, "cache"))
                emit = "c" if backend == "cpu" else backend
                got = subprocess.run([sys.executable, "-m", "vgpu_compiler.cli", "compile", path,
                                      "--emit", emit, "--dtype", "float64", "-o", path + ".k"],
                                     capture_output=True, text=True, env=env)
                size = os.path.getsize(path + ".k") if got.returncode == 0 else None
                try:
                    run = subprocess.run([sys.executable, "-c", _FIRST_CALL, path, backend],
                                         capture_output=True, text=True, env=env,
                                         timeout=limit)
                    said = (run.stdout.strip() or run.stderr.strip().splitlines()[-1])
                except subprocess.TimeoutExpired:
                    said = f"first call not done in {limit:g} s"
            row = dict(backend=backend, method=name, kernel_bytes=size,
                       compile_said=got.stderr.strip()[-300:] if size is None else "",
                       first_call=said)
            out.append(row)
            print(f"Pleiades {name} on {backend}: kernel "
                  f"{'%.0f KB' % (size / 1e3) if size else row['compile_said']}; {said}",
                  flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--json", default=None)
    ap.add_argument("--check", action="store_true", help="check Pleiades' reference")
    ap.add_argument("--kernel", action="store_true", help="Pleiades' cpu kernel size, compile")
    args = ap.parse_args(argv)
    print("| problem | rtol | " + " | ".join(f"{m} steps / digits" for m in METHODS)
          + " | scipy DOP853 steps / digits |")
    print("|---|---:|" + "---:|" * (len(METHODS) + 1))
    data = dict(backend=args.backend, rows=measure(args.backend, args.check))
    if args.kernel:
        data["kernel"] = kernel_cost()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
