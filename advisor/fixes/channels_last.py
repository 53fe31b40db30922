"""``channels-last``: the model's weights and its inputs in the channels_last memory format."""

from __future__ import annotations

from advisor.fixes.base import Fix, trained, value


class ChannelsLast(Fix):
    name = "channels-last"
    runtime = "channels_last"
    editor = "advisor.patch.model_fixes:channels_last"
    rides_with_compile = True
    where_key = "input"

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.core import PRIO_CHANNELS_LAST, applied, location
        from advisor.patch.frameworks import _fit

        f, stmt, _call, arg = _fit(ctx, trainers, "model.to(memory_format=torch.channels_last)")
        code = f"{arg.value.value} = {arg.value.value}.to(memory_format=torch.channels_last)"
        ctx.insert(f, stmt, code, after=False, prio=PRIO_CHANNELS_LAST)
        return applied(location(f, f.line_of(stmt)), [f"{code} before {location(f, f.line_of(stmt))}"])

    def check(self, config, params, base):
        fmt = trained(config).get("conv_memory_format") or value(config, "parameters").get("conv_memory_format")
        return (None if fmt is None else fmt == "channels_last"), "weights in channels_last", f"weights {fmt}"
