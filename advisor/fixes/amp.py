"""``amp``: autocast in bfloat16 (or float16), the forward and loss under torch.autocast."""

from __future__ import annotations

from advisor.fixes.base import Fix, value


class Amp(Fix):
    name = "amp"
    runtime = "amp"
    editor = "advisor.patch.model_fixes:amp"
    changes_numerics = True
    # bf16/fp16 convolutions run on Tensor Cores in NHWC: on an NCHW conv net AMP pays a
    # transpose around every conv, and alone can measure slower; with channels_last it is the
    # tuned recipe, so the two are one rung there
    partner = "channels-last"
    rides_with_compile = True   # it cuts GPU time only: it cannot show while the GPU waits for the host
    allowed_by = "precision"

    def overrides(self, config):
        """A model the script keeps in float64, or an autocast it runs in float32, is an explicit
        precision choice: bf16 autocast would run its products in 16 bits."""
        entry = config.get("parameters") or {}
        if (entry.get("value") or {}).get("dtype") == "float64":
            return "a float64 model" + (f" (its first forward at {entry['where']})" if entry.get("where") else "")
        ac = config.get("autocast") or {}
        on = ac.get("value") or {}
        if on.get("enabled", True) and str(on.get("dtype") or "").removeprefix("torch.") == "float32":
            # the script chose its autocast's dtype: float32 is its precision, not an omission
            return "autocast with dtype float32" + (f" (at {ac['where']})" if ac.get("where") else "")
        return None

    def candidates(self, params, environment):
        return [{"params": {"dtype": params.get("dtype", "bfloat16")}}]

    def transformers_args(self, ctx, fix, params, calls):
        from advisor.patch.frameworks import _same, find_arg

        on, off = ("fp16", "bf16") if params.get("dtype") == "float16" else ("bf16", "fp16")
        items = [(on, "True")]
        if any(find_arg(c.call, off) and not _same(find_arg(c.call, off)[1].value, "False") for c in calls):
            items.append((off, "False"))   # TrainingArguments refuses fp16 and bf16 both True
        return items, {"changes_numerics": True}

    def lightning_edit(self, ctx, fix, params, trainers):
        from advisor.patch.frameworks import _lightning_major, _on_calls

        half, old = params.get("dtype") == "float16", _lightning_major() < 2
        value = ("16" if old else '"16-mixed"') if half else ('"bf16"' if old else '"bf16-mixed"')
        return _on_calls(trainers, ctx, [("precision", value)], "Trainer", changes_numerics=True)

    def check(self, config, params, base):
        ac = value(config, "autocast")
        want = params.get("dtype") or "bfloat16"
        ok = bool(ac.get("enabled")) and ac.get("dtype") == want
        return ok, f"autocast {want}", f"autocast {ac.get('dtype')}" if ac.get("enabled") else "no autocast"
