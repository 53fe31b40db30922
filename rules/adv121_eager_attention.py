"""A Hugging Face model running its attention "eager": matmul, softmax, matmul, per layer.

What it does:
    Reads the attention implementation the trained model's config selects (the runner reads
    ``config._attn_implementation`` of the model the loop calls, as the steps ran it) and the
    implementations its class supports. Fires when it is ``eager`` and the class supports
    ``sdpa``.

Why is this bad:
    Eager attention writes the whole (batch, heads, sequence, sequence) score matrix to memory,
    reads it back for the softmax and the dropout, and again for the product with the values,
    in separate kernels each layer; the backward does the same in reverse. PyTorch's
    ``scaled_dot_product_attention`` runs the same computation as one fused kernel (FlashAttention
    or memory-efficient attention on a GPU), which never stores the score matrix: less memory
    traffic, fewer launches, and a memory footprint linear in the sequence length instead of
    quadratic, which leaves room for a larger batch.

Example:
    model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="eager")
    model = GPT2LMHeadModel(GPT2Config(..., attn_implementation="eager"))

Fix:
    Ask for SDPA where the model is made (transformers' default for the classes that support it):
    model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="sdpa")
    ``flash_attention_2`` is faster still on Ampere and later GPUs where the flash-attn package
    is installed.

Fix safety:
    The same attention, computed in another order: losses match eager's to rounding (bf16 or
    fp16 rounding under autocast), not bit for bit, so the trial's loss is checked as a
    numerics change. A model that needs the attention weights themselves
    (``output_attentions=True``) falls back to eager in transformers.
"""

from ._common import fix

CODE = "ADV121"
NAME = "eager-attention"
SEVERITY = "warning"
NEEDS = ("config",)
FIX = "sdpa-attention"
HITS = ("attention_eager_cpu",)
NON_HITS = {"attention_sdpa_cpu": "the same model built with attn_implementation='sdpa'",
            "gc_light_cpu": "no Hugging Face model: nothing names an attention implementation"}
CODE_HINT = 'model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="sdpa")'


def check(ctx):
    attention = ctx.value("attention") or {}
    if attention.get("implementation") != "eager" or not attention.get("sdpa"):
        return None
    cls = attention.get("class") or "the model"
    return {
        "message": f"{cls} runs its attention eager (matmul, softmax, matmul per layer); its class supports "
                   "scaled_dot_product_attention, one fused kernel.",
        "evidence": [f"config._attn_implementation = 'eager' on {cls}",
                     "supported: sdpa" + (", flash_attention_2 (flash-attn installed)" if attention.get("flash") else "")],
        "estimated_gain_ms": None,
        "fix": fix("sdpa-attention", changes_numerics=True, code=CODE_HINT, where=ctx.where("attention")),
    }
