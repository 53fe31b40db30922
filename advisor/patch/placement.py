"""Where the loader fixes put what they add: a definition at module level before the code that
builds the DataLoader, and the DataLoader handed to a function (``NAME = fn(NAME)`` after
``NAME = DataLoader(...)``, else ``fn(DataLoader(...))`` in place)."""

from __future__ import annotations

import libcst as cst

from .call_args import code_of
from .core import PRIO_INPUT, PatchContext


def define_before(ctx: PatchContext, f, call: cst.Call, source: str) -> None:
    """``source`` (a class or function) at module level, before the top-level statement that
    holds the call: after the statement preceding it (its imports, its other definitions)."""
    top = f.top_stmt_at(f.line_of(call))
    body = list(f.module.body)
    k = body.index(top) if top in body else 0
    if k > 0:
        ctx.insert(f, body[k - 1], source, after=True, prio=PRIO_INPUT, lines_before=2)
    else:
        ctx.insert(f, top or f.stmt_at(f.line_of(call)), source, after=False, prio=PRIO_INPUT)


def assigned_name(f, call: cst.Call) -> str | None:
    """``NAME`` where the statement is ``NAME = <the call>`` (or ``NAME: T = <the call>``)."""
    stmt = f.stmt_at(f.line_of(call))
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
        if isinstance(small, cst.AnnAssign) and small.value is call and isinstance(small.target, cst.Name):
            return small.target.value
    return None


def hand_to(ctx: PatchContext, f, call: cst.Call, fn: str) -> str:
    """The DataLoader the call builds handed to ``fn``; returns the edit, said for the notes.
    ``NAME = DataLoader(...)``: ``NAME = fn(NAME)`` is the next statement, so the call keeps
    the edits of the other fixes; inside a larger expression (a return, a dict): ``fn(...)``
    around the call as the other fixes left it."""
    name = assigned_name(f, call)
    if name:
        ctx.insert(f, f.stmt_at(f.line_of(call)), f"{name} = {fn}({name})", after=True, prio=PRIO_INPUT)
        return f"{name} = {fn}({name}) after it"
    ctx.on_node(f, call, lambda c: cst.parse_expression(f"{fn}({code_of(c)})"), late=True)
    return f"{fn}(DataLoader(...))"
