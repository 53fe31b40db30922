"""The data-free ceiling: every batch is one cached batch, already on the training device.

Not a fix (training on one batch over and over teaches nothing): a bound. The first batch
each DataLoader yields is fetched as the script would (its workers, transforms, collation),
moved to the accelerator once, and then served for every step of every epoch, with the
loader's length, through the DataLoader's own iterator class, so that advisor's step and batch
hooks see it as a loader batch. What remains is the model's step: forward, backward,
optimizer, the script's own code around them. No data fix can make the step faster than
this; the report shows the kept stack as a fraction of it (advisor.ceiling).
"""

from __future__ import annotations

import torch

from advisor.interventions.preload import _map
from advisor.runtime.patching import accelerator, served_in_process, wrap

NAME = "cached-batch"
# A bound, never a fix for the user's code: advisor.patch has no editor for it.


def describe(params) -> str:
    return "every batch is one cached batch on the device (no loader): the data-free ceiling"


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the script uses no torch DataLoader: its own batches are its code's"
    return None


def _length(loader) -> int:
    try:
        return len(loader)
    except TypeError:  # an IterableDataset without a length: one endless epoch
        return 1 << 62


def _serve_cached(loader, device: torch.device) -> None:
    from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

    class Cached(_SingleProcessDataLoaderIter):
        """The loader's iterator class, serving the cached batch `len(loader)` times."""

        def __init__(self, batch):
            super().__init__(loader)
            self._cached, self._served, self._n = batch, 0, _length(loader)

        def _next_data(self):
            if self._served >= self._n:
                raise StopIteration
            self._served += 1
            return self._cached

    real = loader._get_iterator
    cache = []

    def _get_iterator():
        if not cache:
            it = real()
            batch = next(iter(it))
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            cache.append(_map(lambda t: t.to(device), batch, strict=False))
            served_in_process(loader)
        return Cached(cache[0])

    loader._get_iterator = _get_iterator


def apply(params) -> None:
    where = torch.device(params.get("device") or accelerator())

    def make(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            device = where
            if device.type == "cuda" and device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            _serve_cached(self, device)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
