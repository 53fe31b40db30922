"""float8-training's edit: ``model = _float8_training(model)`` where the model is moved to its
device (before a compile of it and before the optimizer is made from its parameters: the swap
keeps them), or before the framework call it is handed to, the function the trial ran written
at module level (runtime/float8_source.py)."""

from __future__ import annotations

from advisor.runtime.float8_source import FLOAT8

from .conversion import convert_model
from .core import PatchContext

WARNING = "needs torchao and a GPU with FP8 tensor cores (compute capability 8.9+)"


def float8_training(ctx: PatchContext, fix: dict, p: dict, trainers: list | None = None) -> dict:
    return convert_model(ctx, fix, "_float8_training", FLOAT8, trainers=trainers, changes_numerics=True,
                         warning=WARNING)
