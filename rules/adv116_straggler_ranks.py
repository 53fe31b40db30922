"""A straggler rank slows every rank.

What it does:
    Given traces of several ranks (``advisor inspect rank0.json rank1.json ...``), compares
    the time each rank spends inside collectives per step (NCCL kernels on a GPU, the
    ``gloo:*`` op ranges for CPU collectives). Collectives end together, so step times match
    across ranks; the straggler is the rank that waits least in them while the others wait for
    it (Holistic Trace Analysis uses the same signal).

Why is this bad:
    Collective operations wait for the slowest rank: one rank with a slower loader, a
    throttled GPU or extra work (logging, checkpointing on rank 0) sets everybody's pace.

Example:
    if rank == 0:
        evaluate(model)          # every step, while the others wait in all-reduce

Fix:
    Find what the slow rank does differently (its breakdown shows the phase); move rank-0
    only work out of the step, balance data shards, check the GPU's clocks and neighbours.

Fix safety:
    Suggest-only: the remedy depends on the cause.
"""

import statistics

from ._common import pct, ranks_of

CODE = "ADV116"
NAME = "straggler-ranks"
SEVERITY = "warning"
NEEDS = ("ranks",)
FIX = None
HITS = ("ddp_cpu_straggler_case", "ddp_nccl_straggler_case")
NON_HITS = {"ddp_cpu_exposed_case": "balanced ranks: about equal time in communication",
            "ddp_nccl_exposed_case": "balanced ranks over NCCL on 2 H200s",
            "amp_bf16_channels_last": "one rank only: skipped, not guessed"}


def _comm_ms(analysis: dict) -> float:
    return float((analysis.get("communication") or {}).get("ms_per_step") or 0.0)


def check(ctx):
    rank, analyses = zip(*ranks_of(ctx))
    comm = [_comm_ms(a) for a in analyses]
    step = statistics.median(float(a.get("step_time_ms") or 0.0) for a in analyses)
    if not step or max(comm) == 0.0:
        return None
    fast = min(range(len(comm)), key=lambda i: comm[i])
    waiting = statistics.median(c for i, c in enumerate(comm) if i != fast) - comm[fast]
    if waiting / step < ctx.thresholds.straggler_frac:
        return None
    return {
        "message": f"Rank {rank[fast]} is the straggler: the other ranks wait {waiting:.1f} ms per step for it "
                   f"in communication ({pct(waiting / step)} of the step).",
        "evidence": [f"rank {r}: {c:.2f} ms per step in communication, step {float(a.get('step_time_ms') or 0):.2f} ms"
                     for r, c, a in zip(rank, comm, analyses)],
        "estimated_gain_ms": waiting,
        "fix": {"intervention": None, "changes_numerics": False, "suggest_only": True,
                "code": f"# compare rank {rank[fast]}'s breakdown with the others': its extra work sets the pace"},
    }
