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
    optimizer steps (a step that accumulates gradients takes several batches); "at_most" where a
    ``break`` may end the loop sooner."""
    loop = ((child.get("config") or {}).get("epochs") or {})
    value = loop.get("value") or {}
    epochs, per_epoch = value.get("epochs"), child.get("batches_per_epoch")
    if not epochs or not per_epoch:
        return None
    steps = epochs * per_epoch // measure.micro_batches(child)
    if not steps:
        return None
    # a loop that may break sooner (a step count reached): this is the most it can run, which a
    # one-off cost it does not pay back still is not paid back in
    at_most = bool(value.get("at_most"))
    source = (f"{'at most ' if at_most else ''}len(loader) {per_epoch} × {epochs} epochs "
              f"({value.get('expr')} at {loop.get('where')})")
    return {"steps": steps, "source": source, **({"at_most": True} if at_most else {})}


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


def shares(records: list[dict], length: dict | None) -> list[dict]:
    """Each kept fix's own share of the stack's figures (its record against the last kept record
    before it) and whether the run pays it back: {"fix", "one_off_s", "saved_per_step_s",
    "break_even_steps", "noise_s", "within_noise", "paid"}. ``paid`` is None without a known
    length; False only where the one-off, less the lead-in's noise its record carries
    (``one_off_noise_s``, advisor.costs), is still more than it saves over the run: a one-off
    the noise could hold is not a reason to leave a fix out. ``within_noise``: the one-off is
    within the noise, or its break-even passes the run's length only within it. A fix left out
    leaves the stack's figures where they were: the next is judged on the record before it."""
    out: list[dict] = []
    prev_cost, prev_saved = 0.0, 0.0
    for rec in records:
        cost, saved = rec.get("one_off_s"), rec.get("saved_per_step_s")
        if cost is None or saved is None:
            continue
        own_cost, own_saved = cost - prev_cost, saved - prev_saved
        noise = float(rec.get("one_off_noise_s") or 0.0)
        steps = length["steps"] if length else None
        beyond = own_cost > noise
        paid = None if steps is None else not (beyond and own_cost - noise > own_saved * steps)
        even = measure.break_even_steps(own_cost if beyond else 0.0, own_saved)
        out.append({"fix": rec["fix"], "one_off_s": round(own_cost, 2), "saved_per_step_s": round(own_saved, 6),
                    "break_even_steps": even, "noise_s": round(noise, 2),
                    "within_noise": not beyond or bool(paid and steps is not None and (even is None or even > steps)),
                    "paid": paid})
        if paid is not False:
            prev_cost, prev_saved = cost, saved
    return out


def unpaid(records: list[dict], length: dict | None) -> dict[str, str]:
    """{fix: why it is left out} for the kept fixes whose own one-off cost (beyond the stack before
    it) is more than what they save over the run, the lead-in's noise given to the fix
    (shares). Without a known length, none."""
    if not length:
        return {}
    out: dict[str, str] = {}
    for share in shares(records, length):
        if share["paid"] is False:
            cost, saved, noise = share["one_off_s"], share["saved_per_step_s"], share["noise_s"]
            out[share["fix"]] = (f"its one-off cost ({cost:.1f} s) is not paid back within the run's "
                                 f"{length['steps']} steps ({length['source']}): it saves "
                                 f"{saved * 1e3:.1f} ms a step" + (
                                     f", {saved * length['steps']:.1f} s over the run, under its one-off less "
                                     f"the lead-in's noise ({noise:.1f} s)" if noise else ""))
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
