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

The order of the leaves is the same as a recursive left-to-right walk's, so
"in order of first appearance" needs nothing more.
"""
from __future__ import annotations

from typing import Callable, Iterator

from .nodes import Apply, CoupledAt, Expr, Field, Load


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
    collapse, flux (indices then value), dt, steps, t0."""
    roots = [p.default for p in field.params] + [s.init for s in field.states]
    roots += [c.expr for c in field.coupled] + list(field.derivs) + [field.collapse]
    for f in field.flux:
        roots += list(f.index) + [f.value]
    roots += [field.solver.dt, field.solver.steps, field.solver.t0]
    return [r for r in roots if r is not None]


def rebuild(root: Expr, make: Callable[[Expr, tuple], Expr], memo: dict) -> Expr:
    """``root`` rebuilt children first: ``make(node, new_children)`` for each unique node.

    ``memo`` maps ``node.uid -> result`` and may be shared by several roots: a
    shared subtree is rebuilt once."""
    for node in walk(root, skip=lambda n: n.uid in memo):
        memo[node.uid] = make(node, tuple(memo[k.uid] for k in children(node)))
    return memo[root.uid]
