"""DistributedDataParallel for a single-GPU or nn.DataParallel script: one process per GPU.

The trial's spec launches the script under torch.distributed.run with ``nproc`` ranks
(specs.trial_spec); in each rank this fix

- runs the patch's ``_ddp_start()``: the rank's GPU the current device, so the script's "cuda"
  is that GPU (a script that names "cuda:0" puts every rank on one GPU, and the trial fails
  with NCCL's reason; hiding the other GPUs instead breaks once anything has asked CUDA for
  its devices), and the process group started from torchrun's environment (NCCL on GPUs,
  gloo on CPUs);
- shards each DataLoader with the default sampling over the ranks with a DistributedSampler,
  a new shuffle each epoch, at batch_size // nproc: the global batch is the script's, so the
  training dynamics are too (BatchNorm's statistics aside, now per GPU);
- hands the model to the patch's ``_ddp_model`` at its first call (the first module with
  parameters called outside the data pipeline): its own ``forward`` (the module's inside an
  nn.DataParallel) routed through a DDP instance, so the script's reference to its model, its
  attributes and its ``state_dict`` keys stay as they were.

``_ddp_start`` and ``_ddp_model`` are the patch's own text (``_ddp_source``), executed here: the
trial and the patch are one code path. The loader is sharded where the DataLoader is built, as
the patch's ``_ddp_loader`` shards it after.

samples/s count every rank's batch (measure.samples_per_s), so the verdict compares the
processes together against one GPU.
"""

from __future__ import annotations

import torch

from advisor.runtime import world as ranks_world
from advisor.runtime.ddp_source import MODEL, START
from advisor.runtime.patching import in_loading, not_applied, source_functions, wrap

NAME = "ddp"
# The same global batch, but its shards' BatchNorm statistics and the sample order change.


def nproc(params) -> int:
    return max(2, int(params.get("nproc") or 2))


def describe(params) -> str:
    return (f"DistributedDataParallel over {nproc(params)} processes (torchrun), one GPU each; "
            f"the global batch kept, {nproc(params)} shards of it")


def not_applicable(config, environment, params):
    n = nproc(params)
    gpus = int(environment.get("gpu_count") or 0)
    if gpus and gpus < n:
        return f"needs {n} GPUs; this machine has {gpus}"
    dp = ((config.get("data_parallel") or {}).get("value") or {}).get("class")
    if dp == "DistributedDataParallel":
        return "the script already uses DistributedDataParallel"
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader to shard"
    bs = dl.get("batch_size")
    if not bs or bs < n:
        return f"a batch of {bs} cannot be split over {n} processes"
    return None


def _source() -> dict:
    """The patch's functions, executed once in this process."""
    return source_functions(START + "\n\n" + MODEL, "ddp fix")


def apply(params) -> None:
    rank, world = ranks_world()
    if world < 2:
        return
    _source()["_ddp_start"]()
    _shard_loaders(rank, world)
    _wrap_model()


def _shard_loaders(rank: int, world: int) -> None:
    from torch.utils.data import DistributedSampler

    from advisor.interventions.preload import _loader_args

    def make(orig):
        def __init__(self, *args, **kwargs):
            named = _loader_args(args, kwargs)
            sharded = named.get("sampler") is None and named.get("batch_sampler") is None and \
                named.get("batch_size", 1) is not None and named.get("dataset") is not None
            if sharded:
                bs = int(named.get("batch_size", 1))
                named["sampler"] = DistributedSampler(named["dataset"], num_replicas=world, rank=rank,
                                                      shuffle=bool(named.pop("shuffle", False)))
                named["batch_size"] = max(1, bs // world)
                args, kwargs = (), named
            orig(self, *args, **kwargs)
            if sharded:
                _epochs(self)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)


def _epochs(loader) -> None:
    """A new shuffle each epoch: sampler.set_epoch before each iterator, as DDP scripts do."""
    real = loader._get_iterator
    count = [0]

    def _get_iterator():
        loader.sampler.set_epoch(count[0])
        count[0] += 1
        return real()
    loader._get_iterator = _get_iterator


def _wrap_model() -> None:
    original = torch.nn.Module.__call__

    def call(module, *args, **kwargs):
        # The first module with parameters called outside the data pipeline is the model: wrapped
        # before _call_impl looks its forward up (compile does the same), then __call__ is torch's.
        if not in_loading() and any(True for _ in module.parameters()):
            torch.nn.Module.__call__ = original
            try:
                _source()["_ddp_model"](module)
            except Exception as e:  # noqa: BLE001 - the trial then runs unwrapped: say so
                not_applied(NAME, f"DDP could not wrap the model: {type(e).__name__}: {e}")
        return original(module, *args, **kwargs)

    torch.nn.Module.__call__ = call
