"""``set-to-none``: gradients set to None instead of filled with zeros by zero_grad."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


class SetToNone(Fix):
    name = "set-to-none"
    same_graphs = True   # the gradients' reset, outside the model's graphs
    runtime = "set_to_none"
    editor = "advisor.patch.flag_fixes:set_to_none"
    bundled = True
    where_key = "zero_grad"

    def transformers_args(self, ctx, fix, params, calls):
        from advisor.patch.core import SkipFix

        raise SkipFix("the Trainer already zeroes gradients with set_to_none")

    def check(self, config, params, base):
        got = value(config, "zero_grad").get("set_to_none")
        return (None if got is None else bool(got)), "zero_grad(set_to_none=True)", f"set_to_none={got}"
