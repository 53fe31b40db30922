"""Attention run "eager": matmul, softmax, matmul per layer, where one fused kernel would do.

What it does:
    For a Hugging Face model, reads the attention implementation the trained model's config
    selects (the runner reads ``config._attn_implementation`` of the model the loop calls, as the
    steps ran it) and the implementations its class supports; fires when it is ``eager`` and
    the class supports ``sdpa``. For attention written by hand, reads the profiled steps'
    operators: a softmax between two matrix products (``(q @ k.T).softmax(-1) @ v``), at least
    twice a step (a classifier's one softmax is not attention), with no
    ``scaled_dot_product_attention`` in the step.

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
    att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))      # nanoGPT's slow path
    y = F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1) @ v

Fix:
    Ask for SDPA where the model is made (transformers' default for the classes that support it):
    model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="sdpa")
    In your own attention, one call replaces the scores, the mask, the softmax and the product:
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p if self.training else 0.0)
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
HITS = ("attention_eager_cpu", "attention_manual_code_cpu")
NON_HITS = {"attention_sdpa_cpu": "the same model built with attn_implementation='sdpa'",
            "attention_sdpa_code_cpu": "the hand-written block through F.scaled_dot_product_attention",
            "gc_light_cpu": "no attention at all"}
CODE_HINT = 'model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="sdpa")'
CODE_HINT_OWN = "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"
MANUAL_PER_STEP = 2   # softmaxes between matrix products a step: two layers' attention at least


def check(ctx):
    attention = ctx.value("attention") or {}
    if attention.get("implementation") == "eager" and attention.get("sdpa"):
        return _hugging_face(ctx, attention)
    seen = ctx.analysis.get("attention") or {}
    if attention or seen.get("sdpa_per_step") or (seen.get("manual_per_step") or 0) < MANUAL_PER_STEP:
        return None
    n = seen["manual_per_step"]
    return {
        "message": f"The step computes attention by hand: {n:g} softmaxes a step between two matrix products "
                   "(scores, mask, softmax, product), where scaled_dot_product_attention is one fused kernel.",
        "evidence": [f"{n:g} softmax operators a step between matmul/bmm operators",
                     "no scaled_dot_product_attention operator in the step"],
        "estimated_gain_ms": None,
        # the attention is the user's code: shown, not trialled (advisor does not rewrite it)
        "fix": fix("sdpa-attention", changes_numerics=True, code=CODE_HINT_OWN, suggest_only=True),
    }


def _hugging_face(ctx, attention: dict) -> dict:
    cls = attention.get("class") or "the model"
    return {
        "message": f"{cls} runs its attention eager (matmul, softmax, matmul per layer); its class supports "
                   "scaled_dot_product_attention, one fused kernel.",
        "evidence": [f"config._attn_implementation = 'eager' on {cls}",
                     "supported: sdpa" + (", flash_attention_2 (flash-attn installed)" if attention.get("flash") else "")],
        "estimated_gain_ms": None,
        "fix": fix("sdpa-attention", changes_numerics=True, code=CODE_HINT, where=ctx.where("attention")),
    }
