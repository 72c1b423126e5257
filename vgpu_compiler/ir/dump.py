"""``dump(field) -> str``: a readable, deterministic and complete text of the IR.

Used by ``vgpuc ir`` and fit for hashing: spans are left out, every float is
printed with ``repr`` (round-trip exact), ints and floats differ (``3`` vs
``3.0``), and a subexpression used more than once is printed once as a
numbered temp (``%0 = sin(x)``) just before the first line that needs it.
No walk recurses: expressions of any depth are dumped.
"""
from __future__ import annotations

from fractions import Fraction

from .nodes import ArrayDecl, Axis, Const, CoupledAt, Expr, Field, Load, Reduce, Sym
from .ops import ARITH, COMPARE, LOGIC, Op, SymKind
from .rosenbrock import STIFF
from .walk import Numbering, children, field_roots, walk

_INFIX = (ARITH | COMPARE | LOGIC) - {Op.NEG, Op.NOT}


def _shared(field: Field, number: Numbering) -> set[int]:
    """Compound nodes referenced from more than one place (roots or distinct parents)."""
    roots = field_roots(field)
    refs: dict[int, int] = {}

    def count(nodes) -> None:
        for node in nodes:
            if children(node):
                refs[number(node)] = refs.get(number(node), 0) + 1

    count(roots)
    parents: set[int] = set()       # each parent's children count once, however often it recurs
    for node in walk(*roots):
        if number(node) not in parents:
            parents.add(number(node))
            count(children(node))
    return {num for num, count in refs.items() if count > 1}


class _Printer:
    def __init__(self, field: Field):
        self.number = Numbering()
        self.shared = _shared(field, self.number)
        self.temps: dict[int, str] = {}
        self.pending: list[str] = []      # temp definitions not yet written out

    def expr(self, root: Expr) -> str:
        """The text of ``root``, children first (temps already written stop the walk)."""
        texts: dict[int, str] = dict(self.temps)
        for node in walk(root, skip=lambda n: self.number(n) in self.temps):
            num = self.number(node)
            if num not in texts:
                texts[num] = self._named(num, self._text(node, texts))
        return texts[self.number(root)]

    def _named(self, num: int, text: str) -> str:
        if num in self.shared:
            name = f"%{len(self.temps)}"
            self.temps[num] = name
            self.pending.append(f"{name} = {text}")
            return name
        return text

    def _text(self, node: Expr, texts: dict[int, str]) -> str:
        if isinstance(node, Const):
            return _const(node.value)
        if isinstance(node, Sym):
            return f"init({node.name})" if node.kind is SymKind.INIT else node.name
        if isinstance(node, Reduce):
            return f"{node.op.value}({node.name})"
        if isinstance(node, (Load, CoupledAt)):
            name = node.array if isinstance(node, Load) else node.name
            return f"{name}[{', '.join(texts[self.number(i)] for i in node.index)}]"
        args = [texts[self.number(a)] for a in node.args]
        if node.op in _INFIX:
            return f"({args[0]} {node.op.value} {args[1]})"
        if node.op is Op.NEG:
            return f"-{args[0]}"
        if node.op is Op.NOT:
            return f"not {args[0]}"
        return f"{node.op.value}({', '.join(args)})"

    def lines(self, head: str, node: Expr | None, indent: str = "    ") -> list[str]:
        """``head`` followed by the text of ``node``, after any new temps it needs."""
        text = "" if node is None else self.expr(node)
        out = [indent + t for t in self.pending] + [indent + head + text]
        self.pending = []
        return out


