"""The fixed-step kernel's body (codegen/build/fixed.py) for a printed kernel, in its
dialect: what its template (field.glsl.j2, field.wgsl.j2) inserts after the prologue,
with the blocks the template lays out itself (the stages', the observers', the
collapse condition's, the flux's) as splices."""
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


def main(k, indent: int = 4, **splices) -> str:
    """The body of the kernel ``k`` after its lane is known, printed in its dialect."""
    from ...codegen.build import fixed
    from ...codegen.targets import printer
    return printer(k.dialect, splices).text(fixed.main(k.dialect, field(k)), indent)
