"""``liger-kernels``: Liger's Triton kernels in a Hugging Face model, its fused linear
cross-entropy above all (no logits held over a large vocabulary: ADV125)."""

from __future__ import annotations

from advisor.fixes.base import Fix


class LigerKernels(Fix):
    name = "liger-kernels"
    runtime = "liger_kernels"
    editor = "advisor.patch.liger:liger_kernels"
    changes_numerics = True   # other kernels, float32 accumulation: the loss curve is compared
    where_key = "logits"

    def transformers_args(self, ctx, fix, params, calls):
        return [("use_liger_kernel", "True")], {"changes_numerics": True}

    def check(self, config, params, base):
        if not (base.get("config") or {}).get("logits"):
            return None, "no logits held in training", "the baseline's logits were not observed"
        got = (config.get("logits") or {}).get("value")
        return got is None, "no logits held in training (the fused loss)", \
            f"logits {got.get('shape')}" if got else "none held"
