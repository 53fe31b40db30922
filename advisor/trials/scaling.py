"""The ddp trial's scaling against one GPU: its global samples/s over the one-GPU samples/s of
the same stack, and that over the number of GPUs (the scaling efficiency).

- A script that trains on one GPU: the runs the ddp trial is judged against are the one-GPU rate.
- An ``nn.DataParallel`` script: those runs drove every GPU, so the one-GPU rate is measured in a
  process of its own: the same stack with DataParallel given one device
  (interventions/one_gpu.py), timing only. Its record joins the trials as a reference.
"""

from __future__ import annotations

from advisor import failures, fixes, measure
from advisor.contracts import TrialRecord
from advisor.trials.candidates import Candidate
from advisor.trials.state import After


def measure_scaling(after: After, name: str, rec: dict, gpus: int) -> tuple[dict | None, dict | None]:
    """(the ddp record's ``scaling``, the one-GPU reference's record or None); no scaling when
    the trial measured no samples/s or no one-GPU rate could be had."""
    rate = rec.get("samples_per_s")
    if not rate:
        return None, None
    one = fixes.get("one-gpu")
    ref_rec = None
    if one.not_applicable(after.base.get("config") or {}, after.environment, {}) is None:
        ref_rec = _one_gpu_run(after, f"{name}-one-gpu", one)
        one_gpu, source = ref_rec.get("samples_per_s"), ref_rec["name"]
    else:
        runs = after.reference.runs
        one_gpu = measure.samples_per_s(runs[0], measure.mean_step_ms(runs)) if runs else None
        # which runs those were (the baseline, its repeat, or re-timings on a noisy host): said,
        # so that the figure can be checked against their records
        ref_ms = [measure.step_ms(r) for r in runs]
        source = "the runs it was judged against"
    if not one_gpu:
        return None, ref_rec
    speedup = rate / one_gpu
    found = {"gpus": gpus, "samples_per_s": rate, "one_gpu_samples_per_s": one_gpu, "one_gpu_source": source,
             "speedup_vs_one_gpu": speedup, "efficiency": speedup / gpus}
    if ref_rec is None:
        found["one_gpu_step_ms"] = ref_ms
    return found, ref_rec


def _one_gpu_run(after: After, name: str, mod) -> TrialRecord:
    stack = [*after.stack, Candidate("one-gpu")]
    rec: TrialRecord = {"name": name, "fix": "one-gpu", "description": mod.describe({}), "interventions": [c.key for c in stack]}
    if after.out_of_budget():
        return {**rec, "status": "not run", "reason": "trial budget spent"}
    child, _, _ = after.process(name, stack, profile=False)
    rec.update(measure.trial_figures(child, None, after.base))
    if child.get("status") == "complete" and rec.get("samples_per_s"):
        rec.update(status="reference", reason="the stack on one GPU: what the ddp trial's scaling is measured against")
    else:
        rec.update(status="failed", reason="; ".join(child.get("incomplete_reasons") or []) or "no step measured")
        rec["failure"] = failures.of_trial([child], rec["reason"])
    return rec


def describe(scaling: dict) -> str:
    """One clause for the trial's reason."""
    return (f"{scaling['speedup_vs_one_gpu']:.2f}x one GPU's samples/s on {scaling['gpus']} GPUs "
            f"(scaling efficiency {scaling['efficiency']:.0%})")
