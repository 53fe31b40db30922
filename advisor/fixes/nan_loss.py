"""``nan-loss``: the loss poisoned with NaN. A test of the numerics check, never proposed."""

from __future__ import annotations

from advisor.fixes.base import Fix


class NanLoss(Fix):
    name = "nan-loss"
    kind = "test"
    runtime = "nan_loss"
    changes_numerics = True
