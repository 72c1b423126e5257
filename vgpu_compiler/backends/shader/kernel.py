"""The kernel description: the GPU mapping of a field, in no GPU language.

Lowering (lower.py) decides how a field runs on a GPU (an invocation per
trajectory, a workgroup per basin, which buffers and uniforms exist and what role
each plays, the stages of the step program, the coupled exchanges and basin
reductions) and records it here as plain frozen data. Expressions stay IR
(``Let``: a target and an IR expression; ``Deposit``: a flux call; a stage's
state and the update are ``ir.step.Combination``), types are neutral (``float``:
the working dtype, ``int``, ``uint``, ``bool``). Names are identifiers shared by
every C-like GPU language (a prefix and the user's name, ``dialect.mangle``);
index arithmetic (a lane's trajectory, the active box, flat offsets) is data too
(``Ix``, ``Below``), which the dialect spells (``Dialect.index``).

``printing.print_kernel(kernel, dialect)`` prints it (printing.py); the templates
lay the printed kernel out and the runtime reads ``meta()`` of the printed kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ...errors import Span
from ...ir.nodes import Expr, Reduce
from ...ir.ops import ReduceOp
from ...ir.ranges import Ranges, Where
from ...ir.step import Combination


# --- index arithmetic: integer expressions in no language --------------------------------
@dataclass(frozen=True)
class Ix:
    """``a op b`` on integer index terms; ``op`` is add, sub, mul, div or mod, and a term
    is a name (str), an int or another Ix. ``spell`` prints it with a dialect's words."""

    op: str
    a: "Term"
    b: "Term"


@dataclass(frozen=True)
class Below:
    """Every ``a < b`` of ``pairs`` holds (a lane inside its basin's active box)."""

    pairs: tuple[tuple["Term", "Term"], ...]


Term = str | int | Ix


def spell(term, d) -> str:
    """An index term (an Ix, a Below, a name or an int) in the words of the dialect ``d``
    (its ``index_ops``, ``index_grouped``, ``group``, ``below``, ``all_of``)."""
    if isinstance(term, Below):
        return d.all_of.join(d.below.format(spell(a, d), spell(b, d)) for a, b in term.pairs)
    if not isinstance(term, Ix):
        return str(term)
    left = spell(term.a, d)
    if isinstance(term.a, Ix) and (term.a.op, term.op) in d.index_grouped:
        left = d.group.format(left)
    return d.index_ops[term.op].format(left, spell(term.b, d))


def flat(index, dims) -> "Term":
    """Row-major offset of ``index`` in an array of extents ``dims`` (Horner form)."""
    index = list(index)
    term = index[0]
    for i, d in zip(index[1:], list(dims)[1:]):
        term = Ix("add", Ix("mul", term, d), i)
    return term


def product(terms) -> "Term":
    terms = list(terms)
    out = terms[0]
    for t in terms[1:]:
        out = Ix("mul", out, t)
    return out


@dataclass(frozen=True)
class Buffer:
    binding: int
    role: str          # state, err, init, steps, params, input, output, deposits
    name: str          # instance name
    type: str          # element type, neutral: float (the working dtype), int, uint
    readonly: bool = False
    atomic: bool = False          # a float32 flux target: float atomics or compare-and-swap
    array: str = ""               # the user's array name (input / output)
    comment: str = ""


@dataclass(frozen=True)
class Uniform:
    type: str           # neutral: float (the working dtype), int
    name: str
    comment: str = ""
    role: str = ""      # dt, t0, steps, step0, nsteps, final, count, origin, grid, dim, param
    of: str = ""        # grid: the axis number; dim, param: the user's name


@dataclass
class Context:
    """How symbols read in one place of the kernel (a stage, the collapse vote, ...).

    ``where`` fixes the range of ``step`` for the index proofs (ir.ranges.Where);
    None: inferred, conservatively: step "0" is a start value, state "y" with
    step "nstep" a stage, anything else collapse or flux (step in [0, steps]).
    """

    state: str = "y"          # prefix of the state variables seen here
    time: str = "tt"
    step: str = "nstep"
    where: Where | None = None

    def place(self) -> Where:
        if self.where is not None:
            return self.where
        if self.step == "0":
            return Where.INIT
        if self.state == "y" and self.step == "nstep":
            return Where.STAGE
        return Where.AFTER


INIT = Context(state="s", time="u_t0", step="0")     # how start values read symbols


@dataclass(frozen=True)
class Let:
    """``target = expr``: the statement form of the kernel."""

    target: str
    expr: Expr
    comment: str = ""


@dataclass(frozen=True)
class Assign:
    """A printed assignment: ``target = expr;`` in the dialect's text (the printer's
    output, where ``Let`` is its input)."""
    target: str
    expr: str
    comment: str = ""


@dataclass(frozen=True)
class Deposit:
    """A flux statement: ``func(index..., value)``, out of range an error at ``span``."""

    func: str
    args: tuple[Expr, ...]      # the indices, then the value
    output: str
    span: Span | None
    comment: str = ""


