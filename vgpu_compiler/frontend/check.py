"""Stage 3: AST -> IR ``Program``, enforcing every rule of docs/language.md.

``scope`` registers the declarations of a field, ``exprs`` types expressions;
this module checks the field-level rules (one equation per state, one solve,
basin requirements ...) and assembles the frozen IR ``Field``.
"""
from __future__ import annotations

from ..errors import DeclarationError, NameError_, Span, TypeError_
from ..ir import nodes as N
from ..ir.ops import Edge, Type
from ..ir.embedded import ADAPTIVE
from ..ir.rosenbrock import MAX_STATES as STIFF_MAX_STATES, STIFF
from ..ir.tableau import TABLEAUX
from . import ast as A
from .exprs import ALL, Context, ExprChecker, uses
from .noise import check_linear, noises as split_noises
from .scope import Scope, build_scope, describe

PARAM_CTX = Context("a param default", frozenset({"param"}),
                    rule="; a default is a constant: literals and other params")
SOLVE_CTX = Context("a solve argument", frozenset({"param", "dim"}),
                    rule="; it is the same for every trajectory: literals, params and dims")
COUPLED_CTX = Context("a coupled expression", ALL - {"coupled"},
                      rule="; coupled values are computed before they are shared")
INIT_ALLOWED = frozenset({"param", "dim", "grid", "basin", "input", "t", "state"})
INIT_RULE = ("; a start value may use params, dims, grid and basin indices, inputs, `t` "
             "and the states declared before it")
SOLVE_ARGS = ("dt", "steps", "t0")
ADAPTIVE_ARGS = ("t0",) + N.Adaptive.NAMES
DERIV_CTX = Context("a derivative", ALL | {"noise"})
COLLAPSE_CTX = Context("the collapse condition")
FLUX_CTX = Context("a flux statement")
EVENT_RULE = "; an event sees its own trajectory's state, not its basin's coupled values"
EVENT_CTX = Context("an event condition", ALL - {"coupled"}, rule=EVENT_RULE)
ASSIGN_CTX = Context("an event assignment", ALL - {"coupled"}, rule=EVENT_RULE)
EVENT_FLUX_CTX = Context("a flux in a `when` block", ALL - {"coupled"}, rule=EVENT_RULE)
OBSERVE_RULE = ("; an observer sees its own trajectory: no noise, and not its basin's coupled "
                "values")
OBSERVE_CTX = Context("an observer", ALL - {"coupled"}, rule=OBSERVE_RULE)
_BLOCK_WORD = {A.ParamDecl: "param", A.ArraysDecl: "an array declaration",
               A.StateDecl: "state", A.LetDecl: "let", A.Deriv: "an equation",
               A.GridDecl: "grid or basin", A.CoupledDecl: "coupled",
               A.CollapseDecl: "collapse", A.SolveDecl: "solve", A.NoiseDecl: "noise",
               A.WhenBlock: "a nested `when`", A.StopWhen: "stop when",
               A.ObserveDecl: "observe"}
# methods that are not a tableau of their own: name -> the tableau of their drift step
NOISE_ONLY_METHODS = {"milstein": "euler"}


def check_program(program: A.ProgramAST) -> N.Program:
    """Check every field of a program and build its IR (nodes interned per program)."""
    with N.interning():
        return _check_program(program)


def _check_program(program: A.ProgramAST) -> N.Program:
    if not program.fields:
        raise DeclarationError("the program has no field; write `field NAME { ... }`",
                               span=Span(1, 1))
    seen: dict[str, A.FieldDef] = {}
    fields = []
    for fielddef in program.fields:
        name = fielddef.name
        if name.name in seen:
            raise NameError_(f"a second field named `{name.name}` (the first is on line "
                             f"{seen[name.name].span.line})", span=name.span)
        seen[name.name] = fielddef
        fields.append(check_field(fielddef))
    return N.Program(tuple(fields))


