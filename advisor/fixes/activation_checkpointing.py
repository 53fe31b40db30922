"""``activation-checkpointing``: the model's blocks recompute their activations in the backward
instead of keeping them, and the batch doubles into the memory that frees. Measured apart."""

from __future__ import annotations

from advisor.fixes.base import Fix
from advisor.fixes.batch_size import batch_check


class ActivationCheckpointing(Fix):
    name = "activation-checkpointing"
    runtime = "activation_checkpointing"
    editor = "advisor.patch.checkpointing:activation_checkpointing"
    changes_numerics = True   # with the larger batch: scale the learning rate with it
    changes_batch = True
    apart = True   # never stacked: run on top of the final stack (trials/apart.py), as batch-size
    where_key = "model"

    def candidates(self, params, environment):
        return [{"params": {"factor": int(params.get("factor") or 2)}, "group": self.name}]

    def batch_factor(self, params):
        return int(params.get("factor") or 1)

    def transformers_args(self, ctx, fix, params, calls):
        extra = {"changes_numerics": True}
        factor = self.batch_factor(params)
        if factor > 1:
            extra["warning"] = f"raise per_device_train_batch_size x{factor} yourself (the trial ran it so)"
        return [("gradient_checkpointing", "True")], extra

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.checkpointing import activation_checkpointing

        return activation_checkpointing(ctx, fix, params, trainers)   # the LightningModule handed to fit

    def check(self, config, params, base):
        calls = ((config.get("activation_checkpointing") or {}).get("value") or {}).get("calls") or 0
        batch_ok, want, got = batch_check(config, base, self.batch_factor(params))
        return calls > 0 and batch_ok is not False, f"torch.utils.checkpoint in the steps, {want}", \
            f"{calls} checkpoint calls, {got}"
