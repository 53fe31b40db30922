"""Liger's kernels in a Hugging Face model (liger_kernel's own instance patch, as the Trainer's
``use_liger_kernel=True`` applies it): its fused linear cross-entropy computes the loss chunk by
chunk from the hidden states instead of holding the logits, and RMSNorm, SwiGLU and RoPE run as
its Triton kernels. Applied at the model's first training call (that call still runs the model's
own forward)."""

from __future__ import annotations

import importlib.util

from advisor.runtime.patching import outermost_forward

NAME = "liger-kernels"


def describe(params) -> str:
    return "Liger's kernels: fused linear cross-entropy (no logits held), RMSNorm, SwiGLU, RoPE"


def not_applicable(config, environment, params):
    if not environment.get("gpu_count"):
        return "Liger's kernels are Triton kernels for a CUDA GPU"
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed (pip install liger-kernel)"
    logits = (config.get("logits") or {}).get("value") or {}
    if not logits.get("model_type"):
        return "the model is not a Hugging Face model: Liger patches those, by their model type"
    return None


def apply(params) -> None:
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    done: set[int] = set()

    def pre(module, args):
        # inside torch.compile's wrapper, DataParallel or DistributedDataParallel: the model itself
        model = getattr(module, "_orig_mod", None) or getattr(module, "module", module)
        if id(model) not in done and module.training and getattr(getattr(model, "config", None), "model_type", None):
            done.add(id(model))
            _apply_liger_kernel_to_instance(model=model)
        return None

    outermost_forward(pre=pre)
