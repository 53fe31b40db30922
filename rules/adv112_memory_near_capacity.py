"""Peak GPU memory near capacity: out-of-memory risk and allocator thrash.

What it does:
    Compares the peak allocated (and reserved) GPU memory with the device's capacity.

Why is this bad:
    Near the limit the caching allocator fragments, frees and retries (``cudaFree`` +
    ``cudaMalloc`` in the step), which is slow, and a slightly larger input ends in OOM.

Example:
    batch_size = 512    # peak 76 GB of 80 GB

Fix:
    Reduce fragmentation with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; cut
    activation memory with autocast (bf16 activations) or activation checkpointing
    (``torch.utils.checkpoint``); or lower the batch and accumulate gradients.

Fix safety:
    expandable_segments is safe. Checkpointing trades compute for memory (same math);
    AMP changes numerics.
"""

from ._common import fix, gib_of, pct, peak_and_capacity

CODE = "ADV112"
NAME = "memory-near-capacity"
SEVERITY = "warning"
NEEDS = ("gpu", "memory")
FIX = "expandable-segments"
HITS = ("near_capacity",)
NON_HITS = {"amp_bf16_channels_last": "a few GB of an H200"}


def check(ctx):
    peak, cap = peak_and_capacity(ctx)
    if not peak or not cap or peak / cap < ctx.thresholds.memory_high_frac:
        return None
    return {
        "message": f"Peak GPU memory is {pct(peak / cap)} of capacity.",
        "evidence": [gib_of(peak, cap)],
        "estimated_gain_ms": None,
        "fix": fix("expandable-segments", changes_numerics=False,
                   code="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py ..."),
    }