def check_field(fielddef: A.FieldDef) -> N.Field:
    scope = build_scope(fielddef)
    _stiff_limits(scope)
    exprs = ExprChecker(scope)
    for name in scope.lets:             # type every let, used or not
        exprs.let_body(name)
    _needs_basin(scope)
    states = _states(scope, exprs)
    derivs, noises = _derivs(scope, exprs)
    return N.Field(
        name=fielddef.name.name,
        states=states,
        derivs=derivs,
        noises=noises,
        params=_params(scope, exprs),
        inputs=tuple(_array(a) for a in scope.inputs),
        outputs=tuple(_array(a) for a in scope.outputs),
        dims=tuple(scope.dims),
        grid=scope.grid,
        basin=scope.basin,
        coupled=_coupled(scope, exprs),
        collapse=_collapse(scope, exprs),
        flux=_flux(scope, exprs),
        solver=_solver(scope, exprs),
        span=fielddef.span,
        events=_events(scope, exprs),
        implicit_grid=scope.grid_decl is None,
        observers=_observers(scope, exprs),
    )


def _observers(scope: Scope, exprs: ExprChecker) -> tuple[N.Observer, ...]:
    """``observe NAME = KIND(expr)``: a known kind, one argument (a condition for
    ``first``), an expression that may use what a derivative may except noise and
    coupled names."""
    result = []
    for decl in scope.observers:
        kind = decl.kind.name
        if kind not in N.OBSERVER_KINDS:
            raise NameError_(f"unknown observer `{kind}`; use one of "
                             f"{', '.join(N.OBSERVER_KINDS)}", span=decl.kind.span)
        if len(decl.args) != 1:
            raise TypeError_(f"`{kind}` takes one argument (an expression{', a condition' if kind == 'first' else ''}), "
                             f"got {len(decl.args)}", span=decl.span)
        arg = decl.args[0]
        expr = exprs.cond(arg, OBSERVE_CTX) if kind == "first" else exprs.float(arg, OBSERVE_CTX)
        result.append(N.Observer(decl.name.name, kind, expr, decl.span))
    return tuple(result)


def _array(decl: A.ArrayDecl) -> N.ArrayDecl:
    dims = tuple(d.name if isinstance(d, A.Name) else int(d.value) for d in decl.dims)
    return N.ArrayDecl(decl.name.name, dims, decl.span)


def _needs_basin(scope: Scope) -> None:
    if scope.basin is not None:
        return
    users = [(c.span, "`coupled`") for c in scope.coupled]
    users += [(c.span, "`collapse`") for c in scope.collapse]
    if users:
        span, what = min(users, key=lambda u: (u[0].line, u[0].column))
        raise DeclarationError(f"{what} needs a `basin` statement (for example "
                               "`basin l < 64`) to say which trajectories share it",
                               span=span)


def _stiff_limits(scope: Scope) -> None:
    """What the stiff methods (ir/rosenbrock.py: rodas4, ...) cannot integrate: noise, coupled values, more
    than 32 states (each trajectory factors its own n x n matrix)."""
    if not scope.solve or scope.solve[0].method.name not in STIFF:
        return
    method = scope.solve[0].method.name
    if scope.noises:
        noise = scope.noises[0]
        raise DeclarationError(f"method `{method}` cannot integrate a field with noise "
                               f"(`{noise.name}`): it is a method for stiff ODEs, not an SDE "
                               f"scheme; use `euler` (Euler–Maruyama) or `milstein`",
                               span=noise.span)
    if scope.coupled:
        item = scope.coupled[0]
        raise DeclarationError(f"method `{method}` cannot integrate a field with coupled "
                               f"values (`{item.name.name}`): its Jacobian is per trajectory, "
                               f"and a coupled value depends on the whole basin; use an "
                               f"explicit method (dopri5, tsit5, bs3)", span=item.span)
    if len(scope.states) > STIFF_MAX_STATES:
        item = scope.states[STIFF_MAX_STATES]
        raise DeclarationError(f"method `{method}` takes at most {STIFF_MAX_STATES} states "
                               f"(each trajectory factors its own n x n matrix); field "
                               f"`{scope.fielddef.name.name}` has {len(scope.states)}, and "
                               f"`{item.name.name}` is state {STIFF_MAX_STATES + 1}; use an "
                               f"explicit method (dopri5, tsit5) for larger systems",
                               span=item.span)


