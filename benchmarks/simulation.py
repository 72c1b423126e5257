"""Persistent simulations (issue 17): what a step costs when the state stays on the device,
and what a history costs when the shader writes it.

Tables
  advance   65,536 Lorenz trajectories (RK4, float32), one step per call:
              VGPU Simulation.advance(steps=1)   the Simulation's buffers stay resident
              hand-written resident kernel       raw moderngl: program, buffers and
                                                 uniforms set once; a call is one dispatch
                                                 and a wait for it (glFinish)
  history   Van der Pol, 10,000 trajectories (mu swept), 2,000 RK4 steps, glsl:
              vgpu.solve without a history; vgpu.solve(save_every=1) (2,001 saved states,
              written by the shader)
Targets: advance(steps=1) <= 1.3x the hand-written kernel; save_every=1 <= 2x without.
Timings are interleaved rounds (a busy spell of the shared machine hits every column);
the ratio is the median of the rounds' ratios.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np

from .common import Config, Result, Table, Target, describe_error, log
from .peers import glsl_hand

NAME = "simulation"
ROOT = pathlib.Path(__file__).resolve().parent.parent / "examples"
N_LORENZ, QUICK_LORENZ = 65_536, 4_096
CALLS, QUICK_CALLS = 300, 20
ROUNDS = 5
N_VDP, STEPS_VDP = 10_000, 2_000
ADVANCE_RATIO, HISTORY_RATIO = 1.3, 2.0

HAND_LORENZ = """
#version 430
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer State { float s[]; };   // x[0..n), y[n..2n), z[2n..3n)
uniform uint n;
uniform float dt;
uniform int step0;
uniform int steps;
uniform float sigma;
uniform float rho;
uniform float beta;

