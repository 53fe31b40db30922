"""Sequence batches mostly padding: every layer computes the pad positions too.

What it does:
    Counts the tokens of the timed steps' batches: a mapping batch's ``attention_mask`` (its
    ones are real tokens, its zeros padding), as a Hugging Face collator or dataset hands it
    to the model. Fires when padding is more than a quarter of the tokens.

Why is this bad:
    A transformer's cost grows with the tokens it is given, real or not: the embeddings, every
    projection and MLP, and the attention (quadratically) run on the pad positions as on the
    real ones, and the loss then throws them away. Texts padded to the model's longest length
    (``padding="max_length"``) in a corpus of mostly short texts make most of the step padding.
    samples/s hides it: the real tokens a second are the measure.

Example:
    enc = tokenizer(texts, padding="max_length", max_length=512, truncation=True)  # most texts ~100 tokens
    loader = DataLoader(Dataset.from_dict(enc).with_format("torch"), batch_size=32)

Fix:
    advisor trials cutting each batch to its longest text: the DataLoader's collate function
    wrapped so that the columns padding in every row are dropped (``dynamic-padding``). Where
    the batches are made, pad each to its own longest text, and group texts of similar length:
    enc = tokenizer(texts, truncation=True, max_length=512)             # no padding here
    collator = DataCollatorWithPadding(tokenizer)                       # per batch, to its longest
    TrainingArguments(..., group_by_length=True)                        # similar lengths together
    Or pack texts without padding (``DataCollatorWithFlattening``, position ids per text) where
    the attention implementation supports it (flash_attention_2, sdpa in recent transformers).

Fix safety:
    Dynamic padding changes no number the model computes for the real tokens of right-padded
    texts (the pad positions are masked out): losses match to rounding. Left-padded texts move
    to other positions in a model with absolute positions, so the trial checks the loss as a
    numerics change. group_by_length changes the order batches come in, and so
    the training trajectory a little. Packing changes which texts share a batch.
"""

from ._common import fix, ms, pct, step_ms

CODE = "ADV122"
NAME = "padding-waste"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "dynamic-padding"
HITS = ("padding_mixed_cpu",)
NON_HITS = {"padding_full_cpu": "the same model on texts that fill its 64 positions: no padding",
            "attention_eager_cpu": "token batches with no attention mask: nothing says what is padding"}
CODE_HINT = "collator = DataCollatorWithPadding(tokenizer)  # pad each batch to its longest; group_by_length=True"


def check(ctx):
    frac = (ctx.analysis.get("measured") or {}).get("padding_frac")
    if frac is None or frac <= ctx.thresholds.padding_frac:
        return None
    step = step_ms(ctx)
    return {
        "message": f"{pct(frac)} of the tokens the timed steps computed were padding: every layer ran on them "
                   "as on the real ones.",
        "evidence": [f"padding: {pct(frac)} of the batches' tokens (their attention masks' zeros)",
                     f"at most {ms(step * frac)} a step spent on it, if the step's time scales with its tokens"],
        "estimated_gain_ms": step * frac,
        "gain_is_upper_bound": True,
        "fix": fix("dynamic-padding", changes_numerics=True, code=CODE_HINT),
    }
