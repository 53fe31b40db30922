"""``batch-size``: a larger batch (x2, x4), measured apart: it changes training dynamics."""

from __future__ import annotations

from advisor.fixes.base import Fix, loader


class BatchSize(Fix):
    name = "batch-size"
    runtime = "batch_size"
    editor = "advisor.patch.loader_fixes:batch_size"
    changes_numerics = True
    changes_batch = True
    apart = True   # never stacked: each factor runs on top of the final stack (trials/apart.py)
    where_key = "dataloader"

    def candidates(self, params, environment):
        return [{"params": {"factor": f}, "group": self.name} for f in (2, 4)]

    def batch_factor(self, params):
        return int(params.get("factor") or 1)

    def check(self, config, params, base):
        return batch_check(config, base, int(params.get("factor", 2)))


def batch_check(config: dict, base: dict, factor: int) -> tuple[bool | None, str, str]:
    """Whether the patched run's DataLoader takes ``factor`` times the script's own batch
    (None: either is unknown)."""
    want = (base.get("batch_size") or 0) * factor
    got = loader(config).get("batch_size")
    return (None if got is None or not want else got == want), f"batch size {want}", f"batch size {got}"
