"""Host-device synchronizations inside the training step.

What it does:
    Counts calls that make the CPU wait for the GPU within each step:
    ``cudaDeviceSynchronize``/``cudaStreamSynchronize``, blocking device→host copies, and the
    ATen ops behind ``.item()``, ``.cpu()``, ``.tolist()``, printing a CUDA tensor.

Why is this bad:
    A sync drains the GPU's queue: the CPU stops launching until all queued work finishes,
    and the GPU then idles while the CPU launches the next kernels. One per step for logging
    is cheap; several per step (or inside loops) serialize CPU and GPU.

Example:
    running_loss += loss.item()         # every step
    if torch.isnan(loss).any(): ...     # implicit sync on a Python bool

Fix:
    Accumulate on the device and read back rarely:
    running_loss += loss.detach()       # tensor on the GPU
    if step % 100 == 0: print(running_loss.item() / 100)

Fix safety:
    Suggest-only: removing a sync changes when values are read, which only the author can
    judge; numerics are unchanged.
"""

from ._common import fix, ms, phase_ms

CODE = "ADV110"
NAME = "host-syncs-in-step"
SEVERITY = "warning"
NEEDS = ("gpu", "steps")
FIX = "defer-syncs"
HITS = ("sync_item",)
NON_HITS = {"amp_bf16_channels_last": "no .item() or synchronize inside the step",
            "fp32_nchw": "its 2 syncs per step are pageable H2D copies (ADV104's finding)"}


# Syncs inside a host-to-device copy op are the pageable-copy staging that ADV104 reports
# (a pageable cudaMemcpyAsync is followed by cudaStreamSynchronize); counting them here too
# would report one cost twice and propose a fix (deferring syncs) that cannot remove them.
COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::contiguous")


def check(ctx):
    syncs = [s for s in ctx.analysis.get("syncs") or []
             if s.get("per_step") and not str(s.get("name", "")).startswith(COPY_OPS)]
    per_step = sum(float(s["per_step"]) for s in syncs)
    if per_step <= ctx.thresholds.syncs_per_step:
        return None
    return {
        "message": f"{per_step:.1f} host-device synchronizations per step stall the launch queue.",
        "evidence": [f"{s['name']}: {s['per_step']:.1f} per step" for s in syncs][:6]
                    + [f"GPU idle per step: {ms(phase_ms(ctx, 'gpu_idle'))}"],
        "estimated_gain_ms": phase_ms(ctx, "gpu_idle") or None,
        "fix": fix("defer-syncs", changes_numerics=False, suggest_only=True,
                   code="running_loss += loss.detach()   # instead of loss.item() every step"),
    }