# --- params and states ------------------------------------------------------------
def _params(scope: Scope, exprs: ExprChecker) -> tuple[N.Param, ...]:
    params = []
    for decl in scope.params:
        default = None
        if decl.default is not None:
            default = exprs.float(decl.default, PARAM_CTX)
        params.append(N.Param(decl.name.name, default, decl.span))
    _param_cycles(scope, {p.name: p.default for p in params})
    return tuple(params)


def _param_cycles(scope: Scope, defaults: dict[str, N.Expr | None]) -> None:
    """A NameError_ for the first param whose default depends on itself, found by a
    depth-first walk over the defaults in declaration order (on an explicit stack:
    chains of thousands of params are fine)."""
    deps = {name: sorted(n for k, n in uses(d) if k == "param") if d is not None else []
            for name, d in defaults.items()}
    done: set[str] = set()
    for root in deps:
        if root in done:
            continue
        path, todo = [root], [iter(deps[root])]
        while todo:
            dep = next(todo[-1], None)
            if dep is None:
                done.add(path.pop())
                todo.pop()
            elif dep in path:
                chain = " -> ".join(path[path.index(dep):] + [dep])
                raise NameError_(f"the default of param `{dep}` depends on itself ({chain})",
                                 span=scope.names[dep].decl.span)
            elif dep not in done:
                path.append(dep)
                todo.append(iter(deps[dep]))


def _states(scope: Scope, exprs: ExprChecker) -> tuple[N.State, ...]:
    if not scope.states:
        raise DeclarationError(f"field `{scope.fielddef.name.name}` has no state; declare "
                               "one with `state x`", span=scope.fielddef.name.span)
    states, before = [], []
    for item in scope.states:
        init = None
        if item.init is not None:
            ctx = Context(f"the start value of `{item.name.name}`", INIT_ALLOWED,
                          frozenset(before), INIT_RULE)
            init = exprs.float(item.init, ctx)
        states.append(N.State(item.name.name, init, item.span))
        before.append(item.name.name)
    return tuple(states)


def _derivs(scope: Scope, exprs: ExprChecker) -> tuple[N.Expr, ...]:
    found: dict[str, A.Deriv] = {}
    for deriv in scope.derivs:
        name = deriv.state.name
        kind = scope.kind(name)
        if kind != "state":
            what = f"is {describe(kind)}" if kind else "is not declared"
            raise NameError_(f"`d{name}/dt`: `{name}` {what}; an equation needs a state",
                             span=deriv.state.span)
        if name in found:
            raise DeclarationError(f"a second equation for `{name}` (the first is on line "
                                   f"{found[name].span.line}); each state has exactly one",
                                   span=deriv.span)
        found[name] = deriv
    for item in scope.states:
        if item.name.name not in found:
            raise DeclarationError(f"state `{item.name.name}` has no equation; add "
                                   f"`d{item.name.name}/dt = ...`", span=item.name.span)
    noise_names = {n.name for n in scope.noises}
    asts = [found[s.name.name].expr for s in scope.states]
    uses = [check_linear(e, noise_names) if noise_names else {} for e in asts]
    typed = [exprs.float(e, DERIV_CTX) for e in asts]
    method = scope.solve[0].method if scope.solve else None
    if method is None:
        return tuple(typed), ()
    return split_noises(scope.noises, [s.name.name for s in scope.states], typed, uses, method)


