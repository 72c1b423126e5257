"""The fixed-step kernel's body (codegen/build/fixed.py) for a printed kernel, in its
dialect: what its template (field.glsl.j2, field.wgsl.j2) inserts after the prologue,
with the field's blocks (the stages', the observers', the collapse condition's, the
flux's: codegen/build/blocks.py) spliced in."""
from __future__ import annotations


def field(k):
    """The fixed.Field of a printed kernel (printing.PrintedKernel)."""
    from ...codegen.build import fixed
    stages = tuple(fixed.Stage(index=st.index, comment=st.comment,
                               time=st.time if "tt" in st.words else None,
                               combos=tuple((a.target, a.expr) for a in st.combos),
                               fast=st.fast is not None) for st in k.stages)
    trio = lambda xs: tuple((a.target, a.expr, a.comment) for a in xs or ())  # noqa: E731
    return fixed.Field(
        states=tuple(s[0] for s in k.states), stages=stages,
        stage_k=tuple(map(tuple, k.stage_k)), update=trio(k.update),
        params=tuple(k.pt_params), init=trio(k.init),
        init_names=tuple(k.init_names) if k.uses_init else (),
        loop_words=k.loop_words,
        noise=("Milstein" if k.noise[0].gx else "Euler-Maruyama") if k.noise else None,
        noise_traj=k.noise_traj, noise_vars=tuple(k.noise_vars),
        noise_draws=trio(k.noise_draws), noise_update=trio(k.noise_update),
        observe=bool(k.observe),
        collapse=frozenset(k.collapse.words) if k.collapse else None,
        flux=frozenset(k.flux.words) if k.flux else None,
        history=bool(k.history), guard=k.guard or "", guard_note=k.guard_note)


def splices(k) -> dict:
    """The blocks the body splices in, laid out (codegen/build/blocks.py): each stage's
    (``stage<i>``, its unchecked twin ``fast<i>``), the observers', the collapse
    condition's (into vg_hold) and the flux's."""
    out = {}
    for st in k.stages:
        out[f"stage{st.index}"] = k.block_text(st.block)
        if st.fast is not None:
            out[f"fast{st.index}"] = k.block_text(st.fast)
    if k.observe:
        out["observe"] = k.observe_text(k.observe, 0, f"u_t0 + {k.F}(n + 1) * u_dt", "n")
    if k.collapse:
        out["collapse"] = k.block_text(k.collapse, 0, "vg_hold")
    if k.flux:
        out["flux"] = k.block_text(k.flux, 0, "", True)
    return out


def main(k, indent: int = 4) -> str:
    """The body of the kernel ``k`` after its lane is known, printed in its dialect."""
    from ...codegen.build import fixed
    from ...codegen.targets import printer
    return printer(k.dialect, splices(k)).text(fixed.main(k.dialect, field(k)), indent)


# the C kernel's lane arrays of a trajectory's builtins (templates/base.c.j2)
C_ARRAYS = {"vg_active": "A_act", "lane": "A_lane"}


class LaneParts:
    """(C) The pieces of the body the lane template (field.c.j2) inserts, laid out over a
    block of lanes by codegen/lanes.lane_loops, printed when the template asks (a disk hit
    renders nothing; the disk key digests the field and the dialect: cpu/source_key.py):
    ``history_start`` (the next saved step, its slot), ``steps`` (the step loop, a saved
    step's history in it, with the template's lane loops spliced in), ``flux`` (its
    uniform head, the template's lane loop spliced in) and ``store``; and inside a lane
    loop of the template, its scalars bound, ``update`` and ``noise_step``."""

    def __init__(self, k):
        self.fd = field(k)
        self.dialect = k.dialect

    def _laid(self, stmts, splices=None, indent: int = 0) -> str:
        from ...codegen import lanes
        from ...codegen.targets import printer
        return printer(self.dialect, splices).text(
            lanes.lane_loops(stmts, C_ARRAYS, registers=self.fd.states, uniform=True), indent)

    def history_start(self) -> str:
        from ...codegen.build import fixed
        return self._laid(fixed.history_start())

    def steps(self, lanes: str, lanes_fast: str = "", vote: str = "") -> str:
        """The step loop(s), with the template's lane loops of a step (``lanes``, the
        guard's ``lanes_fast``) and collapse vote (``vote``) spliced in."""
        from ...codegen.build import fixed
        return self._laid(fixed.steps(self.dialect, self.fd, lanes=True),
                          {"lanes": lanes, "lanes_fast": lanes_fast, "vote": vote}, 4)

    def flux(self, lanes: str) -> str:
        """The flux after the last step, with the template's lane loop (``lanes``)."""
        from ...codegen.build import fixed
        return self._laid(fixed.flux(self.fd), {"flux": lanes}, 4)

    def update(self) -> str:
        """(Inside the template's lane loop, a lane's scalars bound) the new state."""
        from ...codegen.build import fixed
        from ...codegen.targets import printer
        return printer(self.dialect).text(fixed.update(self.fd))

    def noise_step(self) -> str:
        """(Inside the template's lane loop) the noise draws and their update."""
        from ...codegen.build import fixed
        from ...codegen.targets import printer
        return printer(self.dialect).text(fixed.noise_step(self.fd))

    def store(self) -> str:
        from ...codegen.build import fixed
        return self._laid(fixed.store(self.fd))
