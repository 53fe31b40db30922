"""A straggler rank slows every rank.

What it does:
    Given traces of several ranks (``advisor inspect rank0.json rank1.json ...``), compares
    each rank's median step time with the median over ranks.

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

from ._common import pct

CODE = "ADV116"
NAME = "straggler-ranks"
SEVERITY = "warning"
NEEDS = ("ranks",)
FIX = None
HITS = ("straggler_synthetic",)
NON_HITS = {"amp_bf16_channels_last": "one rank only: skipped, not guessed"}


def check(ctx):
    from advisor.metrics import analyze

    times = [float(ctx.analysis.get("step_time_ms") or 0.0)]
    times += [float(analyze(m).get("step_time_ms") or 0.0) for m in ctx.extra_models]
    med = statistics.median(times)
    if not med:
        return None
    worst = max(range(len(times)), key=lambda i: times[i])
    excess = times[worst] / med - 1.0
    if excess < ctx.thresholds.straggler_frac:
        return None
    return {
        "message": f"Rank {worst} is {pct(excess)} slower per step than the median rank.",
        "evidence": [f"rank {i}: {t:.2f} ms per step" for i, t in enumerate(times)],
        "estimated_gain_ms": times[worst] - med,
        "fix": {"intervention": None, "changes_numerics": False, "suggest_only": True,
                "code": "# compare the slow rank's breakdown with the others'"},
    }