# --- coupling, collapse, flux -------------------------------------------------------
def _coupled(scope: Scope, exprs: ExprChecker) -> tuple[N.Coupled, ...]:
    result = []
    for item in scope.coupled:
        edge = Edge.CLAMP
        if item.edge is not None:
            try:
                edge = Edge(item.edge.name)
            except ValueError:
                raise NameError_(f"unknown edge rule `{item.edge.name}`; use clamp, wrap "
                                 "or zero", span=item.edge.span) from None
        value = exprs.float(item.expr, COUPLED_CTX)
        result.append(N.Coupled(item.name.name, value, edge, item.span))
    return tuple(result)


def _collapse(scope: Scope, exprs: ExprChecker) -> N.Expr | None:
    if not scope.collapse:
        return None
    if len(scope.collapse) > 1:
        raise DeclarationError("a second `collapse` statement; a field has at most one "
                               f"(the first is on line {scope.collapse[0].span.line})",
                               span=scope.collapse[1].span)
    return exprs.cond(scope.collapse[0].cond, COLLAPSE_CTX)


def _flux(scope: Scope, exprs: ExprChecker) -> tuple[N.Flux, ...]:
    return tuple(_one_flux(scope, exprs, stmt, FLUX_CTX) for stmt in scope.flux)


def _one_flux(scope: Scope, exprs: ExprChecker, stmt: A.FluxStmt, ctx: Context) -> N.Flux:
    name = stmt.target.name
    kind = scope.kind(name)
    if kind != "output":
        what = describe(kind) if kind else "not declared"
        err = NameError_ if kind is None else TypeError_
        raise err(f"`flux` writes into an output array; `{name}` is {what} "
                  f"(declare it with `output {name}[...]`)", span=stmt.target.span)
    rank = len(scope.array(name).dims)
    index_ctx = Context("a flux index", ctx.allowed, rule=ctx.rule)
    index = exprs.indices(stmt, rank, index_ctx)
    value = exprs.float(stmt.value, ctx)
    return N.Flux(name, index, value, stmt.span)


# --- events ------------------------------------------------------------------------
def _events(scope: Scope, exprs: ExprChecker) -> tuple[N.Event, ...]:
    """``when`` blocks and ``stop when``, in written order."""
    result, blocks = [], 0
    for stmt in scope.events:
        cond = exprs.cond(stmt.cond, EVENT_CTX)
        if isinstance(stmt, A.StopWhen):
            result.append(N.Event(cond, stop=True, span=stmt.span))
            continue
        if not stmt.body:
            raise DeclarationError("an empty `when` block; it needs at least one state "
                                   "assignment (`x = ...`) or `flux`", span=stmt.span)
        assigns, flux, seen = [], [], {}
        names = [s.name.name for s in scope.states]
        for item in stmt.body:
            if isinstance(item, A.FluxStmt):
                flux.append(_one_flux(scope, exprs, item, EVENT_FLUX_CTX))
            elif isinstance(item, A.Assign):
                assigns.append(_assign(scope, exprs, item, names, seen))
            else:
                word = _BLOCK_WORD.get(type(item), "this statement")
                raise DeclarationError(f"{word} does not belong in a `when` block; it holds "
                                       "state assignments (`x = ...`) and `flux` only",
                                       span=item.span)
        result.append(N.Event(cond, tuple(assigns), tuple(flux), block=blocks, span=stmt.span))
        blocks += 1
    return tuple(result)


def _assign(scope: Scope, exprs: ExprChecker, item: A.Assign, names: list,
            seen: dict) -> tuple[int, N.Expr]:
    name = item.target.name
    kind = scope.kind(name)
    if kind != "state":
        if kind is None:
            raise NameError_(f"`{name}` is not declared; a `when` block assigns states",
                             span=item.target.span)
        raise NameError_(f"`{name}` is {describe(kind)}; a `when` block may assign only "
                         "states", span=item.target.span)
    if name in seen:
        raise DeclarationError(f"`{name}` is assigned twice in one `when` block (first on "
                               f"line {seen[name].span.line})", span=item.span)
    seen[name] = item
    return names.index(name), exprs.float(item.value, ASSIGN_CTX)


