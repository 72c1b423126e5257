"""The one walk over IR expressions: every pass, printer and backend uses it.

- ``children(node)``: a node's operands, left to right (``Apply.args``, the
  indices of a ``Load`` / ``CoupledAt``; leaves have none).
- ``walk(*roots)``: every node under the roots once (by ``uid``: a subtree
  shared by many parents or roots is visited once), children before parents,
  children left to right, roots in order. Deterministic, and iterative: no
  depth of expression exhausts the Python stack. ``None`` roots are skipped.
  ``skip(node)`` true leaves a node and everything under it out (a memo's
  "already done"); ``kids`` replaces ``children`` (a walk that looks only at
  part of each node).
- ``field_roots(field)``: every expression of a field, in a fixed order.
- ``rebuild(root, make, memo)``: a new expression bottom-up, ``make(node,
  new_children)`` called once per unique node (a fold, a substitution).
- ``Numbering``: value numbers, one per structurally equal subtree (spans
  aside), computed children first: hoisting and the IR dump share them.

The order of the leaves is the same as a recursive left-to-right walk's, so
"in order of first appearance" needs nothing more.
"""
from __future__ import annotations

from typing import Callable, Iterator

from .nodes import Apply, Const, CoupledAt, Expr, Field, Load, Reduce, Sym


def children(node: Expr) -> tuple[Expr, ...]:
    """The operands of a node, left to right."""
    if isinstance(node, Apply):
        return node.args
    if isinstance(node, (Load, CoupledAt)):
        return node.index
    return ()


def walk(*roots: Expr | None, skip: Callable[[Expr], bool] | None = None,
         kids: Callable[[Expr], tuple] = children) -> Iterator[Expr]:
    """Every node under ``roots`` once, children before parents (post-order)."""
    seen: set[int] = set()          # uids
    stack = [(r, False) for r in reversed(roots) if r is not None]
    while stack:
        node, ready = stack.pop()
        if ready:
            yield node
            continue
        if node.uid in seen or (skip is not None and skip(node)):
            continue
        seen.add(node.uid)
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(kids(node)))


def field_roots(field: Field) -> list[Expr]:
    """Every expression of a field: param defaults, starts, coupled, derivatives,
    collapse, flux (indices then value), dt, steps, t0, noises, events, and the
    Jacobian of a Rosenbrock method (ir/jacobian.py)."""
    roots = [p.default for p in field.params] + [s.init for s in field.states]
    roots += [c.expr for c in field.coupled] + list(field.derivs) + [field.collapse]
    for f in field.flux:
        roots += list(f.index) + [f.value]
    roots += [field.solver.dt, field.solver.steps, field.solver.t0]
    if field.solver.adaptive is not None:
        roots += field.solver.adaptive.exprs()
    for n in field.noises:          # each noise's coefficients, then their slopes
        roots += list(n.diffusion) + list(n.slope)
    for e in field.events:          # each event's condition, assignments, flux
        roots += [e.cond] + [v for _, v in e.assigns]
        for f in e.flux:
            roots += list(f.index) + [f.value]
    if field.jacobian is not None:  # rodas4: dF/dh row by row, then dF/dt
        roots += field.jacobian.roots()
    return [r for r in roots if r is not None]


def rebuild(root: Expr, make: Callable[[Expr, tuple], Expr], memo: dict) -> Expr:
    """``root`` rebuilt children first: ``make(node, new_children)`` for each unique node.

    ``memo`` maps ``node.uid -> result`` and may be shared by several roots: a
    shared subtree is rebuilt once."""
    for node in walk(root, skip=lambda n: n.uid in memo):
        memo[node.uid] = make(node, tuple(memo[k.uid] for k in children(node)))
    return memo[root.uid]


def shallow(node: Expr) -> tuple:
    """What a node is apart from its children and span (repr keeps -0.0 and nan apart)."""
    if isinstance(node, Const):
        return ("const", node.type, repr(node.value))
    if isinstance(node, Sym):
        return ("sym", node.kind, node.name, node.type)
    if isinstance(node, Load):
        return ("load", node.array)
    if isinstance(node, CoupledAt):
        return ("at", node.name)
    if isinstance(node, Reduce):
        return ("reduce", node.op, node.name)
    return ("apply", node.op, node.type)


class Numbering:
    """Value numbers: structurally equal nodes get one number (spans aside: the copies
    of a read at two places in the text are two nodes but one number), computed
    children first, in time linear in the DAG, without hashing deep trees."""

    def __init__(self):
        self._by_uid: dict[int, int] = {}
        self._by_key: dict[tuple, int] = {}

    def __call__(self, node: Expr) -> int:
        numbers = self._by_uid
        for e in walk(node, skip=lambda x: x.uid in numbers):
            key = (shallow(e), tuple(numbers[c.uid] for c in children(e)))
            numbers[e.uid] = self._by_key.setdefault(key, len(self._by_key))
        return numbers[node.uid]
