"""Passes over the IR that lay an algorithm out for a target, never a second algorithm.

``lane_arrays``: the C kernel runs each piece of an attempt as a loop over a block of
lanes (``for (int l = 0; l < VG_W; l++)`` in templates/adaptive.c.j2), each lane's
scalars in arrays: the statements of one trajectory, with the named variables made
elements ``name[l]`` (a declaration of one becomes an assignment to it), a field's
registers ``A_name[l]``; ``lane_loop`` wraps them in one loop over the lanes, a
lane that does not run skipped.
"""
from __future__ import annotations

from dataclasses import replace

from . import ir


def lane_arrays(stmts, arrays, lane: str = "l", registers=(), prefix: str = "A_") -> tuple:
    """``registers``: the field's names, whose lane arrays are ``prefix + name``;
    ``arrays`` a dict: name -> its lane array's name."""
    arrays = {**(dict(arrays) if isinstance(arrays, dict) else {a: a for a in arrays}),
              **{r: prefix + r for r in registers}}
    at = ir.Var(lane)

    def expr(e):
        if isinstance(e, ir.Var):
            return ir.Index(arrays[e.name], at) if e.name in arrays else e
        if isinstance(e, ir.Elem):
            return replace(e, index=expr(e.index))
        if isinstance(e, ir.Index):
            return replace(e, index=expr(e.index))
        if isinstance(e, (ir.Bin, ir.Bits)):
            return replace(e, a=expr(e.a), b=expr(e.b))
        if isinstance(e, ir.Un):
            return replace(e, a=expr(e.a))
        if isinstance(e, ir.Call):
            return replace(e, args=tuple(expr(a) for a in e.args))
        if isinstance(e, ir.Select):
            return ir.Select(expr(e.cond), expr(e.a), expr(e.b))
        return e

    def stmt(s):
        if isinstance(s, ir.Let):
            if s.name in arrays:
                return ir.Assign(ir.Index(arrays[s.name], at), expr(s.value),
                                 comment=s.comment)
            return replace(s, value=expr(s.value))
        if isinstance(s, ir.Assign):
            return replace(s, target=expr(s.target), value=expr(s.value))
        if isinstance(s, ir.If):
            return replace(s, cond=expr(s.cond), then=body(s.then), orelse=body(s.orelse))
        if isinstance(s, ir.Loop):
            return replace(s, start=expr(s.start), stop=expr(s.stop), body=body(s.body))
        if isinstance(s, ir.Block):
            return replace(s, body=body(s.body))
        if isinstance(s, ir.Do):
            return replace(s, call=expr(s.call))
        if isinstance(s, ir.Return) and s.value is not None:
            return ir.Return(expr(s.value))
        if isinstance(s, ir.While):
            return replace(s, cond=expr(s.cond), body=body(s.body))
        if isinstance(s, ir.Inc):
            return ir.Inc(expr(s.target))
        return s

    def body(ss):
        return tuple(stmt(s) for s in ss)

    return body(stmts)


def lane_loop(stmts, arrays, skip=None, registers=(), comment: str | None = None,
              size: str = "VG_W", lane: str = "l") -> ir.Loop:
    """A trajectory's statements as one loop over the block's lanes (``lane_arrays``
    inside), a lane where ``skip`` holds passed over (``if (skip) { continue; }``)."""
    head = (ir.If(skip, (ir.Continue(),)),) if skip is not None else ()
    return ir.Loop(lane, ir.i(0), ir.Var(size),
                   lane_arrays(head + tuple(stmts), arrays, lane, registers), comment=comment)


