"""activation-checkpointing's edit: ``model = _checkpoint_blocks(model)`` where the model is moved
to its device (the function the trial ran, written at module level: runtime/checkpoint_source.py),
and the DataLoader's batch multiplied as batch-size's edit does. A Hugging Face Trainer's script
gets ``TrainingArguments(gradient_checkpointing=True)`` instead (Fix.transformers_args)."""

from __future__ import annotations

from advisor.runtime.checkpoint_source import CHECKPOINT

from .core import PRIO_COMPILE, PatchContext, SkipFix, add_warning, applied, location
from .loader_fixes import batch_size
from .model_fixes import _model_stmt
from .placement import define_before


def activation_checkpointing(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, stmt, target = _model_stmt(ctx, fix, "model = _checkpoint_blocks(model)")
    define_before(ctx, f, stmt, CHECKPOINT)
    code = f"{target} = _checkpoint_blocks({target})"
    # before a compile of the model (PRIO_COMPILE, inserted after the same statement): the
    # compiled graphs hold the checkpointed blocks
    ctx.insert(f, stmt, code, after=True, prio=PRIO_COMPILE - 1)
    edits = [f"{code} after {location(f, f.line_of(stmt))} (function _checkpoint_blocks at module level)"]
    extra: dict = {"changes_numerics": True}
    factor = int(p.get("factor") or 1)
    if factor > 1:
        try:
            note = batch_size(ctx, fix, {"factor": factor})
            edits += note["edits"]
        except SkipFix as e:
            add_warning(extra, f"the batch is not raised: {e}; raise it x{factor} yourself")
    return applied(location(f, f.line_of(stmt)), edits, **extra)
