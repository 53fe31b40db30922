"""zero_grad(set_to_none=True) for every optimizer and module."""

from __future__ import annotations

import torch

from advisor.runtime.patching import wrap

NAME = "set-to-none"


def describe(params) -> str:
    return "zero_grad(set_to_none=True)"


def not_applicable(config, environment, params):
    zg = (config.get("zero_grad") or {}).get("value")
    if zg is not None and zg.get("set_to_none") is True:
        return "zero_grad already sets gradients to None"
    return None


def apply(params) -> None:
    def make(orig):
        def zero_grad(self, set_to_none: bool = True, *a, **k):
            return orig(self, True, *a, **k)
        return zero_grad

    wrap(torch.optim.Optimizer, "zero_grad", make)
    wrap(torch.nn.Module, "zero_grad", make)