def lane_loops(stmts, arrays, registers=(), size: str = "VG_W", lane: str = "l",
               uniform: bool = False) -> tuple:
    """A trajectory's statements laid out for a block of lanes: each run of per-lane
    statements becomes a loop over the lanes (``lane_arrays`` inside); what acts on the
    whole block stays outside, once: a ``Stage`` (its template's splice, which loops
    itself) and a basin fold (``v = basin_fold(v, ...)``: the splice ``fold v``). A local
    declared in one run and read in another becomes a lane array, declared first. An
    ``if`` on uniform values only (no lane's) stays outside with its branches laid out
    the same way; a block holding a stage is opened (the loops give the scopes).
    ``uniform``: a statement that names no lane's value (a counter of the block's, as
    the history's slot, a splice) stays outside too, once, and so does a local whose
    value names none (a step's t_n) and a loop with uniform bounds, its body laid out the
    same way."""
    lane_names = set(arrays) | set(registers) | (_lane_locals(stmts, set(arrays) | set(registers))
                                                 if uniform else _declared(stmts))

    def collective(s):
        if isinstance(s, ir.Stage):
            return ir.Splice(s.name)
        if isinstance(s, ir.Assign) and isinstance(s.value, ir.Call) \
                and s.value.fn == "basin_fold" and isinstance(s.target, ir.Var):
            return ir.Splice(f"fold {s.target.name}")
        return None

    def layout(ss) -> list:
        """Top-level items: ("lanes", [stmts]) runs and ("once", stmt)."""
        out: list = []
        for s in ss:
            if isinstance(s, ir.Block) and any(isinstance(x, ir.Stage) for x in s.body):
                out.extend(layout(s.body))
                continue
            if isinstance(s, ir.Comment):
                out.append(("once", s))
                continue
            once = collective(s)
            if once is not None:
                out.append(("once", once))
            elif isinstance(s, ir.If) and not ir.expr_names(s.cond) & lane_names:
                out.append(("if", s))
            elif uniform and isinstance(s, ir.Loop) and not (
                    ir.expr_names(s.start) | ir.expr_names(s.stop)) & lane_names:
                out.append(("loop", s))
            elif uniform and not isinstance(s, ir.If) and not ir.names([s]) & lane_names:
                out.append(("once", s))
            elif out and out[-1][0] == "lanes":
                out[-1][1].append(s)
            else:
                out.append(("lanes", [s]))
        return out

    items = layout(stmts)
    # locals read in another run than their own (an if's branches are runs too) -> arrays
    seen: dict[str, int] = {}
    promoted: dict[str, str] = {}
    count = [0]

    def scan(its):
        for kind, x in its:
            if kind == "lanes":
                count[0] += 1
                for s in x:
                    if isinstance(s, ir.Let):
                        seen.setdefault(s.name, count[0])
                for name in sorted(ir.names(x)):
                    if name in seen and seen[name] != count[0] and name not in promoted:
                        promoted[name] = _type_of(name, stmts)
            elif kind == "if":
                scan(layout(x.then))
                scan(layout(x.orelse))
            elif kind == "loop":
                scan(layout(x.body))

    scan(items)
    every = {**(dict(arrays) if isinstance(arrays, dict) else {a: a for a in arrays}),
             **{p: p for p in promoted}}

    def emit(its) -> tuple:
        out = []
        for kind, x in its:
            if kind == "once":
                out.append(x)
            elif kind == "if":
                out.append(replace(x, then=emit(layout(x.then)), orelse=emit(layout(x.orelse))))
            elif kind == "loop":
                out.append(replace(x, body=emit(layout(x.body))))
            else:
                body = lane_arrays(x, every, lane, registers)
                out.append(ir.Loop(lane, ir.i(0), ir.Var(size), body))
        return tuple(out)

    decls = tuple(ir.Array(n, t, ir.Var(size)) for n, t in promoted.items())
    return decls + emit(items)


def _lane_locals(stmts, lane: set[str]) -> set[str]:
    """The locals that hold a lane's values: declared or assigned from one (or from a
    printed expression, ``ir.Raw``, which may read any) or without a value."""
    lets: list = []

    def walk(ss):
        for s in ss:
            if isinstance(s, (ir.Let, ir.Assign)):
                lets.append(s)
            for attr in ("then", "orelse", "body", "setup"):
                walk(getattr(s, attr, ()))
    walk(stmts)
    out: set[str] = set()
    grew = True
    while grew:
        grew = False
        for s in lets:
            name = s.name if isinstance(s, ir.Let) else \
                s.target.name if isinstance(s.target, ir.Var) else None
            if name is None or name in out or name in lane:
                continue
            if s.value is None or _raw(s.value) or ir.expr_names(s.value) & (lane | out):
                out.add(name)
                grew = True
    return out


def _raw(e) -> bool:
    if isinstance(e, ir.Raw):
        return True
    return any(_raw(x) for x in (getattr(e, a, None) for a in ("a", "b", "cond", "index"))
               if x is not None) or any(_raw(x) for x in getattr(e, "args", ()))


def _declared(stmts) -> set[str]:
    out: set[str] = set()

    def walk(ss):
        for s in ss:
            if isinstance(s, ir.Let):
                out.add(s.name)
            for attr in ("then", "orelse", "body", "setup"):
                walk(getattr(s, attr, ()))
    walk(stmts)
    return out


def _type_of(name: str, stmts) -> str:
    found: list[str] = []

    def walk(ss):
        for s in ss:
            if isinstance(s, ir.Let) and s.name == name:
                found.append(s.type)
            for attr in ("then", "orelse", "body", "setup"):
                walk(getattr(s, attr, ()))
    walk(stmts)
    return found[0]


def lane_list(stmts, arrays, head=(), count: str = "vg_non", at: str = "vg_j",
              size: str = "VG_W") -> tuple:
    """A trajectory's statements run on the lanes of a list (the C kernel's events: the
    lanes ``vg_on[0 .. count)`` whose condition is to be located), the iterations outside
    and the lanes inside, so that the lanes' dependency chains interleave (each lane does
    the same arithmetic in the same order as alone). ``arrays``: the locals declared at
    the top level that carry a lane's values from one loop to the next, made arrays over
    the list's places (``name[at]``, declared first); a top-level ``Loop`` (its bounds
    uniform) stays outside with its body a loop over the list, each other run of
    statements one loop over the list; ``head``: the statements at the start of each such
    loop's body (which bind the list's lane), where it reads more than the arrays."""
    arrays = tuple(arrays)
    types = {n: _type_of(n, stmts) for n in arrays}

    def over(run) -> ir.Loop:
        bound = tuple(head) if ir.names(run) - set(arrays) else ()  # (constants: no lane)
        return ir.Loop(at, ir.i(0), ir.Var(count), bound + lane_arrays(run, arrays, lane=at))

    out: list = [ir.Array(n, types[n], ir.Var(size)) for n in arrays]
    run: list = []
    for s in stmts:
        if isinstance(s, (ir.Loop, ir.Comment)):
            if run:
                out.append(over(run))
                run = []
            out.append(ir.Loop(s.var, s.start, s.stop, (over(s.body),), s.step, s.comment)
                       if isinstance(s, ir.Loop) else s)
        else:
            run.append(s)
    if run:
        out.append(over(run))
    return tuple(out)
