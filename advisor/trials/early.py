"""Stop when nothing is left to win: the ladder ends once the fixes it has not tried could not,
by the rules' estimates, give a gain the noise lets it accept; and the data-free ceiling, run
early, bounds what the data fixes still queued can give.

A rule's estimate is what its cost is worth if the cost went to zero (advisor.engine), so a
fix's estimate is the most the rules expect of it; a fix with no estimate (cuDNN autotuning,
a fix asked for by name) or one whose gain its estimate does not bound (torch.compile, which
fuses kernels besides taking launches away) keeps the ladder going. The data-free ceiling is a
measured bound: every data fix together can make the step no faster than the kept compute
fixes fed one cached batch (advisor.trials.ceiling), so a data fix's estimate is capped at the
reference's step less the ceiling's. Pure functions; the ladder runs the processes (docs/trials.md, "Stopping early").
"""

from __future__ import annotations

import dataclasses
import math

from advisor import fixes
from advisor.trials.candidates import Candidate


def feeds_data(cand: Candidate) -> bool:
    """Every fix of the rung is a data fix (the cached batch stands in for it)."""
    return all(fixes.trait(p.name, "feeds_data") for p in cand.parts)


def compute_key(stack: list[Candidate]) -> tuple[str, ...]:
    """The stack's compute fixes (its data fixes left out): a ceiling measured on them bounds
    the data fixes tried on top of them, and on no other stack."""
    return tuple(sorted(p.key for c in stack for p in c.parts if not fixes.trait(p.name, "feeds_data")))


def data_bound_ms(ref_ms: float, ceiling_ms: float, noise: float) -> float:
    """The most a data fix can take off the reference's step, with the ceiling's one run read
    at the noise's low end (a ceiling timed slow would bound too tight)."""
    return max(0.0, ref_ms - ceiling_ms * (1.0 - min(max(noise, 0.0), 0.5)))


def bounded(queue: list[Candidate], bound_ms: float) -> list[Candidate]:
    """The queue with each data fix's estimate capped at the ceiling's bound (an upper bound
    now: rungs.pick does not try it under the least gain a trial could be accepted on)."""
    out = []
    for c in queue:
        if feeds_data(c):
            est = bound_ms if c.est_gain_ms is None else min(c.est_gain_ms, bound_ms)
            c = dataclasses.replace(c, est_gain_ms=est, gain_is_upper_bound=True)
        out.append(c)
    return out


def under_its_bound(cand: Candidate, floor_ms: float) -> bool:
    """The rung's estimate is an upper bound under the least acceptable gain: rungs.pick skips
    it now (it is asked for again on the next kept stack), so it does not keep the ladder going."""
    return cand.gain_is_upper_bound and cand.est_gain_ms is not None and cand.est_gain_ms < floor_ms


def left_to_win(rungs: list[Candidate]) -> float | None:
    """The estimated gain, ms a step, of the rungs still to try, summed: what stacking all of
    them could give at most. None when one of them has no estimate, or a gain its estimate
    does not bound (Fix.beyond_estimate: torch.compile's fusion)."""
    total = 0.0
    for c in rungs:
        if c.est_gain_ms is None or not math.isfinite(c.est_gain_ms) \
                or any(fixes.trait(p.name, "beyond_estimate") for p in c.parts):
            return None
        total += max(0.0, c.est_gain_ms)
    return total


def stop_reason(left_ms: float | None, floor_ms: float, queued: int) -> str | None:
    """Why the ladder stops here, or None: the untried rungs' estimates together are under the
    least gain a trial could still be accepted on."""
    if left_ms is None or queued == 0 or floor_ms <= 0 or left_ms >= floor_ms:
        return None
    return (f"stopped early: the {queued} fix{'es' if queued != 1 else ''} left could give "
            f"{left_ms:.2f} ms a step at most by the rules' estimates, under the {floor_ms:.2f} ms "
            "a trial could be accepted on at this noise")
