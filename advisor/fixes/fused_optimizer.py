"""``fused-optimizer``: the optimizer's update as fused (or foreach) kernels."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


class FusedOptimizer(Fix):
    name = "fused-optimizer"
    runtime = "fused_optimizer"
    editor = "advisor.patch.flag_fixes:fused_optimizer"
    bundled = True
    where_key = "optimizer"

    def transformers_args(self, ctx, fix, params, calls):
        from advisor.patch.core import SkipFix
        from advisor.patch.frameworks import _user_site

        if _user_site(ctx, fix):
            return None    # the user's own optimizer, passed to the Trainer: the generic edit
        cls = ((ctx.config.get("optimizer") or {}).get("value") or {}).get("class")
        if cls and cls != "AdamW":
            raise SkipFix(f"the Trainer's optimizer is torch.optim.{cls}: TrainingArguments(optim=...) "
                          "has a fused choice for AdamW only")
        return [("optim", '"adamw_torch_fused"')], {}

    def check(self, config, params, base):
        opt = value(config, "optimizer")
        ok = bool(opt.get("fused")) or bool(opt.get("foreach"))
        return (ok if opt else None), "fused (or foreach) optimizer", f"fused={opt.get('fused')}, foreach={opt.get('foreach')}"
