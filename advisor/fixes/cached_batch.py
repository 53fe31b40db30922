"""``cached-batch``: every batch one batch cached on the device. A bound (the data-free
ceiling, advisor/trials/ceiling.py), never a fix."""

from __future__ import annotations

from advisor.fixes.base import Fix


class CachedBatch(Fix):
    name = "cached-batch"
    same_graphs = True   # the same batch's shapes, from the GPU
    kind = "bound"
    runtime = "cached_batch"
    changes_numerics = True   # one batch over and over: the loss falls faster than the script's
