"""float8-training's edit: ``model = _float8_training(model)`` where the model is moved to its
device, before a compile of it and before the optimizer is made from its parameters (the swap
keeps them), the function the trial ran written at module level (runtime/float8_source.py)."""

from __future__ import annotations

from advisor.runtime.float8_source import FLOAT8

from .core import PRIO_COMPILE, PatchContext, applied, location
from .model_fixes import _model_stmt
from .placement import define_before


def float8_training(ctx: PatchContext, fix: dict, p: dict) -> dict:
    f, stmt, target = _model_stmt(ctx, fix, "model = _float8_training(model)")
    define_before(ctx, f, stmt, FLOAT8)
    code = f"{target} = _float8_training({target})"
    # before a compile of the model (PRIO_COMPILE, inserted after the same statement): the
    # compiled graphs hold the float8 layers, and their casts fuse there
    ctx.insert(f, stmt, code, after=True, prio=PRIO_COMPILE - 1)
    return applied(location(f, f.line_of(stmt)),
                   [f"{code} after {location(f, f.line_of(stmt))} (function _float8_training at module level)"],
                   changes_numerics=True, warning="needs torchao and a GPU with FP8 tensor cores (compute capability 8.9+)")