def _const(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _dims(dims) -> str:
    return ", ".join(str(d) for d in dims)


def _axes(axes: tuple[Axis, ...] | None) -> str:
    if axes is None:
        return "none (the backend picks)"
    return ", ".join(f"{a.index} < {a.extent}" for a in axes)


def _arrays(title: str, arrays: tuple[ArrayDecl, ...]) -> list[str]:
    return [f"  {title}:"] + [f"    {a.name}[{_dims(a.dims)}]" for a in arrays]


def _fraction(v) -> str:
    """A coefficient as its fraction, or as its float64 value when the fraction is an
    irrational's long expansion (rosenbrock23's sqrt 2: ir/rosenbrock.py)."""
    v = Fraction(v)
    return str(v) if v.denominator < 10 ** 20 else repr(float(v))


def _fractions(values) -> str:
    return "[" + ", ".join(_fraction(v) for v in values) + "]"


def dump(field: Field, jacobian: bool = False) -> str:
    """The text of one IR field (deterministic: equal fields give equal text);
    ``jacobian``: also a Rosenbrock method's derived Jacobian, entry by entry."""
    p = _Printer(field)
    out = [f"field {field.name}", f"  grid: {_axes(field.grid)}",
           f"  basin: {_axes(field.basin)}", f"  dims: {', '.join(field.dims)}", "  params:"]
    for param in field.params:
        out += p.lines(f"{param.name} = ", param.default) if param.default is not None \
            else [f"    {param.name} (no default)"]
    out += _arrays("inputs", field.inputs) + _arrays("outputs", field.outputs)
    out.append("  states:")
    for k, state in enumerate(field.states):
        out += p.lines(f"{state.name} = ", state.init) if state.init is not None \
            else [f"    {state.name} from h0[..., {field.free_states.index(state)}]"]
    out.append("  coupled:")
    for c in field.coupled:
        out += p.lines(f"{c.name} (edge {c.edge.value}) = ", c.expr)
    out.append("  derivatives:")
    for state, deriv in zip(field.states, field.derivs):
        out += p.lines(f"d{state.name}/dt = ", deriv)
    for n in field.noises:      # (stochastic fields: the derivatives above are the drifts)
        out.append(f"  noise {n.name} (counter word k = {n.index}): dW = sqrt(dt) * Z")
        for k, state in enumerate(field.states):
            if n.diffusion[k] is not None:
                out += p.lines(f"d{state.name} += dW * ", n.diffusion[k])
            if n.slope and n.slope[k] is not None:
                out += p.lines(f"d/d{state.name} of that = ", n.slope[k])
    out += p.lines("collapse when ", field.collapse, "  ") if field.collapse is not None \
        else ["  collapse: none"]
    out.append("  flux:")
    for f in field.flux:
        index = ", ".join(p.expr(i) for i in f.index)
        out += p.lines(f"{f.output}[{index}] += ", f.value)
    if field.events:
        out.append("  events:")
    for e in field.events:
        out += p.lines("stop when " if e.stop else f"when #{e.block} ", e.cond)
        for k, value in e.assigns:
            out += p.lines(f"  {field.states[k].name} = ", value)
        for f in e.flux:
            index = ", ".join(p.expr(i) for i in f.index)
            out += p.lines(f"  flux {f.output}[{index}] += ", f.value)
    if field.observer_rules:        # (step-end observers: a lowered field's, ir/observers.py)
        out.append("  observers at step ends:")
    for r in field.observer_rules:
        out += p.lines(f"{field.states[r.index].name} = {r.kind} of ", r.expr)
    out += _solver(p, field)
    if jacobian:
        out += _jacobian(p, field)
    return "\n".join(out) + "\n"


def _jacobian(p: _Printer, field: Field) -> list[str]:
    """dF/dh (the nonzero entries) and dF/dt, as `vgpuc ir --jacobian` prints them."""
    jac = field.jacobian
    if jac is None:
        return [f"  jacobian: none (method {field.solver.method} does not use one; "
                f"{', '.join(STIFF)} do)"]
    nz = jac.nonzero()
    out = [f"  jacobian dF/dh ({len(nz)} of {jac.n * jac.n} entries nonzero; the others "
           f"are 0):"]
    for i, j in nz:
        out += p.lines(f"d(d{jac.states[i]}/dt)/d{jac.states[j]} = ", jac.matrix[i][j])
    if jac.time is None:
        out.append("  dF/dt: not needed (no derivative reads t)")
    else:
        out.append("  dF/dt:")
        for i, e in enumerate(jac.time):
            out += p.lines(f"d(d{jac.states[i]}/dt)/dt = ", e)
    return out


def _solver(p: _Printer, field: Field) -> list[str]:
    s, tab = field.solver, field.solver.tableau
    out = ["  solve:"] + p.lines(f"method {s.method}", None)
    if s.adaptive is not None:          # an adaptive method: its arguments, not dt/steps
        out += p.lines("t0 = ", s.t0)
        for name, expr in zip(s.adaptive.NAMES, s.adaptive.exprs()):
            if expr is not None:
                out += p.lines(f"{name} = ", expr)
        out.append(f"    embedded pair {tab.name}: q = {tab.q}, err = {_fractions(tab.err)}")
        if getattr(tab, "err2", None) is not None:     # dop853: Hairer's norm of two estimates
            out.append(f"    second estimate ({tab.norm} norm): err2 = {_fractions(tab.err2)}")
        if hasattr(tab, "gamma"):       # a Rosenbrock method (ir/rosenbrock.py)
            out.append(f"    rosenbrock: gamma = {_fraction(tab.gamma)}, stages solve (I/gamma - dt*J) K_s "
                       f"= F + sum c_sj K_j + dt*d_s*dF/dt, one LU per step (ir/jacobian.py: "
                       f"`vgpuc ir --jacobian` prints J)")
        return out
    out += p.lines("dt = ", s.dt) + p.lines("steps = ", s.steps) + p.lines("t0 = ", s.t0)
    out.append(f"    tableau {tab.name}: c = {_fractions(tab.c)}, b = {_fractions(tab.b)}, "
               f"a = [{', '.join(_fractions(row) for row in tab.a)}]")
    return out


def dump_program(program) -> str:
    """Every field of a program, separated by blank lines."""
    return "\n".join(dump(f) for f in program.fields)
