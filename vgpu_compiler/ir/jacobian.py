"""The Jacobian of a field's derivatives, derived symbolically (rodas4: ir/rosenbrock.py).

``jacobian(field)`` is ``J[i][j] = dF_i/dh_j`` (F_i the derivative of state i, h_j
state j) for every pair, and ``time[i] = dF_i/dt`` when some derivative reads
``t`` (else None: the method's ``dt * d_i * dF/dt`` terms vanish), each an IR
expression built by ``ir.diff.derivative``:

- simplified as it is built (0 terms dropped, factors 1 dropped) and folded by
  ``passes.fold``; an entry that does not depend on its state is ``Const(0.0)``,
  so the matrix's sparsity is known when a kernel is printed (``nonzero``);
- the step functions (``floor``, ``ceil``, ``sign``, ``int``, ``//``) have
  derivative 0 and float ``%`` has ``a' - floor(a / b) * b'`` (the derivative
  almost everywhere: ``piecewise=True``); ``where``, ``min``, ``max``, ``abs``,
  ``clamp`` take the derivative of the branch they choose;
- shared with the derivatives themselves: the IR is hash-consed (ir/nodes.py), and
  ``with_jacobian`` (called by frontend/compile.py right after ``passes.optimize``)
  derives the Jacobian inside the program's interning table,
  so a node the derivative rules build that already exists (``exp(-k * x)`` of
  ``d(exp(-k * x))/dx``, ``cos(x)`` in two entries) is the one existing object:
  the numpy reference's ``Plan`` gives it one slot (computed once per
  evaluation, shared with F's when both are scheduled together), the shader
  printers one temp, and ``vgpuc ir --jacobian`` prints it once (``%n``).

Coupled values and noise never reach here: rodas4 refuses them in the checker.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .diff import depends, derivative
from .nodes import Const, Expr, Field, Sym, interning
from .ops import SymKind, Type
from .rosenbrock import STIFF


@dataclass(frozen=True)
class Jacobian:
    states: tuple[str, ...]
    matrix: tuple[tuple[Expr, ...], ...]    # matrix[i][j] = dF_i / d(state j)
    time: tuple[Expr, ...] | None           # dF_i / dt; None: no derivative reads t
    # the last ``trailing`` rows are observers' (ir/observers.py: a quadrature's
    # dq/dt = e(h, t), or 0): no row reads them (their columns are all 0), so a
    # backend solves them after the states' (and sensitivities') blocks, row by row
    trailing: int = 0

    @property
    def n(self) -> int:
        return len(self.states)

    def roots(self) -> list[Expr]:
        """Every entry, row by row, then dF/dt."""
        out = [e for row in self.matrix for e in row]
        return out + list(self.time or ())

    def nonzero(self) -> list[tuple[int, int]]:
        """The (i, j) of the entries that are not the constant 0."""
        return [(i, j) for i, row in enumerate(self.matrix) for j, e in enumerate(row)
                if not _zero(e)]


def _zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def jacobian(states: tuple[str, ...], derivs: tuple[Expr, ...]) -> Jacobian:
    """The Jacobian of ``derivs`` (one per state, in order) with respect to the states
    (called inside an interning table: see the module doc)."""
    syms = [Sym(SymKind.STATE, name, Type.FLOAT) for name in states]
    matrix = tuple(tuple(derivative(f, x, piecewise=True) for x in syms) for f in derivs)
    t = Sym(SymKind.TIME, "t", Type.FLOAT)
    time = None
    if any(depends(f, t) for f in derivs):
        time = tuple(derivative(f, t, piecewise=True) for f in derivs)
    return Jacobian(tuple(states), matrix, time)


def with_quadratures(jac: Jacobian, states: tuple[str, ...], derivs: tuple[Expr, ...]
                     ) -> Jacobian:
    """``jac`` (of the first ``jac.n`` of ``states``) with the rows and columns of the
    states after them, whose derivatives ``derivs`` (one each) read no such state: the
    old rows get 0 in the new columns, a new row is ``d(deriv)/dh`` over every state
    (0 in the new columns) and, when some derivative reads ``t``, dF/dt gets its
    entries (0 for the old rows when they had none)."""
    syms = [Sym(SymKind.STATE, name, Type.FLOAT) for name in states]
    t = Sym(SymKind.TIME, "t", Type.FLOAT)
    zero = Const(0.0, Type.FLOAT)
    more = len(states) - jac.n
    with interning():
        rows = tuple(row + (zero,) * more for row in jac.matrix)
        rows += tuple(tuple(derivative(f, x, piecewise=True) for x in syms[:jac.n])
                      + (zero,) * more for f in derivs)
        time = jac.time
        if time is not None or any(depends(f, t) for f in derivs):
            time = (time or (zero,) * jac.n) + tuple(
                derivative(f, t, piecewise=True) for f in derivs)
    return Jacobian(tuple(states), rows, time, jac.trailing + more)


def with_jacobian(field: Field) -> Field:
    """``field`` with its Jacobian when its method needs one (rodas4), else itself; the
    entries are interned in the open table (or a new one): see the module doc."""
    if field.solver.method not in STIFF:
        return field
    with interning():
        return replace(field, jacobian=jacobian(field.state_names, field.derivs))
