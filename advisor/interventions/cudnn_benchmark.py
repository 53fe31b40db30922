"""cudnn.benchmark = True, kept on even if the script switches it off."""

from __future__ import annotations

import torch

NAME = "cudnn-benchmark"


def describe(params) -> str:
    return "torch.backends.cudnn.benchmark = True"


def not_applicable(config, environment, params):
    return already(config, True)


def already(config, on: bool) -> str | None:
    """Why holding benchmark ``on`` changes nothing: the script runs it so already."""
    if (config.get("cudnn.benchmark") or {}).get("value") is on:
        return f"cudnn.benchmark is already {'on' if on else 'off'}"
    return None


def apply(params) -> None:
    hold(True)


def hold(on: bool) -> None:
    """cudnn.benchmark set to ``on`` and kept there whatever the script assigns to it."""
    mod = torch.backends.cudnn
    mod.benchmark = on
    cls = type(mod)
    base_setattr = cls.__setattr__

    def __setattr__(self, name, value):
        if name == "benchmark":
            value = on
        return base_setattr(self, name, value)

    cls.__setattr__ = __setattr__
