"""The kernel description: what lowering hands the templates and the runtime.

Plain frozen data. The templates only lay it out; the runtime reads the
buffer bindings, uniforms and error table from it (and from its JSON form,
``Kernel.meta()``, which the disk cache keeps next to the GLSL).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Buffer:
    binding: int
    role: str          # state, err, init, steps, params, input, output, deposits
    name: str          # GLSL instance name
    type: str          # element type
    readonly: bool = False
    atomic: bool = False          # a float32 flux target: float or uint by the #ifdef
    array: str = ""               # the user's array name (input / output)
    comment: str = ""


@dataclass(frozen=True)
class Uniform:
    type: str
    name: str
    comment: str = ""
    role: str = ""      # dt, t0, steps, step0, nsteps, final, count, origin, grid, dim, param
    of: str = ""        # grid: the axis number; dim, param: the user's name


@dataclass(frozen=True)
class Assign:
    target: str
    expr: str
    comment: str = ""


@dataclass(frozen=True)
class Reduction:
    var: str            # the local holding the result
    scratch: str        # its shared scratch array
    source: str         # the coupled local reduced
    combine: str        # format with {0}, {1}
    neutral: str        # value of idle lanes
    mean: bool
    step: str           # one step of the tree: scratch[i] = combine(scratch[i], scratch[i + w])
    acc: str = ""       # serial: lane 0's accumulator
    fold: str = ""      # serial: acc = combine(acc, shared array[vg_at])
    slot: int = 0       # serial: its slot in vg_res


@dataclass(frozen=True)
class CoupledBlock:
    values: tuple[Assign, ...]          # c_s = expr (on active lanes)
    shared: tuple[tuple[str, str], ...]  # (shared array, local): only arrays some lane reads
    reductions: tuple[Reduction, ...]
    fence: bool = True  # first wait until every lane is done reading the last exchange


@dataclass(frozen=True)
class Block:
    """The expressions of one context: temporaries, then assignments. ``words`` are the
    identifiers its code names: the templates declare ``tt``, ``nstep`` and the stage
    values ``y_*`` only where some block reads them."""

    coupled: CoupledBlock | None
    temps: tuple[str, ...]
    body: tuple[Assign, ...]
    words: frozenset[str] = frozenset()
    calls: tuple[tuple[str, int], ...] = ()     # (helper with a loop, calls in this block)


@dataclass(frozen=True)
class Stage:
    index: int
    comment: str
    time: str
    combos: tuple[Assign, ...]          # y_x = s_x + dt * (...)
    block: Block
    fast: Block | None = None           # the block when Kernel.guard holds (None: the same)

    @property
    def words(self) -> frozenset[str]:
        return self.block.words | (self.fast.words if self.fast else frozenset())


@dataclass(frozen=True)
class Loader:
    func: str
    buffer: str
    dims: tuple[str, ...]
    array: str
    flat: str           # row-major offset of (i0, i1, ...)
    at: str             # the index as an ivec3, for the error report


@dataclass(frozen=True)
class Fluxer:
    func: str
    buffer: str
    dims: tuple[str, ...]
    array: str
    flat: str
    at: str
    deposit: int        # float64: the deposit slot of this flux statement; -1: atomic


@dataclass(frozen=True)
class CoupledArray:
    name: str           # shared array
    func: str           # the accessor s[e]
    edge: str
    flat: str           # basin offset of (e0, e1, ...)
    accessor: bool = True   # read as s[e] (else only reduced: no accessor function)


@dataclass(frozen=True)
class Axis:
    index: str          # GLSL name of the grid index
    basin: str          # GLSL name of the basin index ('' without basin)
    size: int           # basin extent (1 without basin)
    comp: str           # x, y or z


@dataclass(frozen=True)
class Kernel:
    name: str
    version: str
    dtype: str
    F: str
    zero: str
    source_name: str
    local_size: tuple[int, int, int]
    has_basin: bool
    basin_size: int
    pow2: int
    nactive: str        # active lanes of this basin (an expression)
    active: str         # is this lane active (an expression)
    lane: str           # this lane's trajectory within the dispatch
    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    uniforms: tuple[Uniform, ...]
    helpers: tuple[str, ...]
    loaders: tuple[Loader, ...]
    fluxers: tuple[Fluxer, ...]
    coupled_arrays: tuple[CoupledArray, ...]
    reductions: tuple[str, ...]         # every scratch array (tree)
    states: tuple[tuple[str, str, str], ...]   # (s_, y_, comment) per state
    stage_k: tuple[tuple[str, ...], ...]       # k names per stage
    pt_params: tuple[str, ...]          # registers of per-trajectory params
    init: tuple[Assign, ...]
    uses_init: bool
    init_names: tuple[str, ...]
    stages: tuple[Stage, ...]
    update: tuple[Assign, ...]
    collapse: Block | None
    flux: Block | None
    n_deposits: int
    errors: tuple[tuple[str, str, int, int], ...]   # (kind, what, line, column)
    reduction: str = "tree"     # how basins reduce: tree (GPU) or serial (software renderer)
    results: int = 0            # serial: slots of vg_res, the reductions' results
    box: str = "vg_j"           # serial: basin offset of the vg_j-th active lane
    loop_trips_per_step: int = 1    # loop iterations one invocation runs per step (bound),
    loop_trips_once: int = 0        # ... and once per dispatch (init, flux); helper loops in
    helper_loops: tuple[tuple[str, int, int, int], ...] = ()  # (helper, trips, per step, once)
    guard: str = ""     # a condition on uniforms under which Stage.fast blocks run ("": none)
    guard_note: str = ""    # what the guard proves, for a comment

    @property
    def loop_words(self) -> frozenset[str]:
        """What the stages of the step loop read (t_n only through a stage's tt)."""
        return frozenset().union(*(st.words for st in self.stages))

    def meta(self) -> dict:
        """What the runtime needs besides the GLSL text (JSON-able)."""
        return {
            "name": self.name, "dtype": self.dtype, "local_size": list(self.local_size),
            "has_basin": self.has_basin,
            "basin": [a.size for a in self.axes] if self.has_basin else None,
            "buffers": [asdict(b) for b in self.buffers],
            "collapse": self.collapse is not None,
            "flux": self.flux is not None, "n_deposits": self.n_deposits,
            "deposit_outputs": [f.array for f in self.fluxers if f.deposit >= 0],
            "uses_init": self.uses_init,
            # Mesa llvmpipe stops all loops of an invocation after 65535 iterations in all
            # (its loop limiter), silently: one dispatch must run fewer steps than
            # (65535 - loop_trips_once) / loop_trips_per_step (helper loops counted in both)
            "reduction": self.reduction, "loop_trips_per_step": self.loop_trips_per_step,
            "loop_trips_once": self.loop_trips_once,
            "helper_loops": {h: {"trips": t, "per_step": s, "once": o}
                             for h, t, s, o in self.helper_loops},
            # the uniform of each role (grid: per axis; dim, param: per user name)
            "uniforms": [{"name": u.name, "role": u.role, "of": u.of} for u in self.uniforms],
            "errors": [list(e) for e in self.errors],
        }
