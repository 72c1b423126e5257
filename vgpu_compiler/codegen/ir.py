"""The statements of a kernel as data: what an algorithm of ``codegen/build`` returns.

No text of any language lives here: a target (``codegen/targets``) spells the types,
declarations, builtins and literals, and ``codegen/printer.py`` prints the one C-style
layout. Operators are the IR's own ``ir.ops.Op`` (the field expressions' vocabulary);
a ``Call`` names a neutral builtin (``min``, ``max``, ``abs``, ``sqrt``, ``isnan``,
``isinf``, ``pow``, ``root``, ``basin_fold`` ...: each target's table) or, verbatim,
a function the kernel defines.

The nodes keep the order of operations exactly: ``Bin(MUL, Bin(MUL, a, b), c)`` is
``(a * b) * c`` and is printed so, never regrouped (the numbers of a kernel depend on
it). ``Splice`` marks a piece printed elsewhere (a field's stage block, still laid out
by its template) that the printer inserts by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

from ..ir.ops import Op

FLOAT, INT, UINT, BOOL = "float", "int", "uint", "bool"   # neutral types (float: the working dtype)
# 32-bit words of integer arithmetic mod 2^32 (the noise generator; C: ``vg_word``, which may
# be a 64-bit lane holding a word, codegen/mathlib.word_add), their 64-bit products (C only),
# and a uint literal printed in hex
WORD, U64, HEX = "word", "u64", "hex"
F64 = "f64"     # a double where the target has one (``"f64" in Target.types``)
SLOT = "slot"   # an index into a buffer that may pass 2^31 where the target has wider ints (C: long)


# --- expressions ---------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Index:
    """``name[index]``: an element of a local array (the C kernel's lane arrays)."""
    name: str
    index: "Expr"


@dataclass(frozen=True)
class Elem:
    """``buffer[index]``: an element of a storage buffer (the dialect's buffer_read)."""
    buffer: str
    index: "Expr"


@dataclass(frozen=True)
class Lit:
    value: Union[float, int, bool]
    type: str = FLOAT


@dataclass(frozen=True)
class Bin:
    op: Op                  # arithmetic, comparison, AND, OR
    a: "Expr"
    b: "Expr"


class Bit(Enum):
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHR = "shr"             # a word shifted right (its right operand a uint literal)
    SHL = "shl"             # ... and left (a helper's exponent bits)


@dataclass(frozen=True)
class Bits:
    """``a & b``, ``a | b``, ``a ^ b`` on 0/1 int flags (a lane target's comparisons are
    0/1 ints): the branchless logic of a select-form piece, both sides always evaluated
    (no short circuit, so no branch in a loop the compiler is to vectorise); and the same
    operators with ``a >> b`` on words (the noise generator)."""
    op: Bit
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Un:
    op: Op                  # NEG, NOT
    a: "Expr"


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple = ()


@dataclass(frozen=True)
class Select:
    """``cond ? a : b``; a target whose select evaluates both sides prints it so too:
    the builders use it only where both sides are plain numbers."""
    cond: "Expr"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class UniformLoad:
    """A workgroup (shared) variable read by every invocation alike, after a barrier
    (``Barrier(load=True)`` before it): control flow on it stays uniform. WGSL's
    ``workgroupUniformLoad`` is both; GLSL reads the variable after its barrier."""
    name: str


Expr = Union[Var, Index, Elem, Lit, Bin, Bits, Un, Call, Select, UniformLoad, "Raw"]


# --- statements ----------------------------------------------------------------------
@dataclass(frozen=True)
class Let:
    """A typed local with its value; ``mutable``: assigned again later; ``precise``: its
    arithmetic may not be fused or reordered by the driver (GLSL's ``precise``)."""
    name: str
    type: str
    value: Expr | None          # None: declared only (an out argument's variable)
    mutable: bool = False
    precise: bool = False
    comment: str | None = None      # a note at the end of the line


@dataclass(frozen=True)
class Assign:
    target: Union[Var, Index]
    value: Expr
    op: Op | None = None    # ``x op= value`` (ADD: ``+=``; OR: a flag or-ed in, the
    #                         target's ``or_assign``)
    comment: str | None = None      # a note at the end of the line


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple
    orelse: tuple = ()      # one If here prints as ``else if``
    comment: str | None = None      # a note at the end of the head line


@dataclass(frozen=True)
class Loop:
    """``for (int var = start; var < stop; var++)``: bounded by ``stop``. ``step`` above 1:
    ``var += step``; ``step`` -1: down to ``stop`` included (``var >= stop; var--``).
    ``comment``: a note at the end of the header line."""
    var: str
    start: Expr
    stop: Expr
    body: tuple
    step: int = 1
    comment: str | None = None


@dataclass(frozen=True)
class Block:
    body: tuple
    comment: str | None = None


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Do:
    """A call for its effect."""
    call: Call
    comment: str | None = None      # a note at the end of the line


@dataclass(frozen=True)
class Return:
    value: Expr | None = None


@dataclass(frozen=True)
class Splice:
    """A piece printed elsewhere, inserted by name (``Printer(splices=...)``)."""
    name: str


@dataclass(frozen=True)
class Stage:
    """A field's stage, printed by its template (``Splice(name)``), after ``setup``: the
    locals it reads. A target that runs a stage over a whole block of lanes at once
    (C) sets them itself and prints the splice alone (codegen/lanes.py)."""
    setup: tuple
    name: str


@dataclass(frozen=True)
class Array:
    """A local array of ``size`` elements (the C kernel's lane arrays); ``precise``: as
    ``Let``'s."""
    name: str
    type: str
    size: "Expr"
    precise: bool = False


@dataclass(frozen=True)
class Function:
    """A function of the kernel: ``params`` (neutral type, name) pairs, ``ret`` its neutral
    type (None: none), ``body`` its statements; ``comment``: lines above its head;
    ``always_inline``: inlined wherever it is called, where the target can say so (C: the
    lane loops vectorise through it)."""
    name: str
    params: tuple
    ret: str | None
    body: tuple
    comment: str | None = None
    always_inline: bool = False


@dataclass(frozen=True)
class While:
    """``while (cond) { body }``: a loop whose trip count is the data's (a helper's
    exponent bits, its digits of long division); ``comment``: a note at the end of the
    header line."""
    cond: Expr
    body: tuple
    comment: str | None = None


@dataclass(frozen=True)
class Break:
    """``break;`` out of the innermost loop."""


@dataclass(frozen=True)
class Continue:
    """``continue;``: the innermost loop's next iteration (a lane loop's skipped lane)."""


@dataclass(frozen=True)
class Inc:
    """``target++;`` (an int counter)."""
    target: Union[Var, Index]


@dataclass(frozen=True)
class Raw:
    """An expression printed elsewhere, in the kernel's dialect (a field's combination
    of stage values, laid out by the field expressions' printer): printed as is, in
    parentheses where it is an operand."""
    text: str


@dataclass(frozen=True)
class Barrier:
    """A workgroup barrier (memory included). ``load``: the one before a UniformLoad,
    which a target whose uniform load synchronises itself (WGSL) leaves out."""
    load: bool = False
    comment: str | None = None      # a note at the end of the line


@dataclass(frozen=True)
class Halve:
    """``for (uint var = start; var > 0u; var >>= 1)``: start, start / 2, ..., 1 (a tree
    reduction's widths)."""
    var: str
    start: int
    body: tuple


@dataclass(frozen=True)
class Line:
    """A statement printed elsewhere, in the kernel's dialect (a field block's temporary,
    a reduction's combine step): printed as is."""
    text: str


@dataclass(frozen=True)
class Blank:
    """An empty line between the sections of a kernel."""


Stmt = Union[Let, Assign, If, Loop, Block, Comment, Do, Return, Splice, Stage, Array, Function,
             While, Break, Continue, Inc, Barrier, Blank, Halve, Line]


# --- small constructors the builders read well with ---------------------------------
def f(value: float) -> Lit:
    return Lit(float(value), FLOAT)


def i(value: int) -> Lit:
    return Lit(int(value), INT)


def add(a, b): return Bin(Op.ADD, a, b)
def sub(a, b): return Bin(Op.SUB, a, b)
def mul(a, b): return Bin(Op.MUL, a, b)
def div(a, b): return Bin(Op.DIV, a, b)
def lt(a, b): return Bin(Op.LT, a, b)
def le(a, b): return Bin(Op.LE, a, b)
def gt(a, b): return Bin(Op.GT, a, b)
def ge(a, b): return Bin(Op.GE, a, b)
def eq(a, b): return Bin(Op.EQ, a, b)
def ne(a, b): return Bin(Op.NE, a, b)
def and_(a, b): return Bin(Op.AND, a, b)
def or_(a, b): return Bin(Op.OR, a, b)
def not_(a): return Un(Op.NOT, a)
def band(*xs): return _fold(Bit.AND, xs)
def bor(*xs): return _fold(Bit.OR, xs)
def bxor(*xs): return _fold(Bit.XOR, xs)
def shr(a, n: int): return Bits(Bit.SHR, a, Lit(n, UINT))
def shl(a, n: int): return Bits(Bit.SHL, a, Lit(n, UINT))
def u(value: int) -> Lit: return Lit(int(value), UINT)
def hexu(value: int) -> Lit: return Lit(int(value), HEX)


def _fold(op: Bit, xs):
    """A left chain of ``op`` over ``xs``, a chain of the same op among them opened (the
    flags are 0/1 ints: & and | are exact and associative)."""
    flat: list = []
    for x in xs:
        flat.extend(_chain(op, x))
    out = flat[0]
    for x in flat[1:]:
        out = Bits(op, out, x)
    return out


def _chain(op: Bit, x) -> list:
    if isinstance(x, Bits) and x.op is op:
        return _chain(op, x.a) + _chain(op, x.b)
    return [x]
def call(fn, *args): return Call(fn, tuple(args))


def names(stmts) -> set[str]:
    """Every variable name the statements read or write (for passes over them)."""
    out: set[str] = set()

    def expr(e):
        if isinstance(e, Var):
            out.add(e.name)
        elif isinstance(e, Index):
            out.add(e.name)
            expr(e.index)
        elif isinstance(e, Elem):
            expr(e.index)
        elif isinstance(e, (Bin, Bits)):
            expr(e.a), expr(e.b)
        elif isinstance(e, Un):
            expr(e.a)
        elif isinstance(e, Call):
            for a in e.args:
                expr(a)
        elif isinstance(e, Select):
            expr(e.cond), expr(e.a), expr(e.b)

    def stmt(s):
        if isinstance(s, Let):
            out.add(s.name)
            if s.value is not None:
                expr(s.value)
        elif isinstance(s, Assign):
            expr(s.target), expr(s.value)
        elif isinstance(s, If):
            expr(s.cond)
            for x in s.then + s.orelse:
                stmt(x)
        elif isinstance(s, Loop):
            out.add(s.var)
            expr(s.start), expr(s.stop)
            for x in s.body:
                stmt(x)
        elif isinstance(s, (Block, Function, Halve)):
            for x in s.body:
                stmt(x)
        elif isinstance(s, Stage):
            for x in s.setup:
                stmt(x)
        elif isinstance(s, While):
            expr(s.cond)
            for x in s.body:
                stmt(x)
        elif isinstance(s, Inc):
            expr(s.target)
        elif isinstance(s, Do):
            expr(s.call)
        elif isinstance(s, Return) and s.value is not None:
            expr(s.value)

    for s in stmts:
        stmt(s)
    return out


def expr_names(e) -> set[str]:
    """The variable names an expression reads."""
    return names((Do(Call("", (e,))),))
