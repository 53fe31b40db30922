"""channels_last: NHWC memory format for the model's 4-D weights and 4-D inputs.

The model is converted in place at its first call (``Module.to(memory_format=...)``
keeps the Parameter objects, so the optimizer's references stay valid), and every 4-D
floating tensor argument of an outermost module call is converted on the way in.
"""

from __future__ import annotations

import torch

from advisor.runtime.patching import outermost_forward

NAME = "channels-last"


def describe(params) -> str:
    return "channels_last model and 4-D inputs"


def not_applicable(config, environment, params):
    inp = (config.get("input") or {}).get("value") or {}
    shape = inp.get("shape")
    if shape is not None and len(shape) != 4:
        return f"the model's input is {len(shape)}-D; channels_last applies to 4-D image batches"
    return None


def _convert(x):
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def apply(params) -> None:
    converted: set[int] = set()

    def pre(module, args):
        if id(module) not in converted:
            converted.add(id(module))
            if any(p.dim() == 4 for p in module.parameters()):
                module.to(memory_format=torch.channels_last)
        return tuple(_convert(a) for a in args)

    outermost_forward(pre=pre)
