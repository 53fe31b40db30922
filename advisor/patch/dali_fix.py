"""The dali fix as source: the ``_DaliLoader`` class the trial ran, at module level, and the
training DataLoader handed to it: ``loader = _DaliLoader.replacing(DataLoader(...))``.

The class text is the run's own (config ``dataloader.dali.source``, written by the child from
the script's dataset and transforms: advisor.dali), so the patch does what the trial measured.
The DataLoader call stays as it was, with whatever other fixes set on it: ``replacing`` hands
it back unchanged where DALI cannot stand in for it (a sampler of its own, in a distributed
run), and its workers are then the ones that run.
"""

from __future__ import annotations

import libcst as cst

from .call_args import code_of
from .core import PRIO_INPUT, PatchContext, SkipFix, applied, location
from .loader_fixes import _dataloader_call


def dali(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, call = _dataloader_call(ctx, fix)
    here = location(f, f.line_of(call))
    seen = ((ctx.config.get("dataloader") or {}).get("value") or {}).get("dali") or {}
    source = seen.get("source")
    if not source:
        raise SkipFix(seen.get("why_not") or f"the run recorded no DALI pipeline for the DataLoader at {here}")
    if any(isinstance(s, cst.ClassDef) and s.name.value == "_DaliLoader" for s in f.module.body):
        raise SkipFix(f"{f.rel} already defines _DaliLoader")
    top = f.top_stmt_at(f.line_of(call))
    body = list(f.module.body)
    k = body.index(top) if top in body else 0
    if k > 0:
        ctx.insert(f, body[k - 1], source, after=True, prio=PRIO_INPUT, lines_before=2)
    else:
        ctx.insert(f, top or f.stmt_at(f.line_of(call)), source, after=False, prio=PRIO_INPUT)

    name = _assigned_name(f, call)
    if name:    # `loader = DataLoader(...)`: the swap is the next statement
        ctx.insert(f, f.stmt_at(f.line_of(call)), f"{name} = _DaliLoader.replacing({name})", after=True, prio=PRIO_INPUT)
        swap = f"{name} = _DaliLoader.replacing({name}) after it"
    else:       # inside a larger expression (a return, a dict): around the call as the other fixes left it
        ctx.on_node(f, call, lambda c: cst.parse_expression(f"_DaliLoader.replacing({code_of(c)})"), late=True)
        swap = "_DaliLoader.replacing(DataLoader(...))"
    mapping = [f"{a} -> {b}" for a, b in seen.get("mapping") or []]
    return applied(here, ["class _DaliLoader (at module level): the dataset's files decoded and transformed "
                          "on the GPU by NVIDIA DALI", f"DataLoader(...) at {here}: {swap}", *mapping],
                   changes_numerics=True,
                   warning="needs NVIDIA DALI (pip install nvidia-dali-cuda120, or nvidia-dali-cuda130 for a CUDA 13 "
                           "build of torch); the augmentations draw from DALI's random streams")


def _assigned_name(f, call: cst.Call) -> str | None:
    """``NAME`` where the statement is ``NAME = <the call>``."""
    stmt = f.stmt_at(f.line_of(call))
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 \
                and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value
        if isinstance(small, cst.AnnAssign) and small.value is call and isinstance(small.target, cst.Name):
            return small.target.value
    return None
