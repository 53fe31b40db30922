"""``precompute-samples``: the dataset's deterministic per-sample work done once, kept on the host."""

from __future__ import annotations

from advisor.fixes.base import Fix, loader


class PrecomputeSamples(Fix):
    name = "precompute-samples"
    runtime = "precompute"
    editor = "advisor.patch.loader_fixes:precompute_samples"
    feeds_data = True
    where_key = "dataloader"

    def check(self, config, params, base):
        got = loader(config).get("dataset_type")
        return (None if got is None else got == "list"), "dataset a list of samples", f"dataset {got}"
