"""The one vocabulary of operations shared by the IR, the passes and every backend."""
from __future__ import annotations

from enum import Enum


# ints of the language are 32-bit (literals, dims, indices, steps)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class Type(Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"


class Op(Enum):
    # arithmetic: operands and result share one type (INT or FLOAT), except DIV and POW (FLOAT)
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    POW = "^"
    NEG = "neg"
    # comparisons: operands share one type (INT or FLOAT), result BOOL
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="
    # logic: BOOL -> BOOL; AND/OR evaluate their second operand only where needed
    AND = "and"
    OR = "or"
    NOT = "not"
    # where(cond, a, b): evaluates only the branch each trajectory takes
    WHERE = "where"
    # float functions (FLOAT -> FLOAT)
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    ATAN2 = "atan2"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    EXP = "exp"
    LOG = "log"
    LOG2 = "log2"
    SQRT = "sqrt"
    FLOOR = "floor"
    CEIL = "ceil"
    # polymorphic (INT when every operand is INT, else FLOAT)
    ABS = "abs"
    MIN = "min"
    MAX = "max"
    CLAMP = "clamp"
    SIGN = "sign"
    # conversions
    TO_INT = "int"      # floor to int
    TO_FLOAT = "float"


ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.MOD, Op.POW, Op.NEG})
COMPARE = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE})
LOGIC = frozenset({Op.AND, Op.OR, Op.NOT})
FLOAT_FUNCS = frozenset({Op.SIN, Op.COS, Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.ATAN2,
                         Op.SINH, Op.COSH, Op.TANH, Op.EXP, Op.LOG, Op.LOG2, Op.SQRT,
                         Op.FLOOR, Op.CEIL})
POLY_FUNCS = frozenset({Op.ABS, Op.MIN, Op.MAX, Op.CLAMP, Op.SIGN})
# Ops that can fail at run time when their operands are INT (division by zero).
INT_TRAPPING = frozenset({Op.FLOORDIV, Op.MOD})

# Name in the language -> op, for calls f(...). `pow` is the function form of ^.
FUNCTIONS = {op.value: op for op in FLOAT_FUNCS | POLY_FUNCS}
FUNCTIONS.update({"pow": Op.POW, "int": Op.TO_INT, "float": Op.TO_FLOAT, "where": Op.WHERE})
ARITY = {**{op: 1 for op in FLOAT_FUNCS | {Op.ABS, Op.SIGN, Op.TO_INT, Op.TO_FLOAT, Op.NEG,
                                          Op.NOT}},
         **{op: 2 for op in (ARITH - {Op.NEG}) | COMPARE | {Op.AND, Op.OR, Op.ATAN2,
                                                             Op.MIN, Op.MAX}},
         Op.CLAMP: 3, Op.WHERE: 3}


class SymKind(Enum):
    STATE = "state"        # this trajectory's (stage) value of a state
    PARAM = "param"        # a param (scalar or per-trajectory, decided at call time)
    DIM = "dim"            # a dim symbol (INT)
    GRID = "grid"          # a grid index (INT)
    BASIN = "basin"        # a basin index: position in the basin (INT)
    TIME = "t"             # the time at the current stage (FLOAT)
    DT = "dt"              # the step size (FLOAT)
    STEP = "step"          # the step number (INT)
    INIT = "init"          # init(x): the starting value of state x (FLOAT)
    COUPLED = "coupled"    # this trajectory's own value of a coupled name (FLOAT)
    NOISE = "noise"        # a white noise: only while checking a derivative (FLOAT); the
                           # checked IR holds it split out (nodes.Noise), never as a Sym


class ReduceOp(Enum):
    SUM = "sum"
    MEAN = "mean"
    MIN = "min"
    MAX = "max"


class Edge(Enum):
    CLAMP = "clamp"
    WRAP = "wrap"
    ZERO = "zero"