vec3 f(vec3 u) {
    return vec3(sigma * (u.y - u.x), u.x * (rho - u.z) - u.y, u.x * u.y - beta * u.z);
}

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= n) return;
    vec3 u = vec3(s[i], s[n + i], s[2u * n + i]);
    float h = 0.5 * dt;
    for (int k = step0; k < step0 + steps; ++k) {
        vec3 k1 = f(u);
        vec3 k2 = f(u + h * k1);
        vec3 k3 = f(u + h * k2);
        vec3 k4 = f(u + dt * k3);
        u = u + dt * (k1 * (1.0 / 6.0) + k2 * (1.0 / 3.0) + k3 * (1.0 / 3.0) + k4 * (1.0 / 6.0));
    }
    s[i] = u.x; s[n + i] = u.y; s[2u * n + i] = u.z;
}
"""


class HandResident:
    """The hand-written baseline: state uploaded once; each call advances one step."""

    def __init__(self, h0: np.ndarray):
        self.ctx, self.n = glsl_hand.context(), len(h0)
        with self.ctx:
            self.prog = p = self.ctx.compute_shader(HAND_LORENZ)
            self.state = self.ctx.buffer(np.ascontiguousarray(h0.T, np.float32).tobytes())
            p["n"].value, p["dt"].value, p["steps"].value = self.n, 0.01, 1
            p["sigma"].value, p["rho"].value, p["beta"].value = 10.0, 28.0, 8.0 / 3.0
        self.k = 0

    def __call__(self):
        with self.ctx:
            self.prog["step0"].value = self.k
            self.state.bind_to_storage_buffer(0)
            self.prog.run((self.n + 63) // 64)
            self.ctx.finish()
        self.k += 1

    def states(self) -> np.ndarray:
        with self.ctx:
            return np.frombuffer(self.state.read(), np.float32).reshape(3, self.n).T.copy()


def _rounds(fns: dict, calls: int, rounds: int) -> dict:
    """Interleaved rounds (order alternating): name -> per-call seconds of each round."""
    out = {name: [] for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            fn = fns[name]
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name].append((time.perf_counter() - t) / calls)
    return out


def _ratio_target(name: str, num: list, den: list, need: float) -> Target:
    ratios = [a / b for a, b in zip(num, den)]
    if not ratios:
        return Target(name, None, "not measured")
    r = float(np.median(ratios))
    return Target(name, r <= need, f"{r:.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)}"
                                   f"; need <= {need:g}x)")


def _advance(cfg: Config, res: Result) -> None:
    import vgpu
    n = QUICK_LORENZ if cfg.quick else (cfg.n[0] if cfg.n else N_LORENZ)
    calls = cfg.calls or (QUICK_CALLS if cfg.quick else CALLS)
    rounds = 1 if cfg.quick else ROUNDS
    h0 = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    src = (ROOT / "lorenz.field").read_text()
    fns, rows = {}, []
    if cfg.wants("VGPU Simulation.advance(steps=1)"):
        try:
            sim = vgpu.Simulation(src, h0, backend="glsl")
            fns["VGPU Simulation.advance(steps=1)"] = lambda: sim.advance(1)
        except Exception as exc:        # noqa: BLE001 - no OpenGL here: say why
            rows.append(["VGPU Simulation.advance(steps=1)", describe_error(exc, cfg), None,
                         None])
    if cfg.wants("hand-written resident kernel"):
        try:
            hand = HandResident(h0)
            fns["hand-written resident kernel"] = hand
        except Exception as exc:        # noqa: BLE001
            rows.append(["hand-written resident kernel", describe_error(exc, cfg), None, None])
    for fn in fns.values():             # warm: compiles, first dispatches
        for _ in range(5):
            fn()
    agree = None
    if len(fns) == 2:                   # both took the same 5 steps from h0
        agree = float(np.abs(sim.states - hand.states()).max())
    got = _rounds(fns, calls, rounds)
    table = Table(f"Simulation.advance(steps=1): {n:,} Lorenz trajectories (RK4, float32, "
                  f"glsl), {rounds} interleaved rounds of {calls} calls",
                  ["column", "per call us (median round)", "steps/s", "x hand"])
    hand_t = got.get("hand-written resident kernel")
    for name, per in got.items():
        m = float(np.median(per))
        table.rows.append([name, 1e6 * m, 1 / m,
                           m / float(np.median(hand_t)) if hand_t else None])
    table.rows += rows
    table.notes = ["rounds (us): " + "; ".join(
        f"{k} " + ", ".join(f"{1e6 * x:.0f}" for x in v) for k, v in got.items())]
    if agree is not None:
        table.notes.append(f"max |VGPU - hand| after the 5 warm-up steps: {agree:.3g}")
    res.tables.append(table)
    res.targets.append(_ratio_target(
        f"Simulation.advance(steps=1) <= {ADVANCE_RATIO:g}x a hand-written kernel on "
        f"resident buffers", got.get("VGPU Simulation.advance(steps=1)", []),
        hand_t or [], ADVANCE_RATIO))
    res.data["advance"] = {"n": n, "calls": calls, "rounds_s": got}


def _history(cfg: Config, res: Result) -> None:
    import vgpu
    n = 500 if cfg.quick else N_VDP
    steps = 100 if cfg.quick else STEPS_VDP
    rounds = 1 if cfg.quick else 3
    src = (ROOT / "vanderpol.field").read_text()
    h0 = np.tile(np.float32([2, 0]), (n, 1))
    mu = np.linspace(0, 5, n).astype(np.float32)
    fns = {"solve, no history": lambda: vgpu.solve(src, h0, params={"mu": mu}, steps=steps,
                                                   backend="glsl"),
           "solve, save_every=1": lambda: vgpu.solve(src, h0, params={"mu": mu}, steps=steps,
                                                     backend="glsl", save_every=1)}
    fns = {k: v for k, v in fns.items() if cfg.wants(k)}
    failed = []
    for name, fn in list(fns.items()):
        try:
            fn()
        except Exception as exc:        # noqa: BLE001 - no OpenGL here: say why
            failed.append([name, describe_error(exc, cfg), None])
            del fns[name]
    log("  history: warm")
    got = _rounds(fns, 1, rounds)
    table = Table(f"save_every=1 history: Van der Pol, {n:,} trajectories, {steps:,} RK4 "
                  f"steps, glsl, {rounds} interleaved rounds",
                  ["column", "seconds (median round)", "x no history"])
    base = got.get("solve, no history")
    for name, per in got.items():
        m = float(np.median(per))
        table.rows.append([name, m, m / float(np.median(base)) if base else None])
    table.rows += failed
    table.notes = ["rounds (s): " + "; ".join(
        f"{k} " + ", ".join(f"{x:.3f}" for x in v) for k, v in got.items())]
    res.tables.append(table)
    res.targets.append(_ratio_target(
        f"save_every=1 <= {HISTORY_RATIO:g}x the run without saving",
        got.get("solve, save_every=1", []), base or [], HISTORY_RATIO))
    res.data["history"] = {"n": n, "steps": steps, "rounds_s": got}


def run(cfg: Config) -> Result:
    res = Result(NAME)
    _advance(cfg, res)
    _history(cfg, res)
    return res