@dataclass(frozen=True)
class Reduction:
    node: Reduce        # the IR node it computes
    var: str            # the local holding the result
    scratch: str        # tree: its shared scratch array
    source: str         # the coupled local reduced
    op: ReduceOp
    shared: str         # serial: the shared array lane 0 folds
    acc: str            # serial: lane 0's accumulator
    slot: int           # serial: its slot in the results array

    @property
    def mean(self) -> bool:
        return self.op is ReduceOp.MEAN


@dataclass(frozen=True)
class CoupledBlock:
    values: tuple[Let, ...]             # c_s = expr (on active lanes)
    shared: tuple[tuple[str, str], ...]  # (shared array, local): only arrays some lane reads
    reductions: tuple[Reduction, ...]
    fence: bool = True  # first wait until every lane is done reading the last exchange


@dataclass(frozen=True)
class Block:
    """The statements of one context (a stage, the collapse vote, flux): its coupled
    exchange, then ``body`` on active lanes; shared pure subtrees become temporaries
    named ``prefix`` + a number when printed."""

    ctx: Context
    coupled: CoupledBlock | None
    body: tuple[Let | Deposit, ...]
    prefix: str

    @property
    def roots(self) -> list[Expr]:
        return [x for s in self.body for x in (s.args if isinstance(s, Deposit) else (s.expr,))]


@dataclass(frozen=True)
class Stage:
    index: int
    c: Fraction                 # the stage time is t_n + c * dt
    state: Combination          # y = s + dt * sum(w_j k_j) per state (ir.step)
    block: Block                # the derivatives k_s = F(t, y)


@dataclass(frozen=True)
class Loader:
    func: str
    buffer: str
    dims: tuple[str, ...]
    array: str
    flat: Term          # row-major offset of (i0, i1, ...)

    @property
    def index(self) -> tuple[str, ...]:
        return tuple(f"i{k}" for k in range(len(self.dims)))


@dataclass(frozen=True)
class Fluxer:
    func: str
    buffer: str
    dims: tuple[str, ...]
    array: str
    flat: Term
    deposit: int        # float64: the deposit slot of this flux statement; -1: atomic

    @property
    def index(self) -> tuple[str, ...]:
        return tuple(f"i{k}" for k in range(len(self.dims)))


@dataclass(frozen=True)
class CoupledArray:
    name: str           # shared array
    func: str           # the accessor s[e]
    edge: str
    flat: Term          # basin offset of (e0, e1, ...)
    accessor: bool = True   # read as s[e] (else only reduced: no accessor function)


@dataclass(frozen=True)
class Axis:
    index: str          # name of the grid index
    basin: str          # name of the basin index ('' without basin)
    size: int           # basin extent (1 without basin)
    comp: str           # x, y or z


@dataclass(frozen=True)
class Kernel:
    name: str
    version: str
    dtype: str
    source_name: str
    local_size: tuple[int, int, int]
    has_basin: bool
    basin_size: int
    pow2: int
    nactive: Term       # active lanes of this basin
    active: Below       # is this lane active
    lane: Term          # this lane's trajectory within the dispatch
    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    uniforms: tuple[Uniform, ...]
    loaders: tuple[Loader, ...]
    fluxers: tuple[Fluxer, ...]
    coupled_arrays: tuple[CoupledArray, ...]
    reductions: tuple[str, ...]         # every scratch array (tree)
    states: tuple[tuple[str, str, str], ...]   # (s_, y_, comment) per state
    stage_k: tuple[tuple[str, ...], ...]       # k names per stage
    pt_params: tuple[str, ...]          # registers of per-trajectory params
    init: tuple[Let, ...]
    uses_init: bool
    init_names: tuple[str, ...]
    stages: tuple[Stage, ...]
    update: Combination                 # s = s + dt * sum(b_j k_j) per state (ir.step)
    collapse: Block | None
    flux: Block | None
    n_deposits: int
    reduction: str = "tree"     # how basins reduce: tree (GPU) or serial (software renderer)
    results: int = 0            # serial: slots of the results array
    box: Term = "vg_j"          # serial: basin offset of the vg_j-th active lane
    reduce_trips_per_step: int = 0  # loop iterations of the basin reductions, per step
    reduce_trips_once: int = 0      # ... and once per dispatch (flux)
    reports_errors: bool = False    # inputs exist: their loaders report out-of-range reads
    adaptive: object = None         # an adaptive method's pieces (adaptive.AdaptiveParts)
    ranges: Ranges | None = field(default=None, compare=False, repr=False)  # index proofs
    noise: tuple = ()               # stochastic fields: noise.NoiseTerm per (noise, state)
    events: object = None           # `when` / `stop when`: events.EventParts
    traj: Term = 0                  # ... the trajectory's flat grid index, for Philox
    history: bool = False           # the loop writes saved steps to b_hist (save_every)
    observe: Block | None = None    # peak/trough at step ends, over s_* (lower._observe)
    observe_q: Block | None = None  # ... and at events, over q_* (just before each fires)
    rosenbrock: object = None       # rodas4: the Jacobian's block (rosenbrock.RosenbrockParts)
