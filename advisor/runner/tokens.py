"""Tokens in a batch, for sequence models: the real ones (its attention mask's ones) and all
of them, padding included. Read from a mapping batch (a dict, a transformers BatchEncoding)
whose ``attention_mask`` is a 2-D tensor still on the CPU: summing one on the GPU would wait
for the device inside the step, so such a batch is not counted."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def tokens_of(batch) -> tuple[int, int, int] | None:
    """(real tokens, all tokens, width) of the batch, or None when it says nothing of them."""
    mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None   # BatchEncoding too
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.device.type != "cpu" or not mask.numel():
        return None
    return int(mask.sum()), int(mask.numel()), int(mask.shape[1])
