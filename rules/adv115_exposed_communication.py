"""Gradient communication not overlapped with compute.

What it does:
    Measures collective time per step and the part of it during which no compute runs
    (exposed communication): NCCL kernels against compute kernels on any stream on a GPU;
    with CPU collectives (gloo, e.g. CPU DDP) the ``gloo:*`` op ranges against the CPU ops
    of the rank's other threads. Given several ranks' traces, it judges the exposure every
    rank has (the least exposed rank's): what one rank has beyond it is waiting for a slower
    peer, which ADV116 (straggler-ranks) reports.

Why is this bad:
    DDP is meant to all-reduce gradient buckets while backward still computes later
    layers. Exposed communication adds straight to the step time: the rank waits on the
    network (and on its peers).

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

from ._common import fix, ms, pct, ranks_of, step_ms

CODE = "ADV115"
NAME = "exposed-communication"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "overlap-communication"
HITS = ("ddp_cpu_exposed_rank0", "ddp_nccl_exposed_rank0", "ddp_nccl_exposed_case")
NON_HITS = {"amp_bf16_channels_last": "single GPU: no communication",
            "ddp_nccl_straggler_case": "rank 0's exposed NCCL time is its wait for rank 1 (ADV116)"}
_WHAT = {"nccl": "NCCL kernel time", "cpu": "CPU collective (gloo) time"}


def _exposed(analysis: dict) -> float:
    return float((analysis.get("communication") or {}).get("exposed_ms_per_step") or 0.0)


def check(ctx):
    comm = ctx.analysis.get("communication") or {}
    ranks = ranks_of(ctx) if ctx.extra_models else []
    # every rank's share of it; a rank's excess over the least exposed one waits for a straggler
    exposed = min((_exposed(a) for _, a in ranks), default=_exposed(ctx.analysis))
    total = step_ms(ctx)
    if not total or exposed / total < ctx.thresholds.exposed_comm_frac:
        return None
    evidence = [f"{_WHAT.get(comm.get('source'), 'Communication time')} "
                f"{ms(float(comm.get('ms_per_step') or 0.0))} per step, exposed {ms(_exposed(ctx.analysis))}"]
    if ranks:
        evidence.append("exposed per step on every rank: " + ", ".join(
            f"rank {r} {ms(_exposed(a))}" for r, a in ranks) + f"; judged on the least, {ms(exposed)}")
    return {
        "message": f"{pct(exposed / total)} of each step is communication with no compute beside it"
                   + (" on every rank." if ranks else "."),
        "evidence": evidence,
        "estimated_gain_ms": exposed,
        "fix": fix("overlap-communication", changes_numerics=False, suggest_only=True,
                   code=f"model = DDP(model, {'' if comm.get('source') == 'cpu' else 'device_ids=[rank], '}"
                        "gradient_as_bucket_view=True)  # default bucket_cap_mb=25"),
    }
