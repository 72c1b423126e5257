"""Forward sensitivities: a field -> the joined field of its states and their derivatives.

``augment(field, names)`` is the one transform every backend runs unchanged. For the
states ``h`` (n of them) and the names ``p_j`` (params, or ``init(x)``), it adds the
states ``S_ij = dh_i/dp_j`` (column-major: all of name 0's column, then name 1's ...,
after every original state; a column is a copy of the states, as rodas4's block solve
wants) with

    S_ij' = sum_k (dF_i/dh_k) S_kj + dF_i/dp_j,
    S_ij(t0) = dh_i(t0)/dp_j,

each derived symbolically by ``ir.diff.derivative`` (lets are already inlined, so
``where``, functions and ``t`` need nothing more). ``dF_i/dp_j`` is the partial
derivative in the param plus, for every ``init(y)`` the equation reads,
``dF_i/d init(y) * init(S_yj)``: ``init(S_yj)`` is the start value of S_yj, which is
``d init(y)/dp_j`` (so ``init(x)`` read in an equation has derivative 1 with respect to
``init(x)``, and a param read by y's start expression reaches the equation too). The
start values: the identity column for ``init(x)`` (``S_xj(t0) = 1``), the derivative of
a start expression otherwise, with the chain rule through the states it reads
(``sum_k d(start_i)/dh_k S_kj(t0)``: states declared before it, so their S are too).

Noise (Euler–Maruyama only): each noise's coefficient column G_k gets the same rule
(``dG_ik/dh S + dG_ik/dp``), so S is the pathwise derivative on the same increments.

Events: the jump rule of Galan, Feehery & Barton (1999) is written as more assignments
of each `when` block (``_jump``), and a `stop when` gets a `when` block of its own just
before it (the same condition: it fires at the same time, first) that freezes S at
``S- + F- tau_p``; its event count is dropped from the Solution. The backends run it
unchanged.

``error_states = n`` on the result: adaptive methods measure the error (and choose
the first step) on the original states alone, so the steps, and the states, are
bit-identical to the call without sensitivities. rodas4 gets the Jacobian of the
joined system, derived symbolically like any field's; it is block lower triangular
(column j's diagonal block is dF/dh), and the backends factor only the states' W and
solve the columns by blocks with it (numpy/rosenbrock.py's block_solve,
shader/rosenbrock.py), so rodas4's states are bit-identical too.

Refused, each with a SensitivityError naming the reason (docs/language.md,
Sensitivities): coupled names, collapse, noise with a method other
than euler, params read by the solve statement, params another param's default
reads, ``dt``/``steps``/``t0``/``t1``, unknown names, and integer-valued expressions
on the differentiated path (``int``, ``floor`` ... of a param or state; an index that
reads one).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, replace

from ..errors import CallError
from .diff import NotDifferentiable, add, call, derivative, div, mul, neg, sub
from .nodes import Apply, Const, Expr, Field, Load, State, Sym, interning
from .ops import COMPARE, Op, SymKind, Type
from .passes import fold
from .jacobian import with_jacobian
from .names import taken_names, unique
from .rosenbrock import MAX_STATES as STIFF_MAX_STATES, STIFF
from .walk import rebuild, walk

F = Type.FLOAT
BUILTINS = ("dt", "steps", "t0", "t1", "t", "step")
_INIT = re.compile(r"^\s*init\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


class SensitivityError(CallError):
    """A ``sensitivities=`` request the compiler cannot (or will not) differentiate."""


@dataclass(frozen=True)
class Name:
    """One entry of ``sensitivities=``: a param, or ``init(x)`` (``state`` set)."""
    text: str               # as the user wrote it, normalised: "rho", "init(x)"
    param: str | None = None
    state: str | None = None


def parse_names(field: Field, names) -> tuple[Name, ...]:
    """The entries of ``sensitivities=`` checked against the field."""
    if isinstance(names, str):
        names = [names]
    try:
        names = list(names)
    except TypeError:
        raise SensitivityError(f"sensitivities must be a list of param names and init(x) "
                               f"entries, got {type(names).__name__}") from None
    if not names:
        raise SensitivityError("sensitivities=[] names nothing to differentiate; give param "
                               "names or init(x) entries, or leave it out")
    params = {p.name for p in field.params}
    states = field.state_names
    out: list[Name] = []
    for raw in names:
        if not isinstance(raw, str):
            raise SensitivityError(f"sensitivities entries must be str (a param name or "
                                   f"'init(x)'), got {type(raw).__name__} {raw!r}")
        m = _INIT.match(raw)
        if m:
            x = m.group(1)
            if x not in states:
                raise SensitivityError(f"sensitivities: `{raw}` names no state of field "
                                       f"{field.name} (its states: {', '.join(states)})")
            name = Name(f"init({x})", state=x)
        else:
            p = raw.strip()
            if p in BUILTINS:
                raise SensitivityError(
                    f"sensitivities: `{p}` cannot be differentiated: the step size, the number "
                    f"of steps and the time span are not parameters of the solution here")
            if p not in params:
                listing = ", ".join(sorted(params)) or "none"
                raise SensitivityError(f"sensitivities: `{p}` is not a param of field "
                                       f"{field.name} (its params: {listing}; init(x) names "
                                       f"a state's start value)")
            name = Name(p, param=p)
        if any(n.text == name.text for n in out):
            raise SensitivityError(f"sensitivities: `{name.text}` is named twice")
        out.append(name)
    return tuple(out)


def _refuse_field(field: Field) -> None:
    if field.coupled:
        raise SensitivityError(f"sensitivities are not available for field {field.name}: it "
                               f"has coupled names (`{field.coupled[0].name}`), whose values "
                               f"depend on other trajectories")
    if field.collapse is not None:
        raise SensitivityError(f"sensitivities are not available for field {field.name}: it "
                               f"has `collapse when`, which ends a basin by a condition")
    if field.noises and field.solver.method != "euler":
        raise SensitivityError(f"sensitivities of a stochastic field need method `euler` "
                               f"(Euler–Maruyama); field {field.name} uses "
                               f"`{field.solver.method}`")


def _refuse_param(field: Field, p: str) -> None:
    s = field.solver
    solver_exprs = [s.dt, s.steps, s.t0] + (s.adaptive.exprs() if s.adaptive else [])
    if any(e is not None and _reads_param(e, p) for e in solver_exprs):
        raise SensitivityError(f"sensitivities: param `{p}` is read by the solve statement "
                               f"(its step size, steps or time span): a derivative through "
                               f"the steps is not taken")
    for q in field.params:
        if q.default is not None and q.name != p and _reads_param(q.default, p):
            raise SensitivityError(f"sensitivities: param `{q.name}`'s default reads `{p}`; "
                                   f"params are differentiated as independent values, so "
                                   f"write that dependence in a `let` instead")


def _reads_param(e: Expr, p: str) -> bool:
    return any(isinstance(n, Sym) and n.kind is SymKind.PARAM and n.name == p for n in walk(e))


def _check_indices(field: Field, roots: list, names: tuple[Name, ...]) -> None:
    """No index on the differentiated path may read a state or a differentiated param
    (its derivative is not defined: the read is piecewise constant). ``interp``'s
    position is the exception: its reads' last index is ``floor(u)``, and the
    interpolation they make is continuous, its derivative the segment's slope."""
    varying = {("state", s.name) for s in field.states}
    varying |= {("param", n.param) for n in names if n.param}
    varying |= {("init", s.name) for s in field.states}
    for node in walk(*roots):
        if isinstance(node, Load):
            for sym in walk(*(node.index[:-1] if node.interp else node.index)):
                if isinstance(sym, Sym) and (sym.kind.value, sym.name) in varying:
                    raise SensitivityError(
                        f"sensitivities: the index of `{node.array}[...]` reads `{sym.name}`, "
                        f"an integer-valued expression on the differentiated path (it has no "
                        f"derivative)", span=node.span)


