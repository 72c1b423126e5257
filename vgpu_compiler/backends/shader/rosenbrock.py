"""The kernel of a Rosenbrock method (rodas4: ir/rosenbrock.py), for every compiled backend.

The step is the numpy reference's (backends/numpy/rosenbrock.py), written once here
as data and text pieces that the adaptive templates lay out; the numbers and the
order of operations are the reference's, so float64 agrees with it to rounding:

1. the Jacobian ``J = dF/dh`` and (fields that read ``t``) ``F_t = dF/dt`` at the
   step's start, from ``field.jacobian`` (ir/jacobian.py): one Block (stage 0's
   context: ``y_x = s_x``, ``tt = t_n``) whose statements write only the nonzero
   entries, straight into the matrix ``vg_W`` (row-major, ``n * n``; the rest 0);
2. ``W = I / gamma - dt * J`` in place: ``W_ij = J_ij * (-dt)``, and on the diagonal
   ``+ 1 / gamma`` (numpy: ``J * (-dt)``, then the diagonal);
3. its LU with partial pivoting (the first largest ``|a_ik|`` from row k down,
   LAPACK's row swaps, multipliers below the diagonal), in the private array;
4. per stage s: the right-hand side ``F_s + sum_j c_sj K_j + (dt * d_s) * F_t``
   (``rhs``; F_s is the stage's k names, F_0 the FSAL slot), the row swaps, forward
   substitution by columns (row i sees j = 0, 1, ...) and back substitution by
   columns from the last; ``K_s`` overwrites the stage's k names (stage 0's: the
   template keeps F(t_n, s) aside, ``vg_f*``, and puts it back after a reject; after
   an accepted step it evaluates F at the new state, as rodas4 is not FSAL).

The update, the error ``dt * K_6`` and the continuous extension are the explicit
pairs' printed Combinations (adaptive.py) over the K names.

Steps 2-4 are built once as IR (codegen/build/rosenbrock.py: ``setup``, ``lu``,
``solve``) and printed here (``PrintedRosenbrock.setup/solve``); the templates place
them (adaptive.glsl.j2, adaptive.wgsl.j2: in the invocation's registers and private
arrays; adaptive.c.j2: one lane loop per attempt, PrintedAdaptive.ros_lanes, per-lane
arrays on the stack, the zeroing and scaling as loops). The matrix
is zeroed explicitly every attempt (WGSL: naga does not zero again a ``var`` declared
inside a loop); the loops' iterations (``PrintedRosenbrock.trips``:
``lu_trips``/``solve_trips`` of the builder) join the kernel's ``loop_trips_per_step``
(llvmpipe's and lavapipe's loop limiter). With events (the events' kernel), a lane
stopped by `stop when` (in a basin that runs on) has each K_s zeroed after its solve,
as the reference's frozen lanes, and after an event F at the state after it is the
events' restart's (not this F at the step's end). A field joined with its sensitivities
(``field.error_states``, ir/sensitivity.py) factors only the top-left ``m x m`` block
(its own states' W) and solves each sensitivity column with it after subtracting its
``dW/dh`` product, as the reference's ``block_solve``: the states' numbers are those of
the field without sensitivities. A field's observers (ir/observers.py: ``jacobian.
trailing`` rows after all those) are solved last, row by row, by substitution with
the states' K (the reference's ``block_solve``): the states' numbers are those of the
field without observers.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field as _field

from ...ir.nodes import Field
from ...ir.step import step_program
from .kernel import Block, Context, Kernel, Let


@dataclass(frozen=True)
class RosenbrockParts:
    n: int
    m: int                              # the factored block: n, or a joined field's own
    jac: Block                          # writes vg_W[i * n + j] = J_ij (nonzero), vg_Ft[i]
    nonzero: tuple[tuple[int, int], ...]
    time: bool                          # some derivative reads t: dF/dt is used
    implicit: object                    # ir.step.Implicit: gamma, the c_sj, the d_s
    trailing: int = 0                   # the observers' rows, after the blocks


@dataclass(frozen=True)
class PrintedRosenbrock:
    n: int
    m: int                              # LU of the top-left m x m block (a joined field)
    jac: object                         # printing.PrintedBlock
    combos: tuple                       # Assign(y_x, s_x) for the y read by the Jacobian
    rhs: tuple[tuple[str, ...], ...]    # per stage, per state: the right-hand side
    time: bool
    lu_trips: int                       # loop iterations of the factorisation, at most
    solve_trips: int                    # ... of one solve
    stage_k: tuple = ()                 # per stage: its k names (K_s is solved into them)
    nonzero: tuple = ()                 # J's nonzero entries (i, j) off the diagonal
    inv_gamma_value: float = 0.0        # 1 / gamma (the number: the IR prints it)
    trailing: int = 0                   # the observers' rows (solved last, row by row)
    lower: tuple = ()                   # their (i, (j, ...)): J_ij nonzero, j < i
    dialect: object = _field(default=None, compare=False, repr=False)

    def setup(self, jac: str) -> str:
        """W, its LU and F(t_n, state) kept aside (codegen/build/rosenbrock.py), with
        ``jac``: the Jacobian's block as its template prints it; (C: one lane's, in the
        attempt's lane loop, its flag vg_sing[l] and F kept in vg_F0_<i>[l])."""
        from ...codegen import lanes
        from ...codegen.build import rosenbrock as build
        from ...codegen.targets import printer
        stmts = build.setup(self.dialect, self.n, self.m, self.nonzero, self.inv_gamma_value,
                            self.time, self.stage_k[0],
                            tuple((x.target, x.expr) for x in self.combos),
                            "tt" in self.jac.words)
        if self.dialect.lane_block:
            stmts = lanes.lane_arrays(stmts, (build.SING, *(f"vg_F0_{j}" for j in
                                                           range(len(self.stage_k[0])))))
        return printer(self.dialect, {"jac": jac}).text(stmts)

    def solve(self, s: int) -> str:
        """Stage ``s``'s solve (codegen/build/rosenbrock.py) with its right-hand side."""
        from ...codegen.build import rosenbrock as build
        from ...codegen.targets import printer
        rhs = "\n".join(f"{build.X}[{j}] = {x};" for j, x in enumerate(self.rhs[s]))
        stmts = build.solve(s, self.n, self.m, self.stage_k[s], self.trailing, self.lower)
        return printer(self.dialect, {"rhs": rhs}).text(stmts)

    @property
    def trips(self) -> int:
        """Loop iterations of one attempt's linear algebra (llvmpipe's loop limiter)."""
        return self.lu_trips + len(self.rhs) * self.solve_trips


