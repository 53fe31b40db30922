"""After the ladder: how far the trials' one-off costs and rates can be trusted.

**The warm reference.** The baseline is the one process that starts cold: the first on
the machine to read the CUDA libraries and the dataset from disk, a difference that falls
between CUDA's start and the first step (docs/measurement.md gives a measured case). Every
later process, the trials and
the baseline's repeat alike, starts warm, and the user's own runs of a patched script pay the
cold start whatever the fixes. So a trial's one-off cost is its lead-in less the repeat's
(``one_off_s``; measure.one_off_s against the baseline is kept as ``one_off_vs_baseline_s``), and
what the baseline's start took beyond the repeat's is ``trial_summary.lead_in.cold_start_s``,
nobody's fix. Without a repeat the baseline is the reference.

**The lead-in's noise.** A one-off is a difference of two start-ups measured from one origin
(runner/startup.py). Two start-ups of one configuration still differ: the page cache, imports,
the host's other work. The noise allowed is ``LEAD_NOISE_FRAC`` of the baseline's lead-in, never
under ``LEAD_NOISE_MIN_S``. Not the step rate's noise: on a shared CPU host the steps' rate
swung by a factor of two between runs while the lead-ins, their waits for a core left out,
stayed within half a second of each other (docs/measurement.md). The baseline's repeat is the
same configuration started again: where it was timed more than once, each later repeat's
|one_off_s| is checked against that (``trial_summary.lead_in.repeat_within_noise``); one beyond it
widens the noise to what it measured, and the run says so. Each record then carries
``one_off_noise_s``, and a one-off within it is recognised as noise (``one_off_within_noise``,
no break-even to wait for); the patch leaves a fix out for not paying back only when its own
one-off, less that noise, is still more than it saves over the run (advisor.payback).

**Rates against the data-free ceiling.** The ceiling (advisor.trials.ceiling) is the stack's
compute fixes with every batch one cached batch: no data fix on those compute fixes can step
faster. A record of such a stack measured faster than the ceiling beyond the acceptance
threshold means one of the two measurements is wrong (the host's load while one of them ran,
most often, on a shared machine). The ceiling then bounds nothing: its status becomes
``measured``, its reason says which record ran above it, it no longer claims that no data fix
can help, and the record's reason says so too.
"""

from __future__ import annotations

from advisor import fixes, measure

LEAD_NOISE_MIN_S = 1.0   # two start-ups of one script may differ by this much (imports, page cache)
LEAD_NOISE_FRAC = 0.10   # ... or by this share of the lead-in, where that is more
REPEAT_FIX = "baseline (repeat)"   # the repeat's records (advisor.trials.reference)


def warm_reference(trials: list[dict]) -> dict | None:
    """The first record of the baseline's repeat with a one-off: the warm process of the
    baseline's configuration, every other record's reference."""
    return next((t for t in trials if t.get("fix") == REPEAT_FIX
                 and isinstance(t.get("one_off_vs_baseline_s", t.get("one_off_s")), (int, float))), None)


def from_warm_reference(trials: list[dict]) -> float | None:
    """Each record's ``one_off_s`` measured against the warm reference (its lead-in less the
    repeat's), its figure against the baseline kept as ``one_off_vs_baseline_s``. Returns the
    cold start: the baseline's lead-in beyond the repeat's (None without a repeat). Idempotent."""
    ref = warm_reference(trials)
    if ref is None:
        return None
    offset = float(ref.get("one_off_vs_baseline_s", ref["one_off_s"]))
    for rec in trials:
        cost = rec.get("one_off_vs_baseline_s", rec.get("one_off_s"))
        if isinstance(cost, (int, float)):
            rec["one_off_vs_baseline_s"] = cost
            rec["one_off_s"] = round(float(cost) - offset, 2)
    return -offset


def lead_in_noise(trials: list[dict], base: dict) -> dict | None:
    """trial_summary.lead_in: the baseline's lead-in, its cold start beyond the warm repeat's,
    the noise a one-off is judged against, and whether the baseline's later repeats fell within
    what was expected. None without a lead-in. Call after from_warm_reference."""
    lead = measure.lead_in_s(base)
    if lead is None:
        return None
    ref = warm_reference(trials)
    cold = -float(ref.get("one_off_vs_baseline_s", ref["one_off_s"])) if ref is not None else None
    warm = lead - cold if cold is not None else lead
    expected = max(LEAD_NOISE_MIN_S, LEAD_NOISE_FRAC * warm)
    repeats = [float(t["one_off_s"]) for t in trials
               if t.get("fix") == REPEAT_FIX and t is not ref and isinstance(t.get("one_off_s"), (int, float))]
    widest = max((abs(o) for o in repeats), default=0.0)
    out = {"baseline_s": round(lead, 2), "expected_s": round(expected, 2), "noise_s": round(max(expected, widest), 2),
           "repeats_one_off_s": [0.0, *(round(o, 2) for o in repeats)] if ref is not None else [],
           "repeat_within_noise": (widest <= expected) if ref is not None else None}
    if cold is not None:
        out.update(reference=ref.get("name"), warm_s=round(warm, 2), cold_start_s=round(cold, 2))
    if widest > expected:
        out["note"] = (f"the baseline's repeats started {widest:.1f} s apart, beyond the {expected:.1f} s "
                       f"expected of a {warm:.1f} s lead-in: one-off costs are judged against {widest:.1f} s")
    return out


