"""The events' pieces of a kernel of one trajectory per invocation (GLSL, WGSL), printed
in its dialect: codegen/build/events.py's statements with the field's printed blocks
and the location's pieces (PrintedEvents, events.py) spliced in. The adaptive kernel's
body (templates/adaptive_body.j2) reads them as ``ev``: ``k.event_text()``."""
from __future__ import annotations

from functools import cached_property

from ...codegen.build import events as build
from .events import EVF_ROWS, EVI_ROWS

ROWS = (EVI_ROWS, EVF_ROWS)     # the rows carried between dispatches (b_evi, b_evf)


class EventText:
    def __init__(self, k):
        self.k, self.e = k, k.ev
        self.first = k.dialect.event_first     # the earliest event's variable

    @cached_property
    def _blocks(self) -> dict:
        """Each event's condition (into vg_hold), assignments and flux, printed."""
        k, out = self.k, {}
        for n, ev in enumerate(self.e.events):
            out[f"cond{n}"] = k.block_text(ev.cond, 0, "vg_hold")
            if ev.assign:
                out[f"assign{n}"] = k.block_text(ev.assign, 0)
            if ev.flux:
                out[f"flux{n}"] = k.block_text(ev.flux, 0, "", True)
        return out

    def _print(self, stmts, width: int = 0, **extra) -> str:
        from ...codegen.targets import printer
        return printer(self.k.dialect, {**self._blocks, **extra}).text(stmts, width) + "\n"

    def _stage0(self) -> dict:
        return {"stage0": self.k.block_text(self.k.stages[0].block, 0)}

    def _first_conds(self) -> list:
        return [self.k.block_text(fo, 0, "vg_hold") for fo, _ in self.e.firsts]

    # --- the pieces ---------------------------------------------------------------------
    def decl(self) -> str:
        return self._print(build.decl(self.e, self.k, ROWS), 4)

    def load(self) -> str:
        return self._print(build.load(self.e, ROWS), 12)

    def store(self) -> str:
        return self._print(build.store(self.e, ROWS), 8)

    def conds(self, dst: str, width: int = 0) -> str:
        return self._print(build.conds(self.e, dst), width)

    def q_from(self, prefix: str, width: int = 0) -> str:
        return self._print(build.q_from(self.e, self.k, prefix), width)

    def interp(self, theta: str, width: int = 0) -> str:
        return self._print(build.interp(self.e, self.k, theta), width)

    def frozen_k(self, stage: int, width: int = 0) -> str:
        return self._print(build.frozen_k(self.k, stage), width)

    def restart(self, width: int = 0) -> str:
        return self._print(build.restart(self.k), width, **self._stage0())

    def step_start(self, width: int = 0) -> str:
        return self._print(build.step_start(self.e, self.k), width, **self._stage0())

    def all_stopped(self, width: int = 0) -> str:
        return self._print(build.all_stopped(self.e, self.k), width)

    def save_step(self, width: int = 0) -> str:
        return self._print(build.save_step(self.k), width)

    def keep_start(self, width: int = 0) -> str:
        return self._print(build.keep_start(self.k), width)

    def save_after(self, width: int = 0) -> str:
        return self._print(build.save_after(self.e, self.k), width)

    def noise_add(self, width: int = 0) -> str:
        return self._print(build.noise_add(self.e), width)

    def at_end(self, width: int = 0) -> str:
        e, k, first = self.e, self.k, self.first
        extra = {"locate": e.locate_events(
            self.interp("vg_mid"), [self._blocks[f"cond{n}"] for n in range(len(e.events))],
            first, bool(e.firsts))}
        if e.firsts:
            conds, start = self._first_conds(), self.q_from("{s}")
            extra.update(
                declarations=e.locate_declarations(first),
                firsts=e.locate_firsts(conds, start, start if e.noisy else self.interp("vg_fu"),
                                       self.interp("vg_fx")),
                first_before=e.first_jump(False, conds), first_after=e.first_jump(True, conds))
        if k.observe_q:
            extra["observe_q"] = k.observe_text(k.observe_q, 0, "tt", "nstep", "vg_live")
        return self._print(build.at_end(e, k, first), width, **extra)
