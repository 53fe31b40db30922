"""Liger's kernels in a Hugging Face model (liger_kernel's own instance patch, as the Trainer's
``use_liger_kernel=True`` applies it): its fused linear cross-entropy computes the loss chunk by
chunk from the hidden states instead of holding the logits, and RMSNorm, SwiGLU and RoPE run as
its Triton kernels. Applied at the model's first training call (that call still runs the model's
own forward)."""

from __future__ import annotations

import importlib.util

from advisor.runtime.patching import at_first_training_call

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

    def patch(model):
        _apply_liger_kernel_to_instance(model=_hf_model(model))

    at_first_training_call(patch, wants=lambda model: _model_type(_hf_model(model)) is not None)


def _hf_model(model):
    return getattr(model, "module", model)   # inside DataParallel / DistributedDataParallel


def _model_type(model):
    return getattr(getattr(model, "config", None), "model_type", None)
