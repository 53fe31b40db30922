"""Fused optimizer step (``fused=True``), else multi-tensor ``foreach=True``."""

from __future__ import annotations

import inspect

import torch

from advisor.runtime.patching import wrap

NAME = "fused-optimizer"


def describe(params) -> str:
    return "fused optimizer step (fused=True, else foreach=True)"


def _supports(cls, arg: str) -> bool:
    try:
        return arg in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def not_applicable(config, environment, params):
    opt = (config.get("optimizer") or {}).get("value")
    if opt is None:
        return "no torch optimizer was observed"
    if opt.get("fused"):
        return f"{opt.get('class')} is already fused"
    cls = getattr(torch.optim, opt.get("class") or "", None)
    if cls is None:
        return f"{opt.get('class')} is not a torch.optim optimizer"
    if not (_supports(cls, "fused") or _supports(cls, "foreach")):
        return f"{opt.get('class')} has neither fused nor foreach"
    return None


def apply(params) -> None:
    on_cuda = torch.cuda.is_available()
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls is torch.optim.Optimizer:
            continue
        fused = on_cuda and _supports(cls, "fused")
        foreach = _supports(cls, "foreach")
        if not (fused or foreach):
            continue

        def make(orig, fused=fused, foreach=foreach):
            def __init__(self, *args, **kwargs):
                if fused:
                    kwargs["fused"], kwargs["foreach"] = True, None
                elif foreach:
                    kwargs["foreach"] = True
                return orig(self, *args, **kwargs)
            return __init__

        if "__init__" in cls.__dict__:
            wrap(cls, "__init__", make)
