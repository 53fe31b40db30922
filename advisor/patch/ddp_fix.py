"""The ddp fix as source: one process per GPU with DistributedDataParallel, launched by torchrun.

After the script's imports, three small functions and a call: ``_ddp_start()`` makes each
process's own GPU its current device and starts the process group (under torchrun only; run as plain
python the script is one process, as before); ``_ddp_model(model)`` after the statement that
moved the model to its device routes the model's own ``forward`` through a DDP instance, so the
script's ``model``, its attributes and its ``state_dict`` keys stay as they were; and
``loader = _ddp_loader(loader)`` after the DataLoader shards it over the processes with a
DistributedSampler (a new shuffle each epoch) at batch_size // world size, the global batch
the script's. A file with its own ``DistributedDataParallel(...)`` call (research code wraps
its model ``if dist.is_initialized()``) gets no ``_ddp_model``: ``_ddp_start()`` makes its
branch run. The note gives the launch command. The functions' text is the one the trial
executes at run time (advisor/runtime/ddp_source.py, advisor/interventions/ddp.py).
"""

from __future__ import annotations

import ast
import os
import shlex

import libcst as cst

from advisor.runtime.ddp_source import LOADER, MODEL, START

from . import imports
from .core import PRIO_INPUT, PRIO_TF32, PatchContext, SkipFix, applied, location
from .loader_fixes import _dataloader_call
from .model_fixes import model_stmt
from .placement import hand_to


def _defines(f, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in f.module.body)


def _define(ctx: PatchContext, f, blocks: list[tuple[str, str]]) -> None:
    """The functions (name, source) at module level after the file's imports, each once, and a
    call of _ddp_start() there, before the script's code runs (a second call does nothing)."""
    anchor = imports.settings_anchor(f.module)
    if anchor is None:
        raise SkipFix(f"{f.rel} is empty")
    stmt, after = anchor
    for name, source in blocks:
        if not _defines(f, name):
            ctx.insert(f, stmt, source, after=after, prio=PRIO_TF32, lines_before=2)
    ctx.insert(f, stmt, "_ddp_start()", after=after, prio=PRIO_TF32, lines_before=2)


def _wraps_itself(f) -> int | None:
    """The line of the file's own DistributedDataParallel(...) call (``DDP(...)`` when imported
    so) under an ``if`` that asks ``is_initialized()`` (in its body or its ``else``): a branch
    that a run without a process group never took and that ``_ddp_start()`` makes run. None
    otherwise: a DDP branch behind a flag of the script's own (the ImageNet example's
    ``args.distributed``) stays untaken under torchrun, and the model gets ``_ddp_model``."""
    try:
        tree = ast.parse(f.text)
    except SyntaxError:
        return None
    names = {"DistributedDataParallel"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                                           for a in n.names if a.name == "DistributedDataParallel" and a.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "is_initialized" in ast.unparse(node.test):
            for stmt in [*node.body, *node.orelse]:
                for call in ast.walk(stmt):
                    if isinstance(call, ast.Call) and (getattr(call.func, "attr", None) in names
                                                       or getattr(call.func, "id", None) in names):
                        return call.lineno
    return None


def ddp(ctx: PatchContext, fix: dict, p: dict) -> dict:
    n = max(2, int(p.get("nproc") or 2))
    fm, mstmt, target = model_stmt(ctx, fix, "_ddp_model(model)")
    fl, call = _dataloader_call(ctx, fix)
    own = _wraps_itself(fm)   # then _ddp_start() is what its branch waits for: no second wrapper
    _define(ctx, fm, [("_ddp_start", START)] + ([] if own else [("_ddp_model", MODEL)])
            + ([("_ddp_loader", LOADER)] if fl is fm else []))
    if fl is not fm:
        _define(ctx, fl, [("_ddp_start", START), ("_ddp_loader", LOADER)])
    if not own:
        ctx.insert(fm, mstmt, f"_ddp_model({target})", after=True, prio=PRIO_INPUT)
    where = location(fl, fl.line_of(call))
    swap = hand_to(ctx, fl, call, "_ddp_loader")
    # the script from where advisor ran: relative below that directory, else its full path
    inside = ctx.script.startswith(os.path.join(ctx.cwd, ""))
    script = os.path.relpath(ctx.script, ctx.cwd) if inside else ctx.script
    launch = shlex.join(["torchrun", "--nproc-per-node", str(n), script, *ctx.argv])
    return applied(where, [f"_ddp_start() after the imports of {fm.rel}: one GPU a process, the process group",
                           f"_ddp_model({target}) after {location(fm, fm.line_of(mstmt))}" if not own else
                           f"the model: the script's own DistributedDataParallel at {location(fm, own)}, "
                           "which runs once _ddp_start() has started the process group",
                           f"DataLoader(...) at {where}: {swap} (DistributedSampler, batch_size // world size)"],
                   changes_numerics=True, launch=launch,
                   warning=f"launch it with: {launch} (run as plain python it trains on one GPU, as before)")
