"""One GPU for an nn.DataParallel script: the reference that the ddp trial's scaling is measured
against (advisor.trials.scaling). A reference, never a fix: no rule names it and the ladder never
stacks it.

Every ``nn.DataParallel`` is given the current device only; DataParallel then calls its module
directly, so the script trains exactly as it would on a machine with one GPU.
"""

from __future__ import annotations

import torch

from advisor.runtime.patching import wrap

NAME = "one-gpu"


def describe(params) -> str:
    return "the script on one GPU (nn.DataParallel given one device): the reference for scaling"


def not_applicable(config, environment, params):
    dp = ((config.get("data_parallel") or {}).get("value") or {}).get("class")
    if dp != "DataParallel":
        return "the script does not use nn.DataParallel: its baseline is its one-GPU run"
    if not environment.get("gpu_count"):
        return "no GPU"
    return None


def apply(params) -> None:
    def make(orig):
        def __init__(self, module, device_ids=None, output_device=None, dim=0):
            if torch.cuda.is_available():
                device_ids, output_device = [torch.cuda.current_device()], torch.cuda.current_device()
            orig(self, module, device_ids, output_device, dim)
        return __init__

    wrap(torch.nn.DataParallel, "__init__", make)
