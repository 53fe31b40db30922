"""``dynamic-padding``: each batch of a sequence model cut to its longest text.

Texts padded to the model's length (``tokenizer(..., padding="max_length")``) make every batch
as wide as the longest text the model takes, whatever the batch holds. The fix wraps each
DataLoader's collate function (``_trim_padding``, advisor/runtime/padding_source.py): after
collating, the columns that are padding in every row of the attention mask are dropped from
every tensor as wide as the mask. The real tokens are unchanged; a model with absolute
positions and left padding sees its texts at other positions, so the loss is checked as a
numerics change.

The whole fix lives here: the trial's run-time part, the edit, and the check.
"""

from __future__ import annotations

from advisor.fixes.base import Fix, loader, value


class DynamicPadding(Fix):
    name = "dynamic-padding"
    changes_numerics = True
    editor = "advisor.patch.padding_fix:dynamic_padding"

    def describe(self, params):
        return "each batch cut to its longest text (the all-padding columns of its attention mask dropped)"

    def not_applicable(self, config, environment, params):
        if not loader(config):
            return "the script uses no torch DataLoader whose batches could be cut"
        return None

    def apply(self, params):
        """Every DataLoader made from here on collates through _trim_padding."""
        import torch

        from advisor.interventions.preload import _loader_args
        from advisor.runtime.padding_source import TRIM
        from advisor.runtime.patching import source_functions, wrap

        trim = source_functions(TRIM, "dynamic-padding fix")["_trim_padding"]

        def make(orig):
            def __init__(self, *args, **kwargs):
                named = _loader_args(args, kwargs)
                named["collate_fn"] = trim(named.get("collate_fn") or torch.utils.data.default_collate)
                orig(self, **named)
            return __init__

        wrap(torch.utils.data.DataLoader, "__init__", make)

    def check(self, config, params, base):
        """The patched run's batches were cut: their widths vary, or they hold less padding than
        the baseline's."""
        now = value(config, "tokens")
        before = value((base or {}).get("config") or {}, "tokens").get("padding_frac")
        if not now:
            return None, "batches cut to their longest text", "no token counts"
        widths = now.get("widths") or []
        cut = len(widths) > 1 or (before is not None and now.get("padding_frac", 1.0) < before - 0.01)
        return cut, "batches cut to their longest text", \
            f"widths {', '.join(map(str, widths[:6]))}; padding {now.get('padding_frac', 0.0):.0%} of the tokens"
