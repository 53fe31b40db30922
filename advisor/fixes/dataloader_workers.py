"""``dataloader-workers``: the DataLoader's samples made by worker processes (and pinned)."""

from __future__ import annotations

from advisor.fixes.base import Fix, loader
from advisor.host import usable_cpus


class DataloaderWorkers(Fix):
    name = "dataloader-workers"
    runtime = "dataloader"
    editor = "advisor.patch.loader_fixes:dataloader"
    feeds_data = True
    where_key = "dataloader"
    tie_reason = "with more headroom"   # more workers: room for the fixes that speed the GPU up later

    def candidates(self, params, environment):
        cpus = int(environment.get("cpu_count") or usable_cpus())
        # A few values, not a sweep: each trial is a fresh process. Half the cores and all of
        # them (up to 8: beyond that workers mostly contend for the same memory bandwidth).
        values = sorted({max(2, min(8, cpus) // 2), max(2, min(8, cpus))})
        if params.get("num_workers"):  # a rule's own count (ADV118: twice the workers, random transforms)
            values = [int(params["num_workers"])]
        pin = bool(environment.get("gpu_count"))
        return [{"params": {"num_workers": v, "pin_memory": pin}, "group": self.name} for v in values]

    def transformers_args(self, ctx, fix, params, calls):
        from advisor.patch.frameworks import _hf_has, _user_site

        if _user_site(ctx, fix):
            return None    # the user's own DataLoader, passed to the Trainer: the generic edit
        workers = int(params.get("num_workers") or max(2, min(8, usable_cpus())))
        items = [("dataloader_num_workers", str(workers))]
        if workers > 0 and _hf_has("dataloader_persistent_workers"):
            items.append(("dataloader_persistent_workers", "True"))
        if params.get("pin_memory"):
            items.append(("dataloader_pin_memory", "True"))
        return items, {}

    def check(self, config, params, base):
        want, got = params.get("num_workers"), loader(config).get("num_workers")
        return (None if want is None or got is None else got >= int(want)), f"num_workers={want}", f"num_workers={got}"
