"""Several GPUs visible, one used — or nn.DataParallel.

What it does:
    Reads the observed GPU count and parallel wrapper: more than one GPU visible with no
    DistributedDataParallel, or ``nn.DataParallel`` in use.

Why is this bad:
    Idle GPUs are wasted capacity. ``nn.DataParallel`` is single-process: it scatters inputs
    and replicates the model from one Python thread every step, and the GIL and the
    gather on GPU 0 cap its scaling; PyTorch recommends DDP even on one machine.

Example:
    model = nn.DataParallel(model)          # or: 8 GPUs visible, model.cuda() on one

Fix:
    Use DistributedDataParallel with one process per GPU (``ddp``), launched with
    ``torchrun --nproc-per-node NUM_GPUS train.py``: each process on its own GPU, the model in
    DDP, the DataLoader sharded by a DistributedSampler at batch_size // NUM_GPUS. advisor
    trials it on every GPU of the machine (2 at least), judged on the samples/s of all the
    processes against one GPU, and writes ``_ddp_start()``, ``_ddp_model(model)`` and
    ``loader = _ddp_loader(loader)`` into the script, with the launch command.

Fix safety:
    The global batch is the script's: each GPU gets a shard of it, so the learning rate needs
    no change. BatchNorm now normalizes over each GPU's shard and the sample order changes,
    so losses differ slightly; the fix counts as changing numerics. Run as plain python the
    edited script trains on one GPU as before.
"""

from ._common import fix

CODE = "ADV113"
NAME = "single-gpu-of-many"
SEVERITY = "warning"
NEEDS = ("config",)
FIX = "ddp"
HITS = ("two_gpus_one_used_config", "data_parallel_config")
NON_HITS = {"amp_bf16_channels_last_config": "one GPU visible"}


def check(ctx):
    gpus = int(ctx.environment.get("gpu_count") or 0)
    dp = ctx.value("data_parallel") or {}
    cls = dp.get("class")
    if cls == "DistributedDataParallel":
        return None
    if cls == "DataParallel":
        msg = "nn.DataParallel drives all GPUs from one process; DDP scales better."
    elif gpus > 1:
        msg = f"{gpus} GPUs are visible but the script trains on one."
    else:
        return None
    return {
        "message": msg,
        "evidence": [f"visible GPUs: {gpus}", f"parallel wrapper: {cls or 'none'}"],
        "estimated_gain_ms": None,
        "fix": fix("ddp", changes_numerics=True, where=ctx.where("data_parallel"), nproc=max(gpus, 2),
                   code=f"torchrun --nproc_per_node={max(gpus, 2)} train.py ...  # model = DDP(model, device_ids=[local_rank])"),
    }
