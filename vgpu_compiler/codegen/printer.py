"""The one C-style printer of ``codegen.ir`` statements.

GLSL, WGSL and C share the layout (braces, ``if``/``else if``, ``for``, infix operators
of the same precedence, ``//`` comments); a ``Target`` (codegen/targets, the word table
the field expressions' printer reads too) holds what each spells its own way: type
names, literals, ``select``, the declaration of a local, the ``for`` header, builtins.

Parentheses follow the tree: an operand is put in parentheses where the operator
precedence would otherwise regroup it, and also where it is a different operator of
the same precedence (``(a * b) / c``, never ``a * b / c``) or a different logic
operator (WGSL requires that), so the printed text evaluates in exactly the order the
tree gives, and reads so.
"""
from __future__ import annotations

from ..ir.ops import Op
from . import ir

# precedence of the infix operators, the same in the three languages
PREC = {Op.OR: 1, Op.AND: 2, Op.EQ: 3, Op.NE: 3, Op.LT: 4, Op.LE: 4, Op.GT: 4, Op.GE: 4,
        Op.ADD: 5, Op.SUB: 5, Op.MUL: 6, Op.DIV: 6}
INFIX = {Op.OR: "||", Op.AND: "&&", Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=",
         Op.GT: ">", Op.GE: ">=", Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/"}
UNARY_PREC, ATOM, SELECT_PREC = 7, 8, 0
# 0/1 flag logic (ir.Bits): an operand is in parentheses unless it is an atom, a unary
# one on the right or (on the left) the same operator (WGSL allows no other), and the
# whole is in parentheses wherever it is an operand
BIT_INFIX = {ir.Bit.AND: "&", ir.Bit.OR: "|", ir.Bit.XOR: "^", ir.Bit.SHR: ">>",
             ir.Bit.SHL: "<<"}
BITS_PREC = 0.5
# calls the target spells in its expression table (atomic_add, atomic_cas)
TABLE_CALLS = frozenset({"atomic_add", "atomic_cas"})


class Printer:
    """Prints statements of ``codegen.ir`` with a target (codegen/targets)."""

    def __init__(self, target, splices: dict | None = None):
        self.t = target
        self.splices = splices or {}

    # expressions ----------------------------------------------------------------------
    def expr(self, e) -> str:
        return self._expr(e)[0]

    def _expr(self, e) -> tuple[str, int]:
        """Text and precedence of ``e``."""
        if isinstance(e, ir.Var):
            return e.name, ATOM
        if isinstance(e, ir.Index):
            return f"{e.name}[{self.expr(e.index)}]", ATOM
        if isinstance(e, ir.Elem):
            return self.t.buffer_read.format(buffer=e.buffer, index=self.expr(e.index)), ATOM
        if isinstance(e, ir.Lit):
            return self._literal(e), ATOM
        if isinstance(e, ir.Raw):
            return e.text, SELECT_PREC
        if isinstance(e, ir.UniformLoad):
            return self.t.uniform_load.format(e.name), ATOM
        if isinstance(e, ir.Call):
            args = [self.expr(a) for a in e.args]
            if e.fn == "to_float":          # an int to the working float (the cast)
                return self.t.cast.format(*args, F=self.t.F), ATOM
            if e.fn in TABLE_CALLS and e.fn not in self.t.builtins:
                return getattr(self.t, e.fn).format(*args), ATOM
            return self.t.builtin(e.fn, args), ATOM
        if isinstance(e, ir.Un):
            text, p = self._expr(e.a)
            text = text if p >= UNARY_PREC else f"({text})"
            return (self.t.not_ if e.op is Op.NOT else self.t.neg).format(text), UNARY_PREC
        if isinstance(e, ir.Select):
            lazy = "?" in self.t.select      # c ? a : b (else a call: no parentheses)
            at = (UNARY_PREC, SELECT_PREC + 1, SELECT_PREC + 1) if lazy else (0, 0, 0)
            parts = [self._operand(x, p) for x, p in zip((e.cond, e.a, e.b), at)]
            text = self.t.select.format(*parts)
            if text.startswith("(") and text.endswith(")") and _balanced(text):
                text = text[1:-1]               # (the printer adds them where needed)
            return text, SELECT_PREC if lazy else ATOM
        if isinstance(e, ir.Bits):
            left, q = self._expr(e.a)
            same = isinstance(e.a, ir.Bits) and e.a.op is e.op
            left = left if same or q >= ATOM else f"({left})"     # (!a & b: gcc asks for (!a))
            return f"{left} {BIT_INFIX[e.op]} {self._operand(e.b, UNARY_PREC)}", BITS_PREC
        if isinstance(e, ir.Bin):
            p = PREC[e.op]
            left = self._side(e.a, e.op, p, right=False)
            right = self._side(e.b, e.op, p, right=True)
            return f"{left} {INFIX[e.op]} {right}", p
        raise TypeError(f"not an expression of codegen.ir: {e!r}")

    def _operand(self, e, at_least: int) -> str:
        text, p = self._expr(e)
        return text if p >= at_least else f"({text})"

    def _side(self, e, op: Op, p: int, right: bool) -> str:
        text, q = self._expr(e)
        assoc = isinstance(e, ir.Bin) and e.op is op and op in (Op.AND, Op.OR)
        grouped = q < p or (right and q == p and not assoc) or (
            q == p and isinstance(e, ir.Bin) and e.op is not op) or (
            isinstance(e, ir.Bin) and q in (1, 2) and p in (1, 2) and e.op is not op) or (
            q in (3, 4) and p in (3, 4))        # a comparison of comparisons (WGSL: needed)
        return f"({text})" if grouped else text

    def _literal(self, e: ir.Lit) -> str:
        if e.type == ir.BOOL:
            return self.t.true if e.value else self.t.false
        if e.type == ir.INT:
            return str(int(e.value))
        if e.type == ir.UINT:
            return self.t.uint(int(e.value))
        if e.type == ir.HEX:
            return self.t.uint(f"0x{int(e.value):08X}")
        if e.type == ir.F64:
            return self.t.f64_literal(e.value)
        return self.t.float_literal(e.value)

    # statements -----------------------------------------------------------------------
    def lines(self, stmts, indent: int = 0) -> list[str]:
        out: list[str] = []
        for s in stmts:
            self._stmt(s, indent, out)
        return out

    def text(self, stmts, indent: int = 0) -> str:
        return "\n".join(self.lines(stmts, indent))

    def _stmt(self, s, n: int, out: list[str]) -> None:
        pad = " " * n
        if isinstance(s, ir.Let) and s.value is None:
            out.append(pad + self.t.declare_only.format(T=self.t.type(s.type), name=s.name)
                       + _note(s.comment))
        elif isinstance(s, ir.Let):
            form = (self.t.precise_var if s.mutable else self.t.precise) if s.precise \
                else self.t.var if s.mutable else self.t.let
            out.append(pad + form.format(T=self.t.type(s.type), name=s.name,
                                         value=self.expr(s.value)) + _note(s.comment))
        elif isinstance(s, ir.Assign) and s.op is Op.OR:
            out.append(pad + self.t.or_assign.format(
                self.expr(s.target), self._side(s.value, Op.OR, PREC[Op.OR], right=True))
                + _note(s.comment))
        elif isinstance(s, ir.Assign):
            op = "" if s.op is None else INFIX[s.op]
            out.append(f"{pad}{self.expr(s.target)} {op}= {self.expr(s.value)};"
                       + _note(s.comment))
        elif isinstance(s, ir.If):
            out.append(f"{pad}if ({self.expr(s.cond)}) {{" + _note(s.comment))
            self._body(s.then, n, out)
            orelse = s.orelse
            while len(orelse) == 1 and isinstance(orelse[0], ir.If):
                out.append(f"{pad}}} else if ({self.expr(orelse[0].cond)}) {{")
                self._body(orelse[0].then, n, out)
                orelse = orelse[0].orelse
            if orelse:
                out.append(f"{pad}}} else {{")
                self._body(orelse, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Loop):
            head = self.t.loop if s.step == 1 else self.t.loop_down if s.step == -1 \
                else self.t.loop_step
            out.append(pad + head.format(var=s.var, start=self.expr(s.start),
                                         stop=self.expr(s.stop), step=s.step)
                       + _note(s.comment))
            self._body(s.body, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Block):
            out.append(pad + "{" + (f"  // {s.comment}" if s.comment else ""))
            self._body(s.body, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Comment):
            out.extend(f"{pad}// {line}" for line in s.text.splitlines())
        elif isinstance(s, ir.Do):
            out.append(f"{pad}{self.expr(s.call)};" + _note(s.comment))
        elif isinstance(s, ir.Return):
            value = "" if s.value is None else " " + self.expr(s.value)
            out.append(f"{pad}return{value};")
        elif isinstance(s, ir.Stage):
            for x in s.setup:
                self._stmt(x, n, out)
            self._stmt(ir.Splice(s.name), n, out)
        elif isinstance(s, ir.Array):
            form = self.t.precise_array if s.precise else self.t.array
            out.append(pad + form.format(T=self.t.type(s.type), name=s.name,
                                         size=self.expr(s.size)))
        elif isinstance(s, ir.Function):
            if s.comment:
                out.extend(f"{pad}// {line}" for line in s.comment.splitlines())
            params = ", ".join(self.t.param.format(T=self.t.type(T), name=name)
                               for T, name in s.params)
            head = self.t.function if s.ret is not None else self.t.function_void
            if s.always_inline and s.ret is not None and self.t.function_always:
                head = self.t.function_always
            out.append(pad + head.format(R=self.t.type(s.ret) if s.ret else "", name=s.name,
                                         params=params))
            self._body(s.body, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.While):
            out.append(f"{pad}while ({self.expr(s.cond)}) {{" + _note(s.comment))
            self._body(s.body, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Break):
            out.append(pad + "break;")
        elif isinstance(s, ir.Continue):
            out.append(pad + "continue;")
        elif isinstance(s, ir.Barrier):
            if self.t.load_barrier or not s.load:
                out.append(pad + self.t.barrier + _note(s.comment))
        elif isinstance(s, ir.Halve):
            out.append(pad + self.t.loop_halve.format(var=s.var, start=self.t.uint(s.start)))
            self._body(s.body, n, out)
            out.append(pad + "}")
        elif isinstance(s, ir.Line):
            out.append(pad + s.text)
        elif isinstance(s, ir.Blank):
            out.append("")
        elif isinstance(s, ir.Inc):
            out.append(f"{pad}{self.expr(s.target)}++;")
        elif isinstance(s, ir.Splice):
            text = str(self.splices.get(s.name, ""))
            if text.strip():
                out.extend(_reindent(text, n))
        else:
            raise TypeError(f"not a statement of codegen.ir: {s!r}")

    def _body(self, body, n: int, out: list[str]) -> None:
        for s in body:
            self._stmt(s, n + 4, out)


def _note(comment: str | None) -> str:
    return f"  // {comment}" if comment else ""


def _balanced(text: str) -> bool:
    """Whether the first "(" of ``text`` closes at its last character."""
    depth = 0
    for j, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return j == len(text) - 1
    return False


def _reindent(text: str, n: int) -> list[str]:
    """(A preprocessor line, C's ``#pragma``, stays at column 0.)"""
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    body = [line for line in lines if line and not line.startswith("#")]
    cut = min((len(line) - len(line.lstrip()) for line in body), default=0)
    return [line if line.startswith("#") else " " * n + line[cut:] if line else ""
            for line in lines]
