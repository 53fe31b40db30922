"""Batch size x2 / x4: the DataLoader's batch_size multiplied. Changes training dynamics."""

from __future__ import annotations

import torch

from advisor.runtime.patching import wrap

NAME = "batch-size"


def describe(params) -> str:
    return f"batch size x{params.get('factor', 2)} (scale the learning rate with it)"


def not_applicable(config, environment, params):
    dl = (config.get("dataloader") or {}).get("value")
    if dl is None:
        return "the batch size is not set by a torch DataLoader"
    if not dl.get("batch_size"):
        return "the DataLoader uses a batch_sampler or batch_size=None"
    return None


def apply(params) -> None:
    factor = int(params.get("factor", 2))

    def make(orig):
        def __init__(self, dataset, batch_size=1, *args, **kwargs):
            if batch_size and not kwargs.get("batch_sampler"):
                batch_size = int(batch_size) * factor
            return orig(self, dataset, batch_size, *args, **kwargs)
        return __init__

    wrap(torch.utils.data.DataLoader, "__init__", make)
