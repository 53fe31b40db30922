"""How the trials ladder judges one comparison: the verdict, the noise it uses, and whether a
reference with a single run must be timed again before the verdict stands."""

from __future__ import annotations

import statistics
from typing import NamedTuple

from advisor import failures, measure
from advisor.runtime import NOT_APPLIED


class Verdict(NamedTuple):
    """One comparison's outcome. status: accepted | unsure | rejected | failed | skipped;
    "unsure" is a gain over 3% but inside the noise of the comparison, which more runs could
    settle. gain: relative samples/s over the reference; threshold: the one it was held to."""
    status: str
    reason: str
    gain: float | None = None
    threshold: float | None = None


def judge(runs: list[dict], ref_runs: list[dict], loss_ref: dict, noise: float,
          changes_numerics: bool, names: list[str] | None = None) -> Verdict:
    """The verdict on a trial's runs against the reference's. names: the fixes the trial
    added; it is "skipped" when every one of them refused to apply in the child."""
    child = runs[0]
    if child.get("status") != "complete":
        return Verdict("failed", "; ".join(child.get("incomplete_reasons") or ["the trial did not finish"]))
    broken = failures.failed_to_apply(child)
    if broken:   # its run-time part raised as it was installed: the run timed another stack
        return Verdict("failed", "; ".join(f"{name} {failures.FAILED_TO_APPLY} {err}" for name, err in broken.items()))
    refused = {name: n.split(":", 2)[2].strip() for name in names or [] for n in child.get("notes") or []
               if n.startswith(f"{NOT_APPLIED} {name}:")}
    if names and len(refused) == len(set(names)):
        return Verdict("skipped", "; ".join(refused.values()))
    lost = _stack_refused(child, ref_runs, names or [])
    if lost:   # timed on another stack than the one it is judged against
        return Verdict("failed", "; ".join(f"{name}, kept before, did not apply in this run: {why}"
                                           for name, why in lost.items()))
    for r in runs:
        bad = measure.numerics_verdict(r.get("losses") or [], loss_ref.get("losses") or [], changes_numerics)
        if bad:
            return Verdict("rejected", f"numerics: {bad}")
    gain = measure.pooled_gain(runs, ref_runs)
    if gain is None:
        return Verdict("failed", "no steps were measured")
    threshold = measure.acceptance_threshold(noise, len(ref_runs), len(runs))
    over = f"{runs_text(runs, ref_runs)}, threshold {threshold:.1%}" + \
        "".join(f"; {name} did not apply: {why}" for name, why in refused.items()) + \
        "".join(f"; {fault}" for fault in {r["batch_fault"] for r in runs if r.get("batch_fault")})
    if gain >= threshold:
        return Verdict("accepted", f"{gain:+.1%} vs the previous stack ({over})", gain, threshold)
    if gain >= measure.MIN_GAIN:
        return Verdict("unsure", f"{gain:+.1%} vs the previous stack, under the noise threshold ({over})", gain, threshold)
    return Verdict("rejected", f"{gain:+.1%} vs the previous stack, under the {threshold:.1%} threshold ({over})", gain, threshold)


def _refusals(child: dict) -> dict[str, str]:
    """{fix: why} for each fix a run's notes say did not apply."""
    out = {}
    for n in child.get("notes") or []:
        if n.startswith(NOT_APPLIED):
            name, _, why = n[len(NOT_APPLIED):].strip().partition(":")
            out.setdefault(name.strip(), why.strip())
    return out


def _stack_refused(child: dict, ref_runs: list[dict], names: list[str]) -> dict[str, str]:
    """The fixes of the stack under the trial (not its own) that did not apply in its run
    though they did in the reference's: a preload refused on a new estimate of its time, a
    device-memory share read beside other processes."""
    ref = _refusals(ref_runs[0]) if ref_runs else {}
    return {name: why for name, why in _refusals(child).items() if name not in names and name not in ref}


def runs_text(runs: list[dict], ref_runs: list[dict]) -> str:
    return f"{len(runs)} run{'s' if len(runs) > 1 else ''} vs {len(ref_runs)} of the reference"


# A gain this far over a one-run reference stands whatever the noise of a regime not yet
# measured, up to 4.5% (2 x 4.5% = 9%): above what GPU-bound stacks spread (docs/trials.md).
UNMEASURED_REGIME_GAIN = 3 * measure.MIN_GAIN


def retime_reference(status: str, gain: float | None, threshold: float | None, regime_measured: bool) -> bool:
    """Confirm on demand: whether a verdict against a reference timed once should wait for a
    second run of the reference (timing-only). A kept fix is no longer re-run as a matter of
    course; its one run stands as the next reference until a comparison could turn on it.

    With a second reference run the reference's mean moves by half the difference of the two
    runs, a shift whose spread is noise/2 (noise: the spread of one run against one), and
    the threshold drops from 2 x noise (1 vs 1) to 1.73 x noise (1 vs 2). A verdict flips
    only if the gain crosses the new threshold, so, with T the threshold used:
    - accepted at 2T (= 4 x noise) needs a shift of -2.27 x noise, 4.5 spreads (at the 3%
      floor, 6% needs -3%, 4 spreads): never worth a process; at T it needs -0.5 spread (30%);
    - rejected at T/2 needs +1.5 spreads (7%), and more below it (2 at the floor);
    - "unsure" (3% up to T) is marginal by definition: its confirmation round would time the
      reference again anyway, and timing it alone first may settle it with one process, as
      the new pair also gives the reference's regime its own noise.
    So the band is [T/2, 2T). When no configuration running like the reference (within 2x)
    was timed twice, T rests on other regimes' noise, which differs many times over (a
    loader-bound step spreads far more than a GPU-bound one: docs/trials.md): the band then
    reaches at least 9% (UNMEASURED_REGIME_GAIN), below which a regime noise of 4.5% could
    decide."""
    if gain is None or threshold is None or status not in ("accepted", "unsure", "rejected"):
        return False  # failed, skipped, numerics: the reference's speed plays no part
    if status == "unsure":
        return True
    upper = 2.0 * threshold if regime_measured else max(2.0 * threshold, UNMEASURED_REGIME_GAIN)
    return threshold / 2.0 <= gain < upper


def regime_noise(groups: list[list[dict]], ref_runs: list[dict]) -> float | None:
    """The noise of configurations that run like the current reference (mean step within
    2x of it): a loader-bound baseline on a busy host spreads far more between runs than the
    GPU-bound stacks after it (docs/trials.md), and the comparison at hand is between the latter."""
    centre = measure.mean_step_ms(ref_runs)
    if centre is None:
        return None
    near = [g for g in groups if g and 0.5 <= statistics.fmean([measure.step_ms(r) or centre for r in g]) / centre <= 2.0]
    return measure.pooled_noise(near)


def regroup(groups: list[list[dict]], *runs_lists: list[dict]) -> list[list[dict]]:
    """Replace or add the run lists of the configurations just re-timed (matched by identity
    of their first run) in the noise groups."""
    out = list(groups)
    for runs in runs_lists:
        for i, g in enumerate(out):
            if g and runs and g[0] is runs[0]:
                out[i] = runs
                break
        else:
            if len(runs) > 1:
                out.append(runs)
    return out


def relative(rec: dict, other: dict) -> float:
    """How much faster rec's configuration ran than other's (both measured on one reference)."""
    return (1.0 + rec["gain_vs_previous"]) / (1.0 + other["gain_vs_previous"]) - 1.0
