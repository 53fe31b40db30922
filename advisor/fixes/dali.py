"""``dali``: JPEG files decoded and augmented on the GPU by an NVIDIA DALI pipeline."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


class Dali(Fix):
    name = "dali"
    runtime = "dali"
    editor = "advisor.patch.dali_fix:dali"
    feeds_data = True
    changes_numerics = True
    # a pipeline started ahead (its threads and the hardware decoder stopped and resumed
    # beside other processes) stalls steps of its window: its trials start fresh
    fresh = True
    where_key = "dataloader"

    def check(self, config, params, base):
        got = int(value(config, "dali").get("iterators") or 0)   # absent: DALI never imported
        return got > 0, "batches from a DALI iterator", f"{got} DALI iterators"
