"""The reference the first trial is judged against: the baseline timed again (the repeat), its
run-to-run noise, and when the two disagree beyond any plausible noise, more runs until two
agree (advisor.trials.sanity) or the host is called too noisy to judge fixes."""

from __future__ import annotations

import math
import time

from advisor import failures, measure
from advisor.trials import guesses, sanity
from advisor.trials.process import planned_end
from advisor.trials.state import CUT_SHORT, REPEAT, Interrupted


def measure_reference(lad) -> None:
    """The repeat, and the noise and threshold the first trials are judged at; lad: the ladder
    (advisor.trials.ladder), whose reference runs, noise and records this sets."""
    no_room = _no_room(lad)
    if no_room:
        lad.say(no_room)
        lad.groups, lad.ref_runs, lad.loss_ref, lad.noise = [[lad.base]], [lad.base], lad.base, 0.0
        lad.result.update(noise=None, threshold=measure.acceptance_threshold(0.0))
        lad.trials.append({"name": REPEAT, "fix": "baseline (repeat)", "status": "not run", "reason": no_room,
                           "interventions": []})
        return
    lad.say("repeating the baseline to measure run-to-run noise")
    # Timing only: the baseline's own trace is the one the rules read.
    try:
        repeat, _, _ = lad.process(REPEAT, [], profile=False, guesses=guesses.likely_next(lad, None))
    except Interrupted:
        lad.trials.append({"name": REPEAT, "fix": "baseline (repeat)", "status": "not run", "reason": CUT_SHORT,
                           "interventions": []})
        raise
    repeat_ok = repeat.get("status") == "complete"
    lad.groups = [[lad.base, repeat] if repeat_ok else [lad.base]]
    lad.noise = (measure.pooled_noise(lad.groups) if repeat_ok else None) or 0.0
    lad.ref_runs = lad.groups[0]
    # Trials run seeded (spec seed 0) and so does the repeat; the baseline ran exactly as
    # python would, unseeded. Losses are compared with the seeded twin when there is one.
    lad.loss_ref = repeat if repeat_ok else lad.base
    if repeat_ok and lad.noise > sanity.IMPLAUSIBLE and not _retime(lad, repeat):
        return
    threshold = measure.acceptance_threshold(lad.noise)
    if not repeat_ok:   # a crashed reference measured nothing: it yields no noise figure
        from advisor.runner.parent import format_reasons

        lad.result.update(noise=None, threshold=threshold)
        lad.trials.append({"name": REPEAT, "fix": "baseline (repeat)", "status": "failed",
                            "reason": f"the baseline's repeat failed ({format_reasons(repeat) or 'no step measured'}): "
                                      f"no run-to-run noise figure; trials are judged against the {threshold:.1%} floor",
                            "failure": failures.of_trial([repeat], format_reasons(repeat) or "no step measured"),
                            "interventions": [], **measure.trial_figures(repeat, None, lad.base)})
        return
    lad.result.update(noise=lad.noise, threshold=threshold)
    if not any(t["name"] == REPEAT for t in lad.trials):   # re-timed: its record is in already
        lad.trials.append({"name": REPEAT, "fix": "baseline (repeat)", "status": "reference",
                            "reason": f"run-to-run noise {lad.noise:.1%}; one run against one is accepted above "
                                      f"{threshold:.1%}", "interventions": [],
                            **measure.trial_figures(repeat, None, lad.base)})


def _no_room(lad) -> str | None:
    """Why the repeat does not start: it is a process like a trial's, and none starts that
    would not end inside the budget. A slow baseline on a loaded host can spend the budget
    alone (a 10 s CPU step: a baseline stage of 357 s of 240): a repeat started then, and
    re-timed, took the analyze to three times its budget."""
    ctx = lad.ctx
    per = float(lad.base.get("elapsed_s") or 0.0)
    used = time.monotonic() - ctx.started
    if used + per <= planned_end(ctx.budget_s):
        return None
    minutes = max(1, math.ceil((used + 3 * per) / planned_end(1.0) / 60))   # the repeat, a trial, the verification
    return (f"not timed again: the baseline's stage took {used:.0f} s of the {ctx.budget_s:.0f} s budget, "
            f"no room for its repeat ({per:.0f} s a process); --budget {minutes} gives it and a trial room")


def _retime(lad, repeat: dict) -> bool:
    """The baseline and its repeat disagree beyond any plausible noise (advisor.trials.sanity):
    say why, time the reference again, and go on with the runs that agree. False when none
    do: result["unsettled"] says the host is too noisy to judge fixes, and no trial runs."""
    named = [("the baseline", lad.base), ("its repeat", repeat)]
    apart = lad.noise
    why = sanity.diagnose(named)   # the load average is the machine's: its cores, not the process's
    lad.trials.append({"name": REPEAT, "fix": "baseline (repeat)", "status": "reference",
                        "reason": f"{apart:.0%} from the baseline, beyond any run-to-run noise: {why}; timed again",
                        "interventions": [], **measure.trial_figures(repeat, None, lad.base)})
    runs, left, noise = [lad.base, repeat], None, None
    spent = False
    for i in range(sanity.RETIMES):
        name = f"{REPEAT}-{i + 2}"
        # a re-timing is a process like a trial's: none starts that would not end inside the
        # budget (on a loaded host one repeat can take as long as the whole budget)
        if lad.ctx.out_of_budget(changes_stack=False):
            lad.trials.append({"name": name, "fix": "baseline (repeat)", "status": "not run",
                               "reason": "trial budget spent", "interventions": []})
            spent = True
            break
        lad.say(f"the baseline and its repeat are {apart:.0%} apart: timing it again ({name})")
        extra, _, _ = lad.process(name, [], profile=False)
        if extra.get("status") == "complete":
            runs.append(extra)
            named.append((name, extra))
        lad.trials.append({"name": name, "fix": "baseline (repeat)", "status": "reference",
                            "reason": "timed again: the baseline and its repeat disagreed", "interventions": [],
                            **measure.trial_figures(extra, None, lad.base)})
        kept, left, noise = sanity.settle(runs)
        if noise is not None:
            break
    if noise is None:
        asked = lad.ctx.only is not None   # --fix: the trials the user named run anyway
        lad.result["unsettled"] = (f"the host is too noisy to judge fixes: the same script measured "
                                    f"{sanity.rates_text(named)} a step ({why}); "
                                    + ("the budget left no room to time it again; " if spent else "")
                                    + ("the trials --fix names ran anyway, judged at that noise. " if asked else
                                       "no fix was trialled. ")
                                    + "Run advisor on a quieter host, or with a longer --warmup and --min-time")
        if asked:
            lad.groups, lad.ref_runs = [runs], runs
            lad.noise = measure.pooled_noise([runs]) or lad.noise
            return True
        lad.result.update(noise=measure.pooled_noise([runs]), threshold=None)
        lad.queue = []
        return False
    lad.groups, lad.ref_runs, lad.noise = [kept], kept, noise
    out = next((name for name, r in named if r is left), None)
    lad.result["settled"] = (f"the baseline and its repeat were {apart:.0%} apart ({why}); timed again, "
                              + (f"{out} left out, " if out else "") + f"the runs agree within {noise:.1%}")
    return True
