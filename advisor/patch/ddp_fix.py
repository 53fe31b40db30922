"""The ddp fix as source: one process per GPU with DistributedDataParallel, launched by torchrun.

After the script's imports, three small functions and a call: ``_ddp_start()`` makes each
process's own GPU its current device and starts the process group (under torchrun only; run as plain
python the script is one process, as before); ``_ddp_model(model)`` after the statement that
moved the model to its device routes the model's own ``forward`` through a DDP instance, so the
script's ``model``, its attributes and its ``state_dict`` keys stay as they were; and
``loader = _ddp_loader(loader)`` after the DataLoader shards it over the processes with a
DistributedSampler (a new shuffle each epoch) at batch_size // world size, the global batch
the script's. The note gives the launch command. This is what the trial does at run time
(advisor/interventions/ddp.py).
"""

from __future__ import annotations

import os

import libcst as cst

from . import imports
from .call_args import code_of
from .core import PRIO_INPUT, PRIO_TF32, PatchContext, SkipFix, applied, location
from .loader_fixes import _dataloader_call
from .model_fixes import _model_stmt

START = '''
def _ddp_start():
    """Under torchrun: this process's GPU as the current device ("cuda" is that GPU), and the
    process group started (added by advisor's ddp fix: torchrun --nproc-per-node N this
    script). Plain python: one process, as before."""
    import os

    import torch
    import torch.distributed as dist

    if "LOCAL_RANK" not in os.environ or dist.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
'''.strip() + "\n"

MODEL = '''
def _ddp_model(model):
    """`model` trained with DistributedDataParallel under torchrun: its own forward routed
    through DDP, so `model`, its attributes and its state_dict keys stay as they were."""
    import threading

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized():
        return model
    inner = model
    if isinstance(model, torch.nn.DataParallel):   # one GPU a process: pass the input straight on
        model.device_ids, inner = [], model.module
    on_gpu = next(inner.parameters()).is_cuda
    ddp = DistributedDataParallel(inner, device_ids=[torch.cuda.current_device()] if on_gpu else None)
    forward, inside = inner.forward, threading.local()

    def routed(*args, **kwargs):
        if getattr(inside, "on", False):   # DDP calling the model: its own forward
            return forward(*args, **kwargs)
        inside.on = True
        try:
            return ddp(*args, **kwargs)
        finally:
            inside.on = False

    inner.forward = routed
    return model
'''.strip() + "\n"

LOADER = '''
def _ddp_loader(loader):
    """`loader` sharded over the torchrun processes: a DistributedSampler with a new shuffle each
    epoch, batch_size // world size (the global batch kept); `loader` itself otherwise."""
    import torch
    import torch.distributed as dist

    data = torch.utils.data
    if not dist.is_initialized() or loader.batch_size is None or \\
            type(loader.sampler) not in (data.RandomSampler, data.SequentialSampler):
        return loader

    class EpochLoader(data.DataLoader):
        def __iter__(self):
            self.sampler.set_epoch(self.epoch)
            self.epoch += 1
            return super().__iter__()

    sampler = data.DistributedSampler(loader.dataset, shuffle=isinstance(loader.sampler, data.RandomSampler))
    sharded = EpochLoader(loader.dataset, batch_size=max(1, loader.batch_size // dist.get_world_size()),
                          sampler=sampler, num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                          pin_memory=loader.pin_memory, drop_last=loader.drop_last, timeout=loader.timeout,
                          worker_init_fn=loader.worker_init_fn, persistent_workers=loader.persistent_workers,
                          prefetch_factor=loader.prefetch_factor if loader.num_workers else None)
    sharded.epoch = 0
    return sharded
'''.strip() + "\n"


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


def ddp(ctx: PatchContext, fix: dict, p: dict) -> dict:
    n = max(2, int(p.get("nproc") or 2))
    fm, mstmt, target = _model_stmt(ctx, fix, "_ddp_model(model)")
    fl, call = _dataloader_call(ctx, fix)
    _define(ctx, fm, [("_ddp_start", START), ("_ddp_model", MODEL)] + ([("_ddp_loader", LOADER)] if fl is fm else []))
    if fl is not fm:
        _define(ctx, fl, [("_ddp_start", START), ("_ddp_loader", LOADER)])
    ctx.insert(fm, mstmt, f"_ddp_model({target})", after=True, prio=PRIO_INPUT)
    where = location(fl, fl.line_of(call))
    stmt = fl.stmt_at(fl.line_of(call))
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and \
            isinstance(small.targets[0].target, cst.Name):
        name = small.targets[0].target.value
        ctx.insert(fl, stmt, f"{name} = _ddp_loader({name})", after=True, prio=PRIO_INPUT)
        swap = f"{name} = _ddp_loader({name}) after it"
    else:
        ctx.on_node(fl, call, lambda c: cst.parse_expression(f"_ddp_loader({code_of(c)})"), late=True)
        swap = "_ddp_loader(DataLoader(...))"
    # the script from where advisor ran: relative below that directory, else its full path
    inside = ctx.script.startswith(os.path.join(ctx.cwd, ""))
    script = os.path.relpath(ctx.script, ctx.cwd) if inside else ctx.script
    launch = f"torchrun --nproc-per-node {n} {script}" + "".join(f" {a}" for a in ctx.argv)
    return applied(where, [f"_ddp_start() after the imports of {fm.rel}: one GPU a process, the process group",
                           f"_ddp_model({target}) after {location(fm, fm.line_of(mstmt))}",
                           f"DataLoader(...) at {where}: {swap} (DistributedSampler, batch_size // world size)"],
                   changes_numerics=True, launch=launch,
                   warning=f"launch it with: {launch} (run as plain python it trains on one GPU, as before)")