def W(i: int, j: int, n: int) -> str:
    return f"vg_W[{i * n + j}]"


def extend(kernel: Kernel, field: Field) -> Kernel:
    jac = field.jacobian
    n = jac.n
    nonzero = tuple(jac.nonzero())
    body = [Let(W(i, j, n), jac.matrix[i][j], f"dF_{i}/dh_{j}") for i, j in nonzero]
    if jac.time is not None:
        body += [Let(f"vg_Ft[{i}]", e, f"dF_{i}/dt") for i, e in enumerate(jac.time)]
    block = Block(ctx=Context(state="y"), coupled=None, body=tuple(body), prefix="vg_tj_")
    return dataclasses.replace(kernel, rosenbrock=RosenbrockParts(
        n=n, m=field.n_error, jac=block, nonzero=nonzero, time=jac.time is not None,
        implicit=step_program(field.solver.tableau).implicit, trailing=jac.trailing))


def print_parts(k, parts: RosenbrockParts, dialect, block, assign) -> PrintedRosenbrock:
    """The printed pieces (``block``: the printer's Block printer; ``assign``: its Assign)."""
    from ...codegen.build import rosenbrock as build
    lit, n = dialect.float_literal, parts.n
    jac = block(parts.jac)
    combos = tuple(assign(y, s) for s, y, _ in k.states if y in jac.words)
    imp = parts.implicit
    rhs = []
    for s, comb in enumerate(imp.rhs):
        row = []
        for i in range(n):
            r = k.stage_k[s][i]
            terms = [k.stage_k[j][i] if w == 1 else f"{lit(float(w))} * {k.stage_k[j][i]}"
                     for j, w in comb.terms]
            if terms:
                r = f"{r} + ({' + '.join(terms)})"
            if parts.time and imp.d[s] != 0:
                r = f"{r} + (u_dt * {lit(float(imp.d[s]))}) * vg_Ft[{i}]"
            row.append(r)
        rhs.append(tuple(row))
    return PrintedRosenbrock(n=n, m=parts.m, jac=jac, combos=combos,
                             rhs=tuple(rhs),
                             time=parts.time, lu_trips=build.lu_trips(parts.m),
                             solve_trips=build.solve_trips(n, parts.m, parts.trailing),
                             trailing=parts.trailing, lower=_lower(parts),
                             stage_k=tuple(tuple(ks) for ks in k.stage_k), dialect=dialect,
                             nonzero=tuple((i, j) for i, j in parts.nonzero if i != j),
                             inv_gamma_value=float(1 / imp.gamma))


def _lower(parts: RosenbrockParts) -> tuple:
    """The observers' rows' (i, (j, ...)): J_ij not the constant 0, j < i, increasing."""
    start = parts.n - parts.trailing
    rows: dict = {}
    for i, j in parts.nonzero:
        if i >= start and j < i:
            rows.setdefault(i, []).append(j)
    return tuple((i, tuple(js)) for i, js in sorted(rows.items()))
