"""A language model materializes its logits over a large vocabulary every step.

What it does:
    Reads the logits the model's output layer made (the widest ``nn.Linear``, 32k outputs or
    more: its shape and dtype, observed at its first call) and estimates what a step holds for
    them: the logits and their gradient, their float32 copy and the float32 log-probabilities
    the cross-entropy keeps for its backward. Fires from 1 GiB.

Why is this bad:
    The output projection writes a tokens × vocabulary tensor, the cross-entropy reads it back
    through a softmax and writes its gradient: memory-bound passes over the largest activation
    of the step, and memory that caps the batch. A Llama-3 step of 16k tokens over its 128k
    vocabulary (bfloat16) holds about 23 GiB for them.

Example:
    logits = model.lm_head(hidden)                     # [batch, seq, 50257]
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))

Fix:
    Liger's kernels (``liger-kernels``): their fused linear cross-entropy computes the loss
    chunk by chunk from the hidden states, never holding the logits:
    TrainingArguments(use_liger_kernel=True), or
    liger_kernel.transformers._apply_liger_kernel_to_instance(model=model)

Fix safety:
    The loss is the same up to rounding (float32 accumulation, chunked); Liger's other
    kernels (RMSNorm, SwiGLU, RoPE) are swapped in too, so numerics count as changed and the
    loss curve is compared. Needs a CUDA GPU and the liger-kernel package, for the model types
    Liger patches (Llama, Mistral, Qwen2, Gemma, Phi-3, ...).
"""

from ._common import fix, mib

CODE = "ADV125"
NAME = "large-vocab-logits"
SEVERITY = "warning"
NEEDS = ("config",)
FIX = "liger-kernels"
HITS = ("logits_vocab_large_cpu",)
NON_HITS = {"logits_vocab_small_batch_cpu": "GPT-2's vocabulary, 128 tokens a step: 74 MiB held for the logits",
            "attention_eager_cpu": "a 256-token vocabulary: no output layer of 32k"}

MIN_BYTES = 1 << 30   # below this the logits are a small share of a GPU's memory and of the step
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def logits_bytes(value: dict) -> int:
    """The logits and their gradient, their float32 copy for the loss (none when already float32)
    and the float32 log-probabilities the cross-entropy keeps for its backward."""
    size = _BYTES.get(str(value.get("dtype")), 4)
    elems = int(value.get("tokens") or 0) * int(value.get("vocab") or 0)
    return elems * (2 * size + 4 + (0 if size == 4 else 4))


def check(ctx):
    value = ctx.value("logits") or {}
    held = logits_bytes(value)
    if held < MIN_BYTES:
        return None
    model_type = value.get("model_type")
    return {
        "message": f"The output layer makes {value.get('tokens')} × {value.get('vocab')} logits a step: "
                   f"about {mib(held)} held for them with the loss's float32 log-probabilities and the gradient.",
        "evidence": [f"logits {value.get('shape')} in {value.get('dtype')}" + (f" ({model_type})" if model_type else ""),
                     f"held for them a step: {mib(held)}"],
        "estimated_gain_ms": None,   # memory first; what the fused loss saves in time only a trial can tell
        "fix": fix("liger-kernels", changes_numerics=True, where=ctx.where("logits"),
                   code="TrainingArguments(use_liger_kernel=True)  # or liger_kernel's _apply_liger_kernel_to_instance(model=model)"),
    }
