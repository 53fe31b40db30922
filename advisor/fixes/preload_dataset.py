"""``preload-dataset``: the whole dataset's samples made once and held on the device."""

from __future__ import annotations

from advisor.fixes.base import Fix, loader


class PreloadDataset(Fix):
    name = "preload-dataset"
    runtime = "preload"
    editor = "advisor.patch.loader_fixes:preload_dataset"
    feeds_data = True
    where_key = "dataloader"
    # its DataLoader is written with num_workers=0, pin_memory=False, whatever the loader
    # fixes kept before it would write at that call or at the options that set it
    supersedes = ("dataloader-workers", "pin-memory")
    supersedes_why = ("its DataLoader is written with num_workers=0 and no pinned memory, each batch a "
                      "gather of samples already on the device: no worker count, pinned copy or "
                      "non_blocking transfer is read")

    def candidates(self, params, environment):
        # Host-side storage is the fallback when the samples cannot live on the device (refused,
        # or the trial crashed: out of device memory). Not when preload ran and was not faster:
        # precompute takes away only part of what preload does (the per-sample work, not the
        # collate and the copy).
        return [{"params": params, "fallback": {"name": "precompute-samples", "params": {}}}]

    def check(self, config, params, base):
        got = loader(config).get("dataset_type")
        return (None if got is None else got == "_PreloadedOnDevice"), "dataset _PreloadedOnDevice", f"dataset {got}"
