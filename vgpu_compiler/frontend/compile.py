"""``compile_program``: program text -> every stage, kept for inspection.

Reads like the pipeline (docs/internals.md), one line per stage::

    text --parse--> lark tree --ast.build--> AST --check--> IR --optimize--> IR
         (--with_jacobian--> IR with dF/dh for rodas4)
"""
from __future__ import annotations

from dataclasses import dataclass

from lark import Tree

from .. import spelling
from ..errors import Span, SyntaxError_, UnknownNameError, VgpuError
from . import ast as A
from .ast import build
from .check import check_program
from .parse import parse
from ..ir import nodes as N
from ..ir.jacobian import with_jacobian
from ..ir.passes import optimize


# No stage of the compiler recurses over an expression or a let chain (they walk on
# explicit stacks), so this is only a safety net for a walk that still would: it says
# what went wrong, not where (the stage that recursed does not know).
TOO_DEEP = ("the program is nested too deeply for the compiler (a chain of several hundred "
            "definitions, each using the next); write it in smaller pieces")


@dataclass(frozen=True)
class Compiled:
    """Every stage of one compilation."""

    source: str
    filename: str
    tree: Tree              # lark parse tree
    ast: A.ProgramAST       # frontend.ast
    checked: N.Program      # IR as the checker built it
    program: N.Program      # IR after ir.passes.optimize

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.program.fields)

    def select(self, field: str | None = None) -> N.Field:
        """The one field named ``field``; with ``None``, the program's only field."""
        fields = self.program.fields
        if field is None and len(fields) == 1:
            return fields[0]
        for f in fields:
            if f.name == field:
                return f
        listing = ", ".join(f"`{n}`" for n in self.field_names)
        if field is None:
            raise UnknownNameError(f"the program has {len(fields)} fields ({listing}); "
                                   f"choose one with {spelling.field_choice()}")
        raise UnknownNameError(f"no field named `{field}`; the program has {listing}")


def compile_program(src: str, filename: str = "<string>") -> Compiled:
    """Compile program text; every error is a VgpuError showing the source line."""
    try:
        tree = parse(src)                               # str -> lark.Tree
        ast = build(tree)                               # lark.Tree -> ProgramAST
        with N.interning():                             # one table for the text
            checked = check_program(ast)                # ProgramAST -> ir.Program
            fields = tuple(optimize(f) for f in checked.fields)     # ir.Field -> ir.Field
            fields = tuple(with_jacobian(f) for f in fields)        # rodas4: dF/dh, dF/dt
    except VgpuError as err:
        raise err.with_source(src, filename) from None
    except RecursionError:
        raise SyntaxError_(TOO_DEEP, span=Span(1, 1), source=src, filename=filename) from None
    program = N.Program(fields, source=src, filename=filename)
    return Compiled(src, filename, tree, ast, checked, program)