def state_name(state: str, name: Name, taken: set[str]) -> str:
    """The joined field's name of dh/dp: ``d_x_d_rho``, ``d_x_d_init_y`` (made unique)."""
    what = name.param if name.param else f"init_{name.state}"
    base = f"d_{state}_d_{what}"
    out = base
    while out in taken:
        out += "_"
    taken.add(out)
    return out


def _d(expr: Expr, wrt: Sym) -> Expr | None:
    """d expr / d wrt; None where it is 0."""
    try:
        e = derivative(expr, wrt)
    except NotDifferentiable as err:
        raise SensitivityError(f"sensitivities: {err.message} (on the differentiated path)",
                               span=err.span) from None
    return None if isinstance(e, Const) and e.value == 0 else e


def _column(expr: Expr, states: tuple[State, ...], S_syms: list[list[Sym]], j: int,
            name: Name, init_syms: list[list[Sym]] | None) -> Expr:
    """sum_k d expr/dh_k S_kj + d expr/dp_j, with d/dp_j through init(y) by
    ``init_syms`` (init(S_yj)); ``init_syms`` None: a start expression (no init reads)."""
    total = None
    for k, s in enumerate(states):
        total = add(total, mul(_d(expr, Sym(SymKind.STATE, s.name, F)), S_syms[k][j]))
    if name.param:
        total = add(total, _d(expr, Sym(SymKind.PARAM, name.param, F)))
    if init_syms is not None:
        for k, s in enumerate(states):
            total = add(total, mul(_d(expr, Sym(SymKind.INIT, s.name, F)), init_syms[k][j]))
    return Const(0.0, F) if total is None else fold(total)


