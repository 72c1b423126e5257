"""ir/step.py: the step program of each method, checked against the method's known
stability polynomial (one step of y' = z y from y = 1, in exact arithmetic)."""
from fractions import Fraction as Fr

import pytest

from vgpu_compiler.ir.step import step_program
from vgpu_compiler.ir.tableau import TABLEAUX


def one_step(program, z: Fr) -> Fr:
    """Evaluate the program on y' = z * y, h = 1, dt = 1, exactly."""
    ks = []
    for stage in program.stages:
        y = 1 + sum(w * ks[j] for j, w in stage.state.terms)
        ks.append(z * y)
    return 1 + sum(w * ks[j] for j, w in program.update.terms)


POLYNOMIALS = {   # R(z) of each method (its Taylor truncation: they are all of order p = s)
    "euler": lambda z: 1 + z,
    "midpoint": lambda z: 1 + z + z**2 / 2,
    "heun": lambda z: 1 + z + z**2 / 2,
    "rk4": lambda z: 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24,
}


@pytest.mark.parametrize("method", sorted(TABLEAUX))
def test_the_program_is_the_method(method):
    program = step_program(TABLEAUX[method])
    assert program.method == method and program.n_stages == TABLEAUX[method].stages
    for z in (Fr(-1), Fr(1, 3), Fr(-7, 2), Fr(5)):
        assert one_step(program, z) == POLYNOMIALS[method](z)


def test_combinations_hold_only_nonzero_weights_in_order():
    for tab in TABLEAUX.values():
        program = step_program(tab)
        for comb in [s.state for s in program.stages] + [program.update]:
            assert all(w != 0 for _, w in comb.terms)
            assert list(comb.stages) == sorted(comb.stages)
        for s in program.stages:
            assert all(j < s.index for j in s.state.stages)
