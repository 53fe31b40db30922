"""liger-kernels' edit: Liger's instance patch on the model, right after the statement that moved
or bound it (before a compile of it), the function imported after the script's imports. A
Hugging Face Trainer's script gets ``TrainingArguments(use_liger_kernel=True)`` instead
(Fix.transformers_args)."""

from __future__ import annotations

from .core import PRIO_COMPILE, PRIO_IMPORT, PatchContext, applied, location
from .model_fixes import model_stmt

IMPORT = "from liger_kernel.transformers import _apply_liger_kernel_to_instance"


def liger_kernels(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, stmt, target = model_stmt(ctx, fix, "_apply_liger_kernel_to_instance(model=model)")
    ctx.insert_after_imports(f, [IMPORT], PRIO_IMPORT)
    code = f"_apply_liger_kernel_to_instance(model={target})"
    ctx.insert(f, stmt, code, after=True, prio=PRIO_COMPILE - 1)
    return applied(location(f, f.line_of(stmt)), [f"{IMPORT} after the imports",
                                                  f"{code} after {location(f, f.line_of(stmt))}"],
                   changes_numerics=True, warning="needs the liger-kernel package and a CUDA GPU")