def augment(field: Field, names: tuple[Name, ...]) -> tuple[Field, tuple[tuple[str, ...], ...]]:
    """The joined field, and the names of its sensitivity states [i][j]."""
    _refuse_field(field)
    for n in names:
        if n.param:
            _refuse_param(field, n.param)
    n_s, n_p = len(field.states), len(names)
    roots = list(field.derivs) + [s.init for s in field.states if s.init is not None]
    roots += [g for nz in field.noises for g in nz.diffusion if g is not None]
    roots += [v for e in field.events for _, v in e.assigns] + [e.cond for e in field.events]
    _check_indices(field, roots, names)
    if field.solver.method in STIFF and n_s * (1 + n_p) > STIFF_MAX_STATES:
        raise SensitivityError(
            f"sensitivities: method `{field.solver.method}` takes at most {STIFF_MAX_STATES} "
            f"states, and {n_s} states with {n_p} sensitivities make {n_s * (1 + n_p)}")
    taken = taken_names(field)
    snames = tuple(tuple(state_name(s.name, nm, taken) for nm in names) for s in field.states)
    with interning():
        S = [[Sym(SymKind.STATE, snames[i][j], F) for j in range(n_p)] for i in range(n_s)]
        S0 = [[Sym(SymKind.INIT, snames[i][j], F) for j in range(n_p)] for i in range(n_s)]
        new_states, new_derivs = [], []
        for j, nm in enumerate(names):          # column-major: name j, then state i
            for i, st in enumerate(field.states):
                if nm.state == st.name:
                    init = Const(1.0, F)
                elif st.init is None:
                    init = Const(0.0, F)
                else:
                    init = _column(st.init, field.states[:i], S, j, nm, None)
                new_states.append(State(snames[i][j], init, st.span))
                new_derivs.append(_column(field.derivs[i], field.states, S, j, nm, S0))
        noises = []
        for nz in field.noises:
            extra = []
            for j, nm in enumerate(names):
                for i in range(n_s):
                    g = nz.diffusion[i]
                    col = None if g is None else _column(g, field.states, S, j, nm, S0)
                    extra.append(None if isinstance(col, Const) and col.value == 0 else col)
            noises.append(replace(nz, diffusion=tuple(nz.diffusion) + tuple(extra)))
        offset = {(i, j): n_s + j * n_s + i for i in range(n_s) for j in range(n_p)}
        memory = None
        if field.events and not field.noises:   # the last event's tau_p and time
            base = n_s * (1 + n_p)
            T = [Sym(SymKind.STATE, unique(f"tau_d_{nm.param or 'init_' + nm.state}",
                                            taken), F) for nm in names]
            E = Sym(SymKind.STATE, unique("t_last_event", taken), F)
            new_states += [State(x.name, Const(0.0, F)) for x in T]
            new_states.append(State(E.name, Sym(SymKind.TIME, "t", F)))
            new_derivs += [Const(0.0, F)] * (n_p + 1)
            memory = (T, E, [base + j for j in range(n_p)], base + n_p)
        events, extra = [], field.n_when
        for e in field.events:
            if e.stop and not field.noises:     # the freeze, just before the stop
                events.append(_jump(replace(e, stop=False, block=extra), field, names, S,
                                    S0, offset, frozen=True, memory=memory))
                extra += 1
            events.append(e if e.stop else _jump(e, field, names, S, S0, offset,
                                                 memory=memory))
        events = tuple(events)
        joined = replace(field, states=field.states + tuple(new_states),
                         derivs=field.derivs + tuple(new_derivs), noises=tuple(noises),
                         events=events, error_states=n_s, jacobian=None)
    return with_jacobian(joined), snames


