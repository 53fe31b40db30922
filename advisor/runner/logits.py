"""A language model's logits as its output layer makes them: the widest ``nn.Linear`` of the
model, with at least MIN_VOCAB outputs, is its head, and the shape and dtype of its first
training output are recorded (config ``logits``, read by ADV125). Liger's fused linear
cross-entropy never calls the head in training, so under it nothing is recorded (the
liger-kernels fix's check). A model torch.compile runs is not watched: a hook inside its graph
would be traced into it (a graph break, a recompile when it goes)."""

from __future__ import annotations

import torch

from advisor.runtime import MIN_VOCAB
from advisor.runtime.capture import capturing


def head_of(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's output layer over a vocabulary: its widest Linear of MIN_VOCAB outputs or more."""
    heads = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features >= MIN_VOCAB]
    return max(heads, key=lambda m: m.out_features, default=None)


def watch(model: torch.nn.Module, record) -> None:
    """record({"shape", "dtype", "vocab", "tokens", "model_type"}) at the head's first output."""
    if compiled(model):
        return
    head = head_of(model)
    if head is None:
        return
    inner = getattr(model, "module", model)   # inside DataParallel / DistributedDataParallel
    model_type = getattr(getattr(inner, "config", None), "model_type", None)

    def hook(module, args, out):
        if capturing() or not (module.training and torch.is_grad_enabled()):
            return   # an evaluation's logits (Liger's fused loss computes them there too): the next call
        handle.remove()
        if isinstance(out, torch.Tensor) and out.dim() >= 2:
            vocab = int(out.shape[-1])
            record({"shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch."), "vocab": vocab,
                    "tokens": int(out.numel() // max(1, vocab)), "model_type": model_type})

    handle = head.register_forward_hook(hook)


def compiled(model: torch.nn.Module) -> bool:
    """torch.compile runs the model: its wrapper (torch.compile(model)) or compiled in place
    (model.compile())."""
    return type(model).__name__ == "OptimizedModule" or getattr(model, "_compiled_call_impl", None) is not None
