"""Gradient communication not overlapped with compute.

What it does:
    Measures NCCL kernel time per step and the part of it during which no compute kernel
    runs on any stream (exposed communication).

Why is this bad:
    DDP is meant to all-reduce gradient buckets while backward still computes later
    layers. Exposed communication adds straight to the step time: GPUs wait on the network.

Example:
    model = DDP(model, bucket_cap_mb=1000)     # one huge bucket: all-reduce after backward
    # or gradients all-reduced by hand after loss.backward()

Fix:
    Let DDP overlap: keep the default bucket size (25 MB) or tune ``bucket_cap_mb``; use
    ``gradient_as_bucket_view=True``; avoid manual all-reduce after backward; check that
    ``find_unused_parameters`` is only on when needed.

Fix safety:
    Safe: the same reduction, scheduled earlier.
"""

from ._common import fix, ms, pct, step_ms

CODE = "ADV115"
NAME = "exposed-communication"
SEVERITY = "warning"
NEEDS = ("gpu", "steps")
FIX = "overlap-communication"
HITS = ("ddp_exposed_rank0",)
NON_HITS = {"amp_bf16_channels_last": "single GPU: no communication"}


def check(ctx):
    comm = ctx.analysis.get("communication") or {}
    exposed = float(comm.get("exposed_ms_per_step") or 0.0)
    total = step_ms(ctx)
    if not total or exposed / total < ctx.thresholds.exposed_comm_frac:
        return None
    return {
        "message": f"{pct(exposed / total)} of each step is communication with no compute beside it.",
        "evidence": [f"NCCL kernel time {ms(float(comm.get('ms_per_step') or 0.0))} per step, exposed {ms(exposed)}"],
        "estimated_gain_ms": exposed,
        "fix": fix("overlap-communication", changes_numerics=False, suggest_only=True,
                   code="model = DDP(model, device_ids=[rank], gradient_as_bucket_view=True)  # default bucket_cap_mb=25"),
    }
