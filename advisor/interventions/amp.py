"""Autocast: run the forward pass and the loss in bf16 (fp16 where bf16 is unsupported).

Autocast is entered at the first outermost module call of a step and left just before
backward, so the loss computed outside the model is covered too, and backward runs
outside autocast as PyTorch's AMP recipe prescribes.
"""

from __future__ import annotations

import torch

from advisor.runtime.amp_source import BCE_FLOAT32
from advisor.runtime.patching import accelerator, before_backward, outermost_forward, source_functions

NAME = "amp"


def _dtype(params) -> torch.dtype:
    name = params.get("dtype") or "bfloat16"
    return getattr(torch, name)


def describe(params) -> str:
    if params.get("form") == "script":
        scaler = " with its GradScaler" if params.get("scaler") else ""
        return f"the script's own AMP ({params.get('switch')}): autocast {params.get('dtype') or 'float16'}{scaler}"
    return f"autocast {params.get('dtype') or 'bfloat16'} around forward and loss"


def not_applicable(config: dict, environment: dict, params: dict) -> str | None:
    ac = (config.get("autocast") or {}).get("value") or {}
    if params.get("form") == "script":   # the script's own switch, its own GradScaler (advisor.patch.switches)
        return None
    # autocast to float32 (nanoGPT's dtype='float32') is on but changes no precision
    if ac.get("enabled", True) and ac.get("dtype") and ac.get("dtype") != "float32":
        return f"the script already uses autocast ({ac.get('dtype')})"
    if (params.get("dtype") or "bfloat16") == "float16":
        return "fp16 autocast needs a GradScaler in the script's loop; bf16 is unsupported here, so AMP is suggest-only"
    if environment.get("bf16_supported") is False:
        return "this GPU has no bf16; fp16 autocast needs a GradScaler edit: suggest-only"
    return None


def apply(params) -> None:
    if params.get("form") == "script":
        return      # the trial turned the script's own AMP switch on, on its command line
    device = accelerator()
    dtype = _dtype(params)
    active: list = []

    def enter(module, args):
        if not active:
            ctx = torch.autocast(device_type=device, dtype=dtype)
            ctx.__enter__()
            active.append(ctx)
        return None

    def leave():
        while active:
            active.pop().__exit__(None, None, None)

    outermost_forward(pre=enter)
    before_backward(leave)
    # binary cross-entropy in float32 outside autocast (runtime/amp_source.py); BCELoss calls it
    # through the module
    bce = source_functions("import torch\n\n\n" + BCE_FLOAT32, "amp fix")["_bce_float32"]
    torch.nn.functional.binary_cross_entropy = bce
