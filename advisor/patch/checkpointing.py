"""activation-checkpointing's edit: ``model = _checkpoint_blocks(model)`` where the model is moved
to its device, or before Lightning's ``trainer.fit(model)`` (the function the trial ran, written
at module level: runtime/checkpoint_source.py), and the DataLoader's batch multiplied as
batch-size's edit does. A Hugging Face Trainer's script gets
``TrainingArguments(gradient_checkpointing=True)`` instead (Fix.transformers_args)."""

from __future__ import annotations

from advisor.runtime.checkpoint_source import CHECKPOINT

from .conversion import convert_model
from .core import PatchContext, SkipFix, add_warning
from .loader_fixes import batch_size


def activation_checkpointing(ctx: PatchContext, fix: dict, p: dict, trainers: list | None = None) -> dict:
    note = convert_model(ctx, fix, "_checkpoint_blocks", CHECKPOINT, trainers=trainers, changes_numerics=True)
    factor = int(p.get("factor") or 1)
    if factor > 1:
        try:
            note["edits"] += batch_size(ctx, fix, {"factor": factor})["edits"]
        except SkipFix as e:
            add_warning(note, f"the batch is not raised: {e}; raise it x{factor} yourself")
    return note
