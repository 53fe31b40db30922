"""Fixes measured apart from the ladder, never stacked, each run on top of the ladder's final
stack and judged against it (not the baseline), shown apart in the report: a larger batch
changes training dynamics (the learning rate wants scaling with it); a fix that would override
the user's explicit reproducibility choice (cudnn.deterministic, Fix.overrides) is measured so the
user knows what it would give, and stays out of fixes.patch unless they allow it (--allow)."""

from __future__ import annotations

from advisor import failures, fixes, measure
from advisor.contracts import TrialRecord
from advisor.trials.candidates import Candidate
from advisor.trials.state import After
from advisor.trials.verdicts import judge


def name(cand: Candidate) -> str:
    factor = cand.params.get("factor")
    return f"apart-{cand.name}" + (f"-x{factor}" if factor else "")


def measure_all(after: After, cands: list[Candidate], overridden: dict[str, str] | None = None) -> list[dict]:
    """Batch-size factors in ascending order; a larger one only when the smaller one was
    measured faster than the kept fixes (x4 after an x2 that was slower, crashed or did not
    fit is a process spent on a foregone answer; one that cannot apply says why for itself).
    Returns the records, in order, for the ladder's trials. overridden: {fix: the user's choice it
    would override} (those are measured once each, and say so)."""
    out: list[dict] = []
    overridden = overridden or {}
    cands = sorted(cands, key=lambda c: c.params.get("factor") or 0)
    for i, cand in enumerate(cands):
        if after.out_of_budget(changes_stack=False):
            break
        prev = out[-1] if out else None
        if prev is not None and prev.get("fix") == cand.name and prev.get("status") not in ("measured", "skipped"):
            out.append({"name": name(cand), "fix": cand.name, "params": cand.params, "status": "not run",
                        "interventions": [], "reason": f"{prev['name']} was not faster than the kept fixes"})
            continue
        # what comes after them all (the ceiling), then the next factor (run only if this one
        # pays): on GPUs side by side they run beside this one
        nxt = list(after.then) + [(name(c), [*after.stack, c], True) for c in cands[i + 1:i + 2]] if after.ahead else []
        out.append(_measure(after, cand, nxt, overridden.get(cand.name)))
    return out


def _measure(after: After, cand: Candidate, guesses: list, overrides: str | None = None) -> TrialRecord:
    """A trial on top of the kept fixes, judged against them (not the baseline)."""
    mod = fixes.get(cand.name)
    why = mod.not_applicable(after.base.get("config") or {}, after.environment, cand.params)
    trial = name(cand)
    if why:
        rec: TrialRecord = {"name": trial, "fix": cand.name, "params": cand.params, "status": "skipped", "reason": why}
    else:
        child, analysis, _ = after.process(trial, [*after.stack, cand], guesses=guesses)
        numerics = overrides is None or mod.changes_numerics
        rec = {"name": trial, "fix": cand.name, "params": cand.params, "changes_numerics": numerics,
               "description": mod.describe(cand.params), "interventions": [c.key for c in [*after.stack, cand]],
               "apart": True, **measure.trial_figures(child, analysis, after.base)}
        ref = after.reference
        status, reason, gain, _used = judge([child], ref.runs, ref.loss, ref.noise, numerics)
        rec["status"] = "measured" if status in ("accepted", "unsure") else status
        if status == "failed":
            rec["failure"] = failures.of_trial([child], reason)
        rec["gain_vs_previous"] = gain
        reason = reason.replace("the previous stack", "the kept fixes")
        if overrides:
            rec["overrides"] = overrides
            rec["reason"] = (f"{reason}; changes reproducibility: your script sets {overrides}, so it is not in "
                             f"fixes.patch (--allow {mod.allowed_by} keeps it)")
        else:
            ran_on = [p.name for c in after.stack for p in c.parts] + [a.get("name") for a in after.applied]
            rec["reason"] = f"{reason}; {mod.apart_note(ran_on)}"
            _per_process(rec, after)
    return rec


def _per_process(rec: dict, after: After) -> None:
    """On top of a kept (or --apply'd) fix that launches a process per GPU (ddp) the batch is
    split over its processes: say what each one takes (x2 over 2 processes gives each the
    script's own batch back)."""
    launched = [(p.name, fixes.get(p.name).processes(p.params)) for c in after.stack for p in c.parts
                if fixes.known(p.name)] + \
        [(a.get("name"), fixes.get(a["name"]).processes(a.get("params") or {})) for a in after.applied
         if fixes.known(a.get("name"))]
    launched = [(name, n) for name, n in launched if n]
    if launched and rec.get("batch_size"):
        name, n = launched[0][0], max(2, launched[0][1])
        rec["description"] += f"; over the {n} {name} processes: {rec['batch_size']} a process, {rec['batch_size'] * n} a step"