# --- solve ------------------------------------------------------------------------------
def _solver(scope: Scope, exprs: ExprChecker) -> N.Solver:
    if not scope.solve:
        raise DeclarationError(f"field `{scope.fielddef.name.name}` has no `solve` "
                               "statement; add for example `solve rk4(dt = 0.01, steps = 100)`",
                               span=scope.fielddef.name.span)
    if len(scope.solve) > 1:
        raise DeclarationError("a second `solve` statement; a field has exactly one (the "
                               f"first is on line {scope.solve[0].span.line})",
                               span=scope.solve[1].span)
    decl = scope.solve[0]
    method = decl.method.name
    if method in ADAPTIVE or method in STIFF:
        return _adaptive_solver(decl, exprs)
    if method not in TABLEAUX and method not in NOISE_ONLY_METHODS:
        names = ", ".join([*TABLEAUX, *NOISE_ONLY_METHODS, *ADAPTIVE, *STIFF])
        raise NameError_(f"unknown method `{method}`; use one of {names}",
                         span=decl.method.span)
    args = _solve_args(decl)
    dt = exprs.float(args["dt"].value, SOLVE_CTX)
    steps = exprs.int(args["steps"].value, SOLVE_CTX, "`steps`")
    t0 = exprs.float(args["t0"].value, SOLVE_CTX) if "t0" in args \
        else N.Const(0.0, Type.FLOAT)
    tableau = TABLEAUX[NOISE_ONLY_METHODS.get(method, method)]
    return N.Solver(method, tableau, dt, steps, t0, decl.span)


def _adaptive_solver(decl: A.SolveDecl, exprs: ExprChecker) -> N.Solver:
    """``solve dopri5(t1 = .., rtol = .., ...)``: every argument optional here (t1 may
    come at call time), dt and steps refused (the method chooses its steps)."""
    method = decl.method.name
    args: dict[str, A.SolveArg] = {}
    for arg in decl.args:
        name = arg.name.name
        if name in ("dt", "steps"):
            hint = "dt0 = (a first step) or dtmax = " if name == "dt" else "max_steps = "
            raise DeclarationError(f"`{name}` is not an argument of the adaptive method "
                                   f"{method}: it chooses its own steps (give t1 = ..., "
                                   f"and {hint}... if you need to)", span=arg.span)
        if name not in ADAPTIVE_ARGS:
            raise NameError_(f"unknown argument `{name}` of solve {method}; it takes "
                             f"{', '.join(ADAPTIVE_ARGS)}", span=arg.name.span)
        if name in args:
            raise DeclarationError(f"`{name}` is given twice", span=arg.span)
        args[name] = arg
    given = {}
    for name in N.Adaptive.NAMES:
        if name in args:
            value = args[name].value
            given[name] = (exprs.int(value, SOLVE_CTX, "`max_steps`") if name == "max_steps"
                           else exprs.float(value, SOLVE_CTX))
    t0 = exprs.float(args["t0"].value, SOLVE_CTX) if "t0" in args \
        else N.Const(0.0, Type.FLOAT)
    tableau = ADAPTIVE[method] if method in ADAPTIVE else STIFF[method]
    return N.Solver(method, tableau, N.Const(0.0, Type.FLOAT), N.Const(0, Type.INT),
                    t0, decl.span, adaptive=N.Adaptive(**given))


def _solve_args(decl: A.SolveDecl) -> dict[str, A.SolveArg]:
    args: dict[str, A.SolveArg] = {}
    for arg in decl.args:
        name = arg.name.name
        if name not in SOLVE_ARGS:
            raise NameError_(f"unknown argument `{name}` of solve; it takes dt, steps "
                             "and t0", span=arg.name.span)
        if name in args:
            raise DeclarationError(f"`{name}` is given twice", span=arg.span)
        args[name] = arg
    for name in ("dt", "steps"):
        if name not in args:
            raise DeclarationError(f"`solve` needs `{name} = ...`", span=decl.span)
    return args

