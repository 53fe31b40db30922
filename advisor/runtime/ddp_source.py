"""The ddp fix's functions as source text, torch-free: the patch writes them into the script
(advisor/patch/ddp_fix.py) and the trial executes the same text in each rank
(advisor/interventions/ddp.py), so what the trial measured is what the patch does."""

START = '''
def _ddp_start():
    """Under torchrun: this process's GPU as the current device ("cuda" is that GPU), and the
    process group started (added by advisor's ddp fix: torchrun --nproc-per-node N this
    script). Plain python: one process, as before."""
    import atexit
    import datetime
    import os
    import sys

    import torch
    import torch.distributed as dist

    if "LOCAL_RANK" not in os.environ or dist.is_initialized():
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    started = dist.init_process_group

    def _started_already(*args, **kwargs):
        # a script that runs DDP itself under torchrun starts the group too: it runs already
        if not dist.is_initialized():
            started(*args, **kwargs)

    dist.init_process_group = _started_already
    failed = []
    hook = sys.excepthook
    sys.excepthook = lambda *exc: (failed.append(1), hook(*exc))

    def _end():
        # a gloo rank that tears its group down while the other still runs can abort
        # ("terminate called without an active exception"): the ranks meet first, on a
        # clean exit only, and never wait long for a rank that is gone
        if not dist.is_initialized():
            return
        if not failed and dist.get_backend() == "gloo":
            try:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
            except RuntimeError:
                pass
        dist.destroy_process_group()

    atexit.register(_end)
'''.strip() + "\n"

MODEL = '''
def _ddp_model(model):
    """`model` trained with DistributedDataParallel under torchrun: its own forward routed
    through DDP, so `model`, its attributes and its state_dict keys stay as they were."""
    import threading

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized() or isinstance(model, DistributedDataParallel):
        return model   # plain python; or the script wrapped it itself once the group existed
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
