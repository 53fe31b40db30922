"""Peak GPU memory far below capacity: a larger batch fits.

What it does:
    Compares the peak allocated GPU memory of the profiled steps with the device's capacity.

Why is this bad:
    Unused memory is unused parallelism: a larger batch gives each kernel more work, which
    raises GPU utilization, especially for launch-bound small models.

Example:
    DataLoader(dataset, batch_size=32)     # peak 3 GB on an 80 GB GPU

Fix:
    Double the batch size while memory allows (and scale the learning rate linearly, with
    warmup, or retune it):
    DataLoader(dataset, batch_size=64)

Fix safety:
    Unsafe: changes training dynamics (fewer, larger steps); accuracy may need a retuned
    learning rate. Trials show it apart from the safe fixes.
"""

from ._common import fix, gib_of, pct, peak_and_capacity

CODE = "ADV111"
NAME = "memory-headroom"
SEVERITY = "info"
NEEDS = ("gpu", "memory")
FIX = "batch-size"
HITS = ("amp_bf16_channels_last",)
NON_HITS = {"near_capacity": "a ballast holds 92% of the device: no headroom"}


def check(ctx):
    peak, cap = peak_and_capacity(ctx)
    if not peak or not cap or peak / cap >= ctx.thresholds.memory_low_frac:
        return None
    factor = 2 ** max(1, min(3, int(cap * 0.7 / peak).bit_length() - 1))
    dl = ctx.value("dataloader") or {}
    bs = dl.get("batch_size") or ctx.analysis.get("batch_size")
    return {
        "message": f"Peak GPU memory is {pct(peak / cap)} of capacity: a {factor}x larger batch fits.",
        "evidence": [gib_of(peak, cap)]
                    + ([f"batch size {bs}"] if bs else []),
        "estimated_gain_ms": None,
        "fix": fix("batch-size", changes_numerics=True, where=ctx.where("dataloader"), factor=factor,
                   code=f"DataLoader(..., batch_size={bs * factor if bs else f'{factor} * batch_size'})"
                        f"  # scale lr by {factor}x (linear rule) with warmup"),
    }
