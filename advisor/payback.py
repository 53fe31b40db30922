"""When a fix pays back: its one-off cost (a compile, a preload, an autotune) against what it saves
a step, over the run the user will actually do.

A trial's record carries ``one_off_s`` (its lead-in beyond the baseline's, measure.one_off_s) and
``break_even_steps``. Where advisor knows the run's length (``run_length``: ``--run-steps``, the
script ended by itself under advisor, len(loader) × the epochs of the loop around the training
loop, or the steps a Hugging Face or Lightning Trainer set its run to), ``end_to_end`` projects
the whole run's wall time before and after the kept stack, and ``unpaid`` names the kept fixes
whose own one-off cost the rest of the run does not pay back: the patch leaves them out, with
the reason (docs/patch.md).
"""

from __future__ import annotations

from advisor import measure


def run_length(child: dict, run_steps: int | None = None) -> dict | None:
    """The run's length in the baseline's steps, and where it comes from; None when unknown."""
    if run_steps:
        return {"steps": int(run_steps), "source": "--run-steps"}
    from advisor.schedule import script_steps

    n = script_steps(child)
    if n:
        return {"steps": n, "source": "the script ended by itself under advisor"}
    return loader_epochs(child) or framework_steps(child)


def loader_epochs(child: dict) -> dict | None:
    """len(loader) × the epochs of the loop around the training loop (runner.epochs), in
    optimizer steps (a step that accumulates gradients takes several batches)."""
    loop = ((child.get("config") or {}).get("epochs") or {})
    epochs, per_epoch = (loop.get("value") or {}).get("epochs"), child.get("batches_per_epoch")
    if not epochs or not per_epoch:
        return None
    steps = epochs * per_epoch // measure.micro_batches(child)
    return {"steps": steps, "source": f"len(loader) {per_epoch} × {epochs} epochs "
                                      f"({(loop.get('value') or {}).get('expr')} at {loop.get('where')})"} if steps else None


def framework_steps(child: dict) -> dict | None:
    """The optimizer steps a framework's trainer set its run to (runner.epochs.framework_steps)."""
    entry = (child.get("config") or {}).get("run_steps") or {}
    value = entry.get("value") or {}
    if not value.get("steps"):
        return None
    return {"steps": int(value["steps"]), "source": f"{entry.get('where')}: {value.get('expr')}"}


def kept_records(trials: list[dict], stack: list[dict]) -> list[dict]:
    """The accepted trial records of the kept stack, in the order they were kept (the last
    accepted record of each kept fix)."""
    names = {s.get("name") for s in stack}
    last = {t["fix"]: t for t in trials
            if t.get("status") == "accepted" and not t.get("apart") and t.get("fix") in names}
    return sorted(last.values(), key=trials.index)


def unpaid(records: list[dict], length: dict | None) -> dict[str, str]:
    """{fix: why it is left out} for the kept fixes whose own one-off cost (beyond the stack before
    it) is more than what they save over the run. Without a known length, none."""
    if not length:
        return {}
    out: dict[str, str] = {}
    prev_cost, prev_saved = 0.0, 0.0
    for rec in records:
        cost, saved = rec.get("one_off_s"), rec.get("saved_per_step_s")
        if cost is None or saved is None:
            continue
        own_cost, own_saved = cost - prev_cost, saved - prev_saved
        if own_cost > 0 and own_cost > own_saved * length["steps"]:
            out[rec["fix"]] = (f"its one-off cost ({own_cost:.1f} s) is not paid back within the run's "
                               f"{length['steps']} steps ({length['source']}): it saves "
                               f"{own_saved * 1e3:.1f} ms a step")
        else:
            prev_cost, prev_saved = cost, saved
    return out


def patched_record(records: list[dict], left: dict[str, str], base: dict) -> dict | None:
    """What the patch's fixes measured, with the fixes ``left`` out: each kept fix's own step
    saving and one-off cost (its record against the record before it) added up. Where every
    left-out fix comes after the last one the patch keeps, that is the last kept record itself;
    where a kept fix was measured on top of a left-out one, its rate is estimated from the
    savings (``estimated`` says so): no run timed exactly the patch's fixes."""
    cost = saved = prev_cost = prev_saved = 0.0
    last = last_exact = None
    after_left = False
    for rec in records:
        c, s = rec.get("one_off_s"), rec.get("saved_per_step_s")
        if c is None or s is None:
            return None
        if rec["fix"] in left:
            after_left = True
        else:
            cost, saved, last = cost + c - prev_cost, saved + s - prev_saved, rec
            if not after_left:
                last_exact = rec
        prev_cost, prev_saved = c, s
    if last is None:
        return None
    if not after_left or last is last_exact:
        return last
    rate, ms = measure.samples_per_s(base), measure.step_ms(base)
    step_s = ms / 1e3 - saved if ms else 0.0
    if not rate or step_s <= 0:
        return None
    return {"fix": last["fix"], "one_off_s": cost, "saved_per_step_s": saved,
            "samples_per_s": rate * ms / 1e3 / step_s,
            "estimated": f"without {', '.join(sorted(left))}: the kept fixes' own savings added up"}


def end_to_end(base: dict, kept: dict | None, length: dict | None) -> dict | None:
    """patch.end_to_end: the projected wall time of the whole run, from the script's first line,
    before and after the patch's fixes (``kept``: the record of the last fix the patch keeps, its
    one-off costs and saving against the baseline)."""
    lead, base_ms = measure.lead_in_s(base), measure.step_ms(base)
    if not length or lead is None or not base_ms:
        return None
    steps = length["steps"]
    before = lead + steps * base_ms / 1e3
    cost, saved = (kept or {}).get("one_off_s"), (kept or {}).get("saved_per_step_s")
    if kept is not None and (cost is None or saved is None):
        return None
    after = before if kept is None else lead + cost + steps * (base_ms / 1e3 - saved)
    return {"steps": steps, "source": length["source"], "baseline_s": round(before, 1),
            "patched_s": round(after, 1), "speedup": round(before / after, 3) if after > 0 else None}
