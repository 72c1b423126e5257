"""Part of stage 3: stochastic fields (``noise xi``), checked and split (docs/language.md, Noise).

A noise may appear only in derivatives, and only linearly: each derivative is
``F + G1 * xi1 + G2 * xi2 + ...`` with ``F`` and the ``G``s free of noise.
``check_linear`` enforces that on the AST (where every name has its position,
so an error points at the noise), ``split`` takes the typed IR of a derivative
apart into its drift ``F`` and the coefficient ``G_k`` of each noise, and
``noises`` builds the IR ``Noise`` declarations, with the rules of the methods:
``euler`` is Euler–Maruyama, ``milstein`` needs diagonal noise (each noise in
one equation, each equation with at most one noise, its ``G`` reading no other
state) and gets ``dG/dx`` from ``ir.diff``, taken as 0 where ``G`` is 0 (the
strong zero: Milstein's term is ``G * dG/dx``); any other method is an error.

Every walk here is iterative: derivatives of any depth are fine.
"""
from __future__ import annotations

from ..errors import DeclarationError, Span, TypeError_
from ..ir import diff as D
from ..ir import nodes as N
from ..ir.ops import COMPARE, Op, SymKind, Type
from ..ir.passes import fold
from ..ir.embedded import ADAPTIVE
from ..ir.rosenbrock import STIFF
from ..ir.tableau import TABLEAUX
from ..ir.walk import children, walk
from . import ast as A

NOISE_METHODS = ("euler", "milstein")
_FORM = "each derivative must read `F + G1 * xi1 + G2 * xi2 + ...` with F and the G's free of noise"


def _kids(e: A.Expr) -> tuple:
    if isinstance(e, A.Unary):
        return (e.operand,)
    if isinstance(e, A.Binary):
        return (e.left, e.right)
    if isinstance(e, A.Call):
        return e.args
    if isinstance(e, A.Index):
        return e.indices
    return ()


def _why(e: A.Expr) -> str:
    """Why a noise under ``e`` (not a sum, a negation or a product) is not linear."""
    if isinstance(e, A.Unary):
        return "in a condition"
    if isinstance(e, A.Call):
        return f"inside `{e.func.name}(...)`"
    if isinstance(e, A.Index):
        return f"in an index of `{e.target.name}`"
    op = e.op
    if op is Op.DIV:
        return "in a division (write the coefficient as a factor: `(a / b) * xi`)"
    if op is Op.POW:
        return "in a power"
    if op in COMPARE or op in (Op.AND, Op.OR):
        return "in a condition"
    return f"under `{op.value}`"


def check_linear(expr: A.Expr, noise_names) -> dict[str, A.Name]:
    """Check that ``expr`` is linear in the noises; returns each noise it uses -> its
    first use. Raises a TypeError_ naming the noise, at the noise."""
    first: dict[int, A.Name | None] = {}        # id(node) -> the first noise under it
    stack = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        kids = _kids(node)
        if not ready:
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids))
            continue
        if isinstance(node, A.Name):
            first[id(node)] = node if node.name in noise_names else None
        else:
            first[id(node)] = next((first[id(k)] for k in kids if first[id(k)] is not None),
                                   None)
    uses: dict[str, A.Name] = {}
    todo = [expr]
    while todo:
        node = todo.pop()
        noise = first[id(node)]
        if noise is None:
            continue
        if isinstance(node, A.Name):
            uses.setdefault(node.name, node)
        elif isinstance(node, A.Unary) and node.op is Op.NEG:
            todo.append(node.operand)
        elif isinstance(node, A.Binary) and node.op in (Op.ADD, Op.SUB):
            todo.extend((node.right, node.left))
        elif isinstance(node, A.Binary) and node.op is Op.MUL:
            left, right = first[id(node.left)], first[id(node.right)]
            if left is not None and right is not None:
                raise TypeError_(f"noise `{right.name}` multiplies noise `{left.name}`: a "
                                 f"product of noises is not linear; {_FORM}", span=right.span)
            todo.append(node.left if left is not None else node.right)
        else:
            raise TypeError_(f"noise `{noise.name}` {_why(node)}: a noise may appear only "
                             f"linearly; {_FORM}", span=noise.span)
    return uses


