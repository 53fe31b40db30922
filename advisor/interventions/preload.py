"""Preload a map-style Dataset once, collated into tensors on the training device; each
batch is then one gather (``index_select``) with the DataLoader's own sampler.

For datasets that fit in device memory (CIFAR/MNIST-sized, or pre-decoded features) this
removes the whole per-batch host pipeline: per-sample ``__getitem__`` calls, collation,
worker processes, shared memory, pinning and the host-to-device copy, and the stall at
each epoch start while the workers produce their first batches. The batches are the same
tensors, in the same order: the sampler is the DataLoader's and draws from the same random
stream, and the stored samples were collated by ``default_collate`` as each batch would be.

Applied at DataLoader construction, in the main process. Refused, with the reason noted,
when ``precompute.plan`` refuses (random transforms, iterable dataset, too slow), when the
DataLoader has a custom ``collate_fn`` or ``batch_size=None``, when a sample holds values
that are not tensors, arrays or numbers, or when the samples would take more than a
quarter of the free device memory (``max_bytes`` at most).

A shuffled loader's next permutation is made ahead in the background (``epoch_ahead``): the
epoch start costs a draw and a copy, not a randperm (most of an epoch start's host time).
"""

from __future__ import annotations

import numbers

import torch

from advisor.interventions import precompute, samples_cache
from advisor.interventions.epoch_ahead import Speculation, moved
from advisor.runtime.patching import accelerator, making_batches, not_applied, restore_rng, rng_states, wrap

NAME = "preload-dataset"
MAX_BYTES = 4 << 30
DEVICE_SHARE = 0.25   # of the free device memory: the model, activations and optimizer come first
SPECULATE = True      # compute the next epoch's permutation ahead (off: benchmarks/epoch_start.py)


def describe(params) -> str:
    return f"Dataset preloaded once as tensors on {params.get('device') or accelerator()}; one gather per batch, no workers"


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader"
    if dl.get("batch_size") is None:
        return "the DataLoader has batch_size=None (the dataset makes its own batches)"
    return precompute.samples_vary(config)


class Preloaded(torch.utils.data.Dataset):
    """Every sample of ``source``, collated once; ``__getitems__`` gathers a batch."""

    def __init__(self, source, collated, device: torch.device):
        self._source = source
        self._data = collated
        self._device = device
        self._n = len(source)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return _take(self._data, torch.tensor([i], device=self._device), squeeze=True)

    def __getitems__(self, indices):
        # A batch marked as already collated: the DataLoader's collate_fn is set to unwrap it.
        if isinstance(indices, torch.Tensor):  # from _index_batches: already on the device
            return _Batch(_take(self._data, indices.to(self._device, non_blocking=True)))
        idx = torch.as_tensor(indices, dtype=torch.long)
        if self._device.type == "cuda":
            # From pageable memory the copy waits for the stream to drain (booked as data wait,
            # every step: docs/trials.md); from pinned memory it is queued.
            idx = idx.pin_memory()
        return _Batch(_take(self._data, idx.to(self._device, non_blocking=True)))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._source, name)


class _Batch:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _unwrap(batch):
    return batch.value


def _map(fn, data, strict: bool = True):
    """fn on every tensor of default_collate's output, its containers kept (dict subclasses
    and namedtuples included); another leaf is an error, or kept as it is when not strict."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        return type(data)({k: _map(fn, v, strict) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_map(fn, v, strict) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_map(fn, v, strict) for v in data)
    if not strict:
        return data
    raise TypeError(f"cannot gather a {type(data).__name__}")


def _take(data, idx: torch.Tensor, squeeze: bool = False):
    if squeeze:
        return _map(lambda t: t.index_select(0, idx)[0], data)
    return _map(lambda t: t.index_select(0, idx), data)


def _plain(sample) -> bool:
    """Leaves default_collate turns into tensors: tensors, arrays, numbers."""
    if isinstance(sample, (torch.Tensor, numbers.Number)):
        return True
    if isinstance(sample, dict):
        return all(_plain(v) for v in sample.values())
    if isinstance(sample, (list, tuple)):
        return all(_plain(v) for v in sample)
    return type(sample).__module__ == "numpy" and hasattr(sample, "dtype") and sample.dtype.kind in "biuf"


def plan(dataset, loader_kwargs: dict, device: torch.device, max_bytes: int = MAX_BYTES) -> str | None:
    """Why this DataLoader's dataset cannot be preloaded on ``device``, or None."""
    collate = loader_kwargs.get("collate_fn")
    if collate is not None and collate is not torch.utils.data.default_collate:
        return "the DataLoader has its own collate_fn"
    no_batches = "batch_size" in loader_kwargs and loader_kwargs["batch_size"] is None
    if no_batches and loader_kwargs.get("batch_sampler") is None:
        return "the DataLoader has batch_size=None (the dataset makes its own batches)"
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        max_bytes = min(max_bytes, int(free * DEVICE_SHARE))
    why = precompute.plan(dataset, max_bytes=max_bytes)
    if why:
        return why.replace("precomputing", "preloading")
    states = rng_states()
    try:
        if not _plain(dataset[0]):
            return "a sample holds values other than tensors, arrays and numbers"
    finally:
        restore_rng(states)
    return None


