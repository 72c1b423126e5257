"""Passes over the IR that lay an algorithm out for a target, never a second algorithm.

``lane_arrays``: the C kernel runs each piece of an attempt as a loop over a block of
lanes (``for (int l = 0; l < VG_W; l++)`` in templates/adaptive.c.j2), each lane's
scalars in arrays: the statements of one trajectory, with the named variables made
elements ``name[l]`` (a declaration of one becomes an assignment to it), a field's
registers ``A_name[l]``.
"""
from __future__ import annotations

from dataclasses import replace

from . import ir


def lane_arrays(stmts, arrays, lane: str = "l", registers=(), prefix: str = "A_") -> tuple:
    """``registers``: the field's names, whose lane arrays are ``prefix + name``."""
    arrays = {**{a: a for a in arrays}, **{r: prefix + r for r in registers}}
    at = ir.Var(lane)

    def expr(e):
        if isinstance(e, ir.Var):
            return ir.Index(arrays[e.name], at) if e.name in arrays else e
        if isinstance(e, ir.Elem):
            return replace(e, index=expr(e.index))
        if isinstance(e, ir.Index):
            return replace(e, index=expr(e.index))
        if isinstance(e, ir.Bin):
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
                return ir.Assign(ir.Index(arrays[s.name], at), expr(s.value))
            return replace(s, value=expr(s.value))
        if isinstance(s, ir.Assign):
            return replace(s, target=expr(s.target), value=expr(s.value))
        if isinstance(s, ir.If):
            return ir.If(expr(s.cond), body(s.then), body(s.orelse))
        if isinstance(s, ir.Loop):
            return replace(s, start=expr(s.start), stop=expr(s.stop), body=body(s.body))
        if isinstance(s, ir.Block):
            return replace(s, body=body(s.body))
        if isinstance(s, ir.Do):
            return ir.Do(expr(s.call))
        if isinstance(s, ir.Return) and s.value is not None:
            return ir.Return(expr(s.value))
        return s

    def body(ss):
        return tuple(stmt(s) for s in ss)

    return body(stmts)
