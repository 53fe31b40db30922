"""The data-free ceiling: the kept stack's compute fixes with every batch one cached on-device
batch (no loader; interventions/cached_batch.py), the most any data fix could give. Its record
joins the ladder's trials apart from the ladder: never a fix, never in the patch."""

from __future__ import annotations

from advisor import failures, fixes, measure
from advisor.contracts import TrialRecord
from advisor.trials.candidates import Candidate
from advisor.trials.state import After

NAME = "ceiling-data-free"
# A cached batch with this much padding bounds the loader, not the batches' padding (ADV122)
PADDING_NOT_BOUND = 0.05


def measure_ceiling(after: After, name: str = NAME) -> TrialRecord | None:
    """The ceiling trial's record, on top of the ladder's final stack (its data fixes left
    out), for the ladder's trials, apart from the ladder (never a fix, never in the patch).
    None under --fix that does not name cached-batch: the user asked for those trials only."""
    if after.only is not None and "cached-batch" not in after.only:
        return None
    mod = fixes.get("cached-batch")
    why = mod.not_applicable(after.base.get("config") or {}, after.environment, {})
    rec: TrialRecord = {"name": name, "fix": "cached-batch", "apart": True, "ceiling": True, "interventions": []}
    if why:
        rec.update(status="skipped", reason=why)
    elif after.out_of_budget(changes_stack=False):
        rec.update(status="not run", reason="trial budget spent")
    else:
        stack = ceiling_stack(after.stack)
        child, analysis, _ = after.process(name, stack, profile=False)
        rec.update(description=mod.describe({}), changes_numerics=True, interventions=[c.key for c in stack],
                   **measure.trial_figures(child, analysis, after.base))
        gain = measure.pooled_gain([child], after.reference.runs) if after.reference.runs else None
        if child.get("status") == "complete" and rec.get("samples_per_s") and gain is not None \
                and gain < -max(after.reference.noise, measure.MIN_GAIN):
            # slower than the stack it stands above: the host, not the data, set both rates
            rec.update(status="measured", reason=f"not a bound here: it ran {-gain:.0%} slower than the kept stack "
                                                 f"it should bound, beyond the {after.reference.noise:.0%} run-to-run "
                                                 "noise; on this host the data pipeline is not what limits the step")
        elif child.get("status") == "complete" and rec.get("samples_per_s"):
            rec.update(status="bound", reason="the kept stack's compute fixes, every batch one cached batch on the "
                                              "device: " + _bound_words(measure.padding_frac(after.base)))
        else:
            rec.update(status="failed", reason="; ".join(child.get("incomplete_reasons") or [])
                       or "the ceiling run measured no step")
            rec["failure"] = failures.of_trial([child], rec["reason"])
    return rec


def ceiling_stack(kept: list[Candidate]) -> list[Candidate]:
    """The ceiling's stack on the kept fixes: their compute fixes, and the cached batch
    standing in for every fix of the data pipeline."""
    parts = [p for c in kept for p in c.parts if not fixes.trait(p.name, "feeds_data")]
    return [*parts, Candidate("cached-batch")]


def will_run(only: set[str] | None, config: dict, environment: dict) -> bool:
    """Whether measure_ceiling will start a process (what the processes before it may guess)."""
    if only is not None and "cached-batch" not in only:
        return False
    return fixes.get("cached-batch").not_applicable(config, environment, {}) is None


def _bound_words(padding: float | None) -> str:
    """What the ceiling bounds: every data fix, unless the cached batch is mostly padding,
    which a fix of the batches' padding takes away (ADV122)."""
    if padding is not None and padding >= PADDING_NOT_BOUND:
        return (f"no faster loader can make the step faster than this; {padding:.0%} of the batches' tokens are "
                "padding, and batches with less of it (dynamic padding, packing) can")
    return "no data fix can make the step faster than this"
