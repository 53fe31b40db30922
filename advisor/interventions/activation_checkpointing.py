"""Activation checkpointing, with the larger batch the memory it frees allows (batch-size's x
factor): the model's repeated blocks keep only their inputs in the forward and compute their
activations again in the backward (runtime/checkpoint_source.py, the function the patch
writes). Switched on at the model's first training call; measured apart, as the larger batch
changes training dynamics.
"""

from __future__ import annotations

from advisor.interventions import batch_size
from advisor.runtime.checkpoint_source import CHECKPOINT
from advisor.runtime.patching import at_first_training_call, source_functions

NAME = "activation-checkpointing"


def describe(params) -> str:
    factor = int(params.get("factor") or 1)
    return "activation checkpointing of the model's blocks" + (f", batch size x{factor}" if factor > 1 else "")


def not_applicable(config, environment, params):
    if int(params.get("factor") or 1) > 1:
        return batch_size.not_applicable(config, environment, params)
    return None


def apply(params) -> None:
    factor = int(params.get("factor") or 1)
    if factor > 1:
        batch_size.apply({"factor": factor})
    at_first_training_call(source_functions(CHECKPOINT, NAME)["_checkpoint_blocks"])