# --- events: the jump rule (Galan, Feehery & Barton 1999) --------------------------
def _comparisons(cond: Expr) -> list:
    """The float comparisons ``a OP b`` of an event's condition, in written order."""
    return [n for n in walk(cond) if isinstance(n, Apply) and n.op in COMPARE
            and n.args[0].type is F]


def _substitute(expr: Expr, values: dict[str, Expr]) -> Expr:
    """``expr`` with the states named in ``values`` replaced by those expressions."""
    def make(node, kids):
        if isinstance(node, Sym) and node.kind is SymKind.STATE and node.name in values:
            return values[node.name]
        if isinstance(node, Apply):
            return replace(node, args=kids)
        if isinstance(node, Load):
            return replace(node, index=kids)
        return node
    return rebuild(expr, make, {})


def _jump(event, field: Field, names, S, S0, offset, frozen: bool = False,
          memory=None) -> object:
    """The event with the sensitivity jump as assignments, evaluated (like every
    assignment) on the state just before the reset:

        tau_p = -(g_h S- + g_p) / (g_t + g_h F-),
        S+ = R_h S- + R_p + (R_h F- - F+) tau_p,

    ``g = a - b`` of the comparison that flipped: of the condition's float comparisons,
    the one nearest its boundary in time, ``|g| / |g_t + g_h F-|`` (the first in
    written order on a tie); ``F+`` is F at the reset state. A grazing crossing
    (``g_t + g_h F- == 0``, or no float comparison in the condition) makes the
    sensitivities NaN: every S+ is multiplied by ``den / den``. With noise the event
    is not located: ``S+ = R_h S- + R_p``. ``frozen``: a `stop when` (the block made
    for it, written just before it, fires at the same time): a stopped trajectory has
    ``F+ = 0`` and no reset, so ``S+ = S- + F- tau_p``."""
    n_s, n_p = len(field.states), len(names)
    t = Sym(SymKind.TIME, "t", F)
    reset = {field.states[k].name: v for k, v in event.assigns}
    R = [reset.get(st.name, Sym(SymKind.STATE, st.name, F)) for st in field.states]
    Fm = list(field.derivs)
    RhS = [[_column(R[i], field.states, S, j, nm, S0) for j, nm in enumerate(names)]
           for i in range(n_s)]
    out = []
    if field.noises:            # events at step ends: no time to differentiate
        for i in range(n_s):
            for j in range(n_p):
                out.append((offset[i, j], RhS[i][j]))
        return replace(event, assigns=tuple(event.assigns) + tuple(out))
    Fp = [_substitute(f, reset) if reset else f for f in field.derivs]
    if frozen:
        Fp = [None] * n_s
    RhF = []
    for i in range(n_s):
        total = None
        for k, st in enumerate(field.states):
            total = add(total, mul(_d(R[i], Sym(SymKind.STATE, st.name, F)), Fm[k]))
        RhF.append(Const(0.0, F) if total is None else total)
    # per candidate comparison: its time to the boundary, den, and tau_p per name
    best = None                 # (time, den, [tau_j])
    for cmp_ in _comparisons(event.cond):
        g = sub(cmp_.args[0], cmp_.args[1])
        den = _d(g, t)
        for k, st in enumerate(field.states):
            den = add(den, mul(_d(g, Sym(SymKind.STATE, st.name, F)), Fm[k]))
        den = Const(0.0, F) if den is None else den
        taus = [div(neg(_column(g, field.states, S, j, nm, S0)), den)
                for j, nm in enumerate(names)]
        taus = [Const(0.0, F) if x is None else x for x in taus]
        time = Apply(Op.DIV, (call(Op.ABS, g), call(Op.ABS, den)), F)
        if best is None:
            best = (time, den, taus)
            continue
        nearer = Apply(Op.LT, (time, best[0]), Type.BOOL)
        best = (Apply(Op.WHERE, (nearer, time, best[0]), F),
                Apply(Op.WHERE, (nearer, den, best[1]), F),
                [Apply(Op.WHERE, (nearer, a, b), F) for a, b in zip(taus, best[2])])
    if best is None:            # no float comparison: nothing to locate by
        best = (None, Const(0.0, F), [Const(0.0, F)] * n_p)
    _, den, taus = best
    nan_if_grazing = Apply(Op.DIV, (den, den), F)      # 1, or NaN where den == 0
    if memory is not None:      # a cascade (den == 0 at the last event's time): its tau_p
        T, E, t_rows, e_row = memory
        moves = Apply(Op.NE, (den, Const(0.0, F)), Type.BOOL)
        cascade = Apply(Op.EQ, (t, E), Type.BOOL)
        taus = [fold(Apply(Op.WHERE, (moves, x, T[j]), F)) for j, x in enumerate(taus)]
        nan_if_grazing = fold(Apply(Op.WHERE, (Apply(Op.OR, (moves, cascade), Type.BOOL),
                                               Const(1.0, F), nan_if_grazing), F))
    for i in range(n_s):
        jump = sub(RhF[i], Fp[i])
        for j in range(n_p):
            value = add(RhS[i][j], mul(jump, taus[j]))
            value = Const(0.0, F) if value is None else value
            out.append((offset[i, j], fold(Apply(Op.MUL, (value, nan_if_grazing), F))))
    if memory is not None:
        out += [(t_rows[j], fold(Apply(Op.MUL, (taus[j], nan_if_grazing), F)))
                for j in range(n_p)]
        out.append((e_row, t))
    return replace(event, assigns=tuple(event.assigns) + tuple(out))


# --- memo: one joined field per (field, names), so every cache downstream hits -------
_memo: dict = {}
_lock = threading.Lock()
MEMO_SIZE = 64


@dataclass(frozen=True)
class Joined:
    field: Field                            # the joined field (states, then S by columns)
    base: Field                             # the field asked for
    names: tuple[Name, ...]
    state_names: tuple[tuple[str, ...], ...]

    @property
    def n_states(self) -> int:
        return len(self.base.states)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(n.text for n in self.names)


def joined(field: Field, names) -> Joined:
    """The memoised ``augment`` of ``field`` for ``names`` (the entries of
    ``sensitivities=``)."""
    parsed = parse_names(field, names)
    key = (id(field), parsed)
    with _lock:
        hit = _memo.get(key)
    if hit is not None and hit.base is field:
        return hit
    aug, snames = augment(field, parsed)
    out = Joined(aug, field, parsed, snames)
    with _lock:
        if len(_memo) >= MEMO_SIZE:
            _memo.pop(next(iter(_memo)))
        _memo[key] = out
    return out
