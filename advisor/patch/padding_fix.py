"""The dynamic-padding fix's edit: the DataLoader's collate function wrapped in _trim_padding
(the trial's own text, advisor/runtime/padding_source.py), defined at module level before the
statement that makes the loader. A Hugging Face Trainer makes its loaders itself: there the
edit is left to the user (DataCollatorWithPadding on texts not padded in advance)."""

from __future__ import annotations

from advisor.runtime.padding_source import TRIM

from .call_args import code_of, find_arg, set_arg
from .core import PatchContext, SkipFix, applied, location
from .loader_fixes import _DL_POS, _dataloader_call
from .placement import define_before


def dynamic_padding(ctx: PatchContext, fix: dict, p: dict) -> dict:
    try:
        f, call = _dataloader_call(ctx, fix)
    except SkipFix as e:
        raise SkipFix(f"{e}: pad each batch to its longest text where the batches are made "
                      "(DataCollatorWithPadding on texts not padded in advance)") from None
    here = location(f, f.line_of(call))
    found = find_arg(call, "collate_fn", _DL_POS["collate_fn"])
    inner = code_of(found[1].value) if found is not None else "torch.utils.data.default_collate"
    if found is not None and inner.startswith("_trim_padding("):
        raise SkipFix(f"the DataLoader at {here} cuts its batches already")
    define_before(ctx, f, call, TRIM)
    if found is None:
        ctx.need_torch(f)
    value = f"_trim_padding({inner})"
    ctx.on_node(f, call, lambda c: set_arg(c, "collate_fn", value, _DL_POS["collate_fn"]))
    return applied(here, [f"collate_fn={value}: each batch cut to its longest text (function at module level)"])