def split(expr: N.Expr) -> tuple[N.Expr, dict[str, N.Expr]]:
    """A derivative linear in the noises (``check_linear`` passed) -> (F, {noise: G})."""
    noisy: set[int] = set()
    for node in walk(expr):
        if (isinstance(node, N.Sym) and node.kind is SymKind.NOISE) or any(
                k.uid in noisy for k in children(node)):
            noisy.add(node.uid)
    if expr.uid not in noisy:
        return expr, {}
    parts: dict[int, tuple] = {}

    def part(e: N.Expr) -> tuple:
        return parts[e.uid] if e.uid in noisy else (e, {})

    for node in walk(expr, kids=lambda n: children(n) if n.uid in noisy else ()):
        if node.uid not in noisy:
            continue
        if isinstance(node, N.Sym):
            parts[node.uid] = (D.ZERO, {node.name: N.Const(1.0, Type.FLOAT)})
            continue
        op = node.op
        if op is Op.NEG:
            f, g = part(node.args[0])
            parts[node.uid] = (D.neg(f), {k: D.neg(v) for k, v in g.items()})
            continue
        (fa, ga), (fb, gb) = part(node.args[0]), part(node.args[1])
        if op in (Op.ADD, Op.SUB):
            comb = D.add if op is Op.ADD else D.sub
            gs = {k: comb(ga.get(k, D.ZERO), gb.get(k, D.ZERO)) for k in {**ga, **gb}}
            parts[node.uid] = (comb(fa, fb), gs)
        else:
            assert op is Op.MUL, op     # check_linear allows nothing else
            if node.args[0].uid in noisy:
                c = node.args[1]
                parts[node.uid] = (D.mul(fa, c), {k: D.mul(v, c) for k, v in ga.items()})
            else:
                c = node.args[0]
                parts[node.uid] = (D.mul(c, fb), {k: D.mul(c, v) for k, v in gb.items()})
    f, g = parts[expr.uid]
    drift = N.Const(0.0, Type.FLOAT) if f is D.ZERO else fold(f)
    return drift, {k: fold(v) for k, v in g.items() if v is not D.ZERO}


def noises(noise_names: list[A.Name], states: list[str], derivs: list[N.Expr],
           uses: list[dict[str, A.Name]], method: A.Name) -> tuple[tuple[N.Expr, ...],
                                                                tuple[N.Noise, ...]]:
    """The drifts and the IR noises of a field (its derivatives typed, linear)."""
    if not noise_names:
        return tuple(derivs), ()
    known = method.name in TABLEAUX or method.name in ADAPTIVE or method.name in STIFF
    if method.name not in NOISE_METHODS and known:
        raise DeclarationError(f"method `{method.name}` cannot integrate a field with noise "
                               f"(`{noise_names[0].name}`); use `euler` (Euler–Maruyama) or "
                               "`milstein`", span=method.span)
    drifts, columns = [], {n.name: [None] * len(states) for n in noise_names}
    for i, d in enumerate(derivs):
        f, g = split(d)
        drifts.append(f)
        for name, coeff in g.items():
            columns[name][i] = coeff
    slopes = {n.name: () for n in noise_names}
    if method.name == "milstein":
        slopes = _milstein(noise_names, states, columns, uses)
    out = tuple(N.Noise(n.name, k, tuple(columns[n.name]), slopes[n.name], n.span)
                for k, n in enumerate(noise_names))
    return tuple(drifts), out


def _milstein(noise_names, states, columns, uses) -> dict[str, tuple]:
    """dG/dx of each noise's coefficient, after checking that the noise is diagonal."""
    eq_noise: dict[int, str] = {}
    slopes = {}
    for n in noise_names:
        col, slope = columns[n.name], [None] * len(states)
        rows = [i for i, g in enumerate(col) if g is not None]
        if len(rows) > 1:
            raise DeclarationError(
                f"`milstein` needs diagonal noise, but noise `{n.name}` drives `d{states[rows[0]]}"
                f"/dt` and `d{states[rows[1]]}/dt`; give each equation its own noise, or use "
                "`euler` (Euler–Maruyama)", span=uses[rows[1]][n.name].span)
        for i in rows:
            if i in eq_noise:
                raise DeclarationError(
                    f"`milstein` needs diagonal noise, but `d{states[i]}/dt` has two noises "
                    f"(`{eq_noise[i]}` and `{n.name}`); use `euler` (Euler–Maruyama)",
                    span=uses[i][n.name].span)
            eq_noise[i] = n.name
            here: Span = uses[i][n.name].span
            for e in walk(col[i]):
                other = isinstance(e, N.Sym) and e.kind is SymKind.STATE and e.name != states[i]
                if other or isinstance(e, (N.CoupledAt, N.Reduce)) or (
                        isinstance(e, N.Sym) and e.kind is SymKind.COUPLED):
                    what = f"state `{e.name}`" if other else f"coupled value `{e.name}`"
                    raise DeclarationError(
                        f"`milstein` needs diagonal noise: the coefficient of noise `{n.name}` "
                        f"in `d{states[i]}/dt` reads {what}; it may depend only on "
                        f"`{states[i]}` itself (or use `euler`)", span=here)
            x = N.Sym(SymKind.STATE, states[i], Type.FLOAT)
            try:
                g_x = D.derivative(col[i], x)
            except D.NotDifferentiable as e:
                raise TypeError_(f"`milstein` needs d/d{states[i]} of the coefficient of noise "
                                 f"`{n.name}`: {e.message}", span=e.span or here) from None
            # the update multiplies G by G_x: 0 where G is 0 (the strong zero, ir/diff.py)
            slope[i] = fold(D.guard(col[i], g_x)) if g_x is not None else g_x
        slopes[n.name] = tuple(slope)
    return slopes
