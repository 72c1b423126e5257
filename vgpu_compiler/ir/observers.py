"""Observers (``observe NAME = KIND(expr)``) lowered to hidden states of the field.

``lower(field)`` appends one state per observer, after every state of the field (and
after a joined field's sensitivities), and sets ``error_states`` so that an adaptive
method's error norm and first step measure the field's own states alone: the steps,
and the states, are the ones of the run without observers.

- ``integral(e)`` and ``average(e)``: the state ``q`` with ``dq/dt = e``, ``q(t0) = 0``,
  integrated by the method with the other states (events interpolate it like them; a
  stopped trajectory's is frozen with it). ``average`` is ``q / (t - t0)``, with the
  trajectory's own final time ``t``: call/observers.py divides.
- ``peak(e)``, ``trough(e)``, ``first(COND)``: a state with derivative 0 (every method
  and interpolant carries it unchanged: ``y + h * 0``), which the backend updates at
  ``t0``, at every accepted step's end and just before and just after every event by
  the field's ``observer_rules`` (``Rule``): ``m = max(m, e)``, ``m = min(m, e)``;
  ``first`` starts NaN and takes the time at which COND goes from false to true
  (edge-triggered like ``when``: its value at a segment's start is the previous one),
  located on the step's continuous extension as an event is, without ending the step.

A stiff method's field (``field.jacobian`` set) gets the hidden states' rows and
columns of J (ir/jacobian.py ``with_quadratures``: ``de/dh`` for an integral, 0 for
the rest, ``jacobian.trailing`` of them); the backends solve those rows after the
states' LU (numpy/rosenbrock.py ``block_solve``), so the states' numbers are unchanged.

The memo gives one lowered field per field object, so every kernel cache downstream
hits.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from .jacobian import with_quadratures
from .names import taken_names, unique
from .nodes import Const, Expr, Field, State
from .ops import Type

F = Type.FLOAT
STEP_END = ("peak", "trough", "first")


@dataclass(frozen=True)
class Rule:
    """A step-end observer: ``kind`` (peak, trough, first) updates state ``index``
    from ``expr`` (FLOAT; BOOL for first)."""
    kind: str
    index: int
    expr: Expr


@dataclass(frozen=True)
class Lowered:
    field: Field                    # with the hidden states (and observer_rules)
    base: Field                     # the field as asked for
    names: tuple[str, ...]          # the observers, in written order
    kinds: tuple[str, ...]
    first_row: int                  # the first hidden state's position


def lower(field: Field) -> Lowered:
    """The memoised lowered field (``field.observers`` not empty)."""
    key = id(field)
    with _lock:
        hit = _memo.get(key)
    if hit is not None and hit.base is field:
        return hit
    out = _lower(field)
    with _lock:
        if len(_memo) >= MEMO_SIZE:
            _memo.pop(next(iter(_memo)))
        _memo[key] = out
    return out


def _lower(field: Field) -> Lowered:
    taken = taken_names(field) | set(field.state_names) | {o.name for o in field.observers}
    base_n = len(field.states)
    states, derivs, rules = [], [], []
    for k, o in enumerate(field.observers):
        name = unique(f"observed_{o.name}", taken)
        if o.kind in ("integral", "average"):
            states.append(State(name, Const(0.0, F), o.span))
            derivs.append(o.expr)
            continue
        init = o.expr if o.kind in ("peak", "trough") else Const(float("nan"), F)
        states.append(State(name, init, o.span))
        derivs.append(Const(0.0, F))
        rules.append(Rule(o.kind, base_n + k, o.expr))
    more = (None,) * len(states)        # no noise drives a hidden state
    noises = tuple(replace(n, diffusion=n.diffusion + more,
                           slope=n.slope + more if n.slope else n.slope)
                   for n in field.noises)
    lowered = replace(field, states=field.states + tuple(states),
                      derivs=field.derivs + tuple(derivs), error_states=field.n_error,
                      noises=noises,
                      observer_rules=tuple(rules))
    if field.jacobian is not None:      # a stiff method: the hidden states' rows of J
        lowered = replace(lowered, jacobian=with_quadratures(
            field.jacobian, lowered.state_names, tuple(derivs)))
    return Lowered(lowered, field, tuple(o.name for o in field.observers),
                   tuple(o.kind for o in field.observers), base_n)


def firsts(field: Field) -> tuple[Rule, ...]:
    """The ``first`` rules of a lowered field (located on the step's extension)."""
    return tuple(r for r in field.observer_rules if r.kind == "first")


def located(field: Field) -> bool:
    """Whether a compiled backend runs ``field`` through its events' code: it has events,
    or a ``first`` to locate (as the reference's runners: numpy/runner.py)."""
    return bool(field.events) or bool(firsts(field))


_memo: dict = {}
_lock = threading.Lock()
MEMO_SIZE = 64