def judge_one_off(rec: dict, noise: dict | None) -> None:
    """The record's one-off against the noise: ``one_off_noise_s``, and where the one-off is
    within it, ``one_off_within_noise`` and a break-even of 0 (nothing to pay back beyond the
    noise). Idempotent: the break-even is recomputed from the record's own figures."""
    cost = rec.get("one_off_s")
    if noise is None or not isinstance(cost, (int, float)):
        return
    rec["one_off_noise_s"] = noise["noise_s"]
    within = abs(cost) <= noise["noise_s"]
    rec["one_off_within_noise"] = within
    saved = rec.get("saved_per_step_s")
    rec["break_even_steps"] = measure.break_even_steps(0.0 if within else cost, saved)


def rates_above_ceiling(trials: list[dict], threshold: float | None) -> list[dict]:
    """The records measured faster than the data-free ceiling they stand under (their compute
    fixes all the ceiling's) beyond the acceptance threshold; each is named on the ceiling's
    record and its own, and the ceiling becomes "measured". Returns them."""
    out: list[dict] = []
    for ceiling in [t for t in trials if t.get("ceiling") and t.get("status") == "bound" and t.get("samples_per_s")]:
        out += _above(ceiling, trials, threshold)
    return out


def _above(ceiling: dict, trials: list[dict], threshold: float | None) -> list[dict]:
    bound, band = float(ceiling["samples_per_s"]), max(measure.MIN_GAIN, float(threshold or 0.0))
    compute = set(_compute_keys(ceiling.get("interventions")))
    above = [t for t in trials if t is not ceiling and not t.get("ceiling") and t.get("samples_per_s")
             and t.get("status") in ("accepted", "rejected", "unsure", "reference")
             and set(_compute_keys(t.get("interventions"))) <= compute
             and float(t["samples_per_s"]) > bound * (1.0 + band)]
    if not above:
        return []
    top = max(above, key=lambda t: t["samples_per_s"])
    ceiling["status"] = "measured"
    ceiling["above"] = [t["name"] for t in above]
    ceiling["reason"] = (f"not a bound here: {top['name']} ran {top['samples_per_s']:,.0f} samples/s, "
                         f"{top['samples_per_s'] / bound - 1:.0%} above this ceiling's {bound:,.0f}, beyond the "
                         f"{band:.0%} threshold: one of the two measurements is wrong (on a shared host, most "
                         "often the load while one of them ran), so it says nothing of what a data fix can give")
    for t in above:
        words = (f"measured {t['samples_per_s'] / bound - 1:.0%} above the data-free ceiling "
                 f"({ceiling['name']}, {bound:,.0f} samples/s) that no data fix can pass: this rate or the "
                 "ceiling's is wrong")
        t["above_ceiling"] = words
        if words not in str(t.get("reason") or ""):
            t["reason"] = f"{t['reason']}; {words}" if t.get("reason") else words
    return above


def _compute_keys(interventions) -> list[str]:
    """A stack's fixes that are not the data pipeline's (the ceiling's cached batch stands in
    for those), by their keys."""
    return [k for k in interventions or [] if isinstance(k, str)
            and not fixes.trait(k.split("(", 1)[0], "feeds_data") and k.split("(", 1)[0] != "cached-batch"]


def settle(doc: dict, base: dict) -> None:
    """Once the trials' records stand (before the patch is made from them, and again at the
    end): every record's one-off against the warm repeat, the lead-in's noise and the cold start
    in trial_summary.lead_in, every record's one-off judged against it, and the rates checked against the data-free ceiling. Idempotent."""
    trials = doc.get("trials") or []
    summary = doc.setdefault("trial_summary", {})
    from_warm_reference(trials)
    noise = lead_in_noise(trials, base)
    if noise is not None:
        summary["lead_in"] = noise
    for rec in trials:
        judge_one_off(rec, noise)
    rates_above_ceiling(trials, summary.get("threshold"))
