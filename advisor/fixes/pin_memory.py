"""``pin-memory``: the DataLoader's batches in pinned host memory (asynchronous copies)."""

from __future__ import annotations

from advisor.fixes.base import Fix, loader


class PinMemory(Fix):
    name = "pin-memory"
    runtime = "dataloader"
    editor = "advisor.patch.loader_fixes:dataloader"
    feeds_data = True
    bundled = True
    where_key = "dataloader"

    def candidates(self, params, environment):
        return [{"params": {"pin_memory": True}}]

    def transformers_args(self, ctx, fix, params, calls):
        from advisor.patch.frameworks import _user_site

        if _user_site(ctx, fix):
            return None    # the user's own DataLoader, passed to the Trainer: the generic edit
        return [("dataloader_pin_memory", "True")], {}

    def check(self, config, params, base):
        got = loader(config).get("pin_memory")
        return (None if got is None else bool(got)), "pin_memory=True", f"pin_memory={got}"