def preload(dataset, device: torch.device) -> Preloaded:
    """Every sample once, collated as one batch (or loaded: an earlier trial of this analyze
    collated them, samples_cache), moved to the device."""
    states = rng_states()
    try:
        collated = samples_cache.cached(
            dataset, "collated", lambda: torch.utils.data.default_collate(precompute.every_sample(dataset)))
    finally:
        restore_rng(states)
    return Preloaded(dataset, _map(lambda t: t.to(device), collated), device)


def _loader_args(args: tuple, kwargs: dict) -> dict:
    """The DataLoader's arguments by name (the first eight may be positional)."""
    names = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn", "pin_memory")
    return {**dict(zip(names, args)), **kwargs}


def _single_process(loader) -> None:
    """After construction, whatever other fixes set: batches come from the device, so no
    worker processes (CUDA cannot run in forked workers) and no pinning."""
    from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

    persistent = loader.persistent_workers and loader.num_workers > 0
    loader.num_workers = 0
    loader.pin_memory = False
    loader.collate_fn = _unwrap
    fast = _fast_indices_match(loader)
    device = loader.dataset._device
    spec = None
    if fast and SPECULATE and _fast_kind(loader.batch_sampler) == "random":
        # Before the seed, a new iterator draws its base seed, from the global generator
        # unless the loader has a generator of its own; a kept (persistent) one draws none.
        skip = 0 if persistent else int(loader.generator is None)
        spec = Speculation(len(loader.dataset), device.type == "cuda", skip)
    loader._preload_speculation = spec  # its hits and misses, for the tests
    kept = []

    def _get_iterator():
        # A persistent iterator draws its base seed once, not every epoch: keep one iterator
        # too, so the sampler's random stream (the shuffle) is the one the script had.
        if persistent and kept:
            kept[0]._reset(loader)
            it = kept[0]
        else:
            it = _SingleProcessDataLoaderIter(loader)
            kept[:] = [it]
            if loader.generator is None:
                moved(spec)  # the base seed came from the global generator
        if fast:  # the sampler's batches, as index tensors made on the device
            it._sampler_iter = _index_batches(loader.batch_sampler, device, spec)
        return it
    loader._get_iterator = _get_iterator


def _fast_kind(batch_sampler) -> str | None:
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    if type(batch_sampler) is not BatchSampler:
        return None
    s = batch_sampler.sampler
    if type(s) is SequentialSampler:
        return "sequential"
    if type(s) is RandomSampler and not s.replacement and s._num_samples is None and s.generator is None:
        return "random"
    return None


def _index_batches(batch_sampler, device: torch.device, spec: Speculation | None = None):
    """What iter(batch_sampler) yields, as index tensors: the same draws from the same random
    stream (RandomSampler seeds a private generator from one draw, then one randperm), without
    a Python int per sample (lists of thousands of ints cost host time every batch). With ``spec``
    the permutation may have been computed ahead; the seed is drawn here all the same."""
    n = len(batch_sampler.sampler.data_source)
    pin = device.type == "cuda"
    if _fast_kind(batch_sampler) == "random":
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        order = spec.take(seed) if spec is not None else None  # made ahead, pinned where pin
        if order is None:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
            order = order.pin_memory() if pin else order
    else:
        order = torch.arange(n).pin_memory() if pin else torch.arange(n)
    order = order.to(device, non_blocking=True)  # here: on this thread's stream, before the gathers
    size = batch_sampler.batch_size
    stop = n - n % size if batch_sampler.drop_last else n
    for i in range(0, stop, size):
        if spec is not None and i + size >= stop:  # the last batch: its step is the randperm's time
            spec.arm()
        yield order[i:i + size]
    if spec is not None:
        spec.guess()  # the last step's own draws are in the state now (cheap when unchanged)


def _fast_indices_match(loader) -> bool:
    """Does _index_batches reproduce this loader's sampler? Checked on one epoch each way
    from the same random state (then restored): any other sampler keeps the generic path."""
    bs = loader.batch_sampler
    if _fast_kind(bs) is None:
        return False
    states = rng_states()
    try:
        want = [list(b) for b in bs]
        after_want = torch.get_rng_state()
        restore_rng(states)
        got = [b.tolist() for b in _index_batches(bs, torch.device("cpu"))]
        return got == want and torch.equal(torch.get_rng_state(), after_want)
    finally:
        restore_rng(states)


def apply(params) -> None:
    # The device index is read when the first DataLoader is made: reading it here would
    # initialize CUDA before the script runs (a process's start-up is timed: runner startup).
    where = torch.device(params.get("device") or accelerator())
    max_bytes = int(params.get("max_bytes", MAX_BYTES))

    def make(orig):
        def __init__(self, *args, **kwargs):
            named = _loader_args(args, kwargs)
            dataset = named.get("dataset")
            took = False
            if dataset is not None and not isinstance(dataset, Preloaded):
                device = where
                if device.type == "cuda" and device.index is None:
                    device = torch.device("cuda", torch.cuda.current_device())
                with making_batches():  # the transforms' module calls are not the model's
                    why = plan(dataset, named, device, max_bytes)
                    if why is None:
                        dataset = preload(dataset, device)
                if why is None:
                    if "dataset" in kwargs:
                        kwargs["dataset"] = dataset
                    else:
                        args = (dataset, *args[1:])
                    took = True
                else:
                    not_applied(NAME, why)
            orig(self, *args, **kwargs)
            if took:
                _single_process(self)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
