"""The ladder's side of stopping early (advisor.trials.early): the fixes left recorded as not
run when they cannot be accepted, the data-free ceiling run before a second data fix to bound
the data fixes left, and that record reused as the ceiling after the ladder when the kept
compute fixes are still its own."""

from __future__ import annotations

from advisor import fixes
from advisor.trials import early, rungs
from advisor.trials.ceiling import NAME as CEILING, ceiling_stack, will_run


def stop_early(lad) -> None:
    """When the fixes left cannot give what the noise lets a trial be accepted on
    (advisor.trials.early), their records say so and only the fixes measured apart stay
    queued; a group's best value so far joins the stack. The data fixes queued are bounded
    by the data-free ceiling first (ceiling_first). Under --fix the named trials all run."""
    if lad.ctx.only is not None:
        return
    ceiling_first(lad)
    apart_names = fixes.with_trait("apart") | set(lad.overridden())
    kept = lad.kept_names()
    floor = lad.floor_ms()
    # a fix under its own bound is skipped by rungs.pick, and asked for again later
    left = {c.key: c for c in lad.queue if c.key not in lad.tried and c.name not in kept
            and c.name not in apart_names and not early.under_its_bound(c, floor)}
    why = early.stop_reason(early.left_to_win(list(left.values())), floor, len(left))
    if why is None:
        return
    lad.say(why)
    lad.result["stopped_early"] = why
    for c in left.values():
        lad.trials.append({"name": c.key, "fix": c.name, "params": c.params, "status": "not run",
                            "reason": why, "origin": c.origin, "interventions": []})
    lad.queue = [c for c in lad.queue if c.name in apart_names]   # measured after the ladder
    lad.tried |= set(left)
    lad.settle_groups()


def ceiling_first(lad) -> None:
    """Run the data-free ceiling before a data fix when a data fix is kept already (the
    first one is asked for by a loader the step plainly waits on) and no ceiling was run
    on the stack's compute fixes: its step bounds what every data fix left can give, and
    rungs.pick skips those whose bound is under the least gain it could accept. The
    ceiling after the ladder is this record when the compute fixes have not changed."""
    key = early.compute_key(lad.stack)
    if lad.early_ceiling is None or lad.early_ceiling[0] != key:
        if not any(early.feeds_data(c) for c in lad.stack) or lad.ctx.out_of_budget(changes_stack=False) or lad.stopping():
            return
        nxt = rungs.pick(lad.queue, lad.tried, lad.kept_names(), **lad.pick_args()).rung
        if nxt is None or not early.feeds_data(nxt):
            return
        lad.say(f"timing the data-free ceiling first: it bounds what {nxt.key} and any data fix after it can give")
        rec = lad.ctx.runner.ceiling(lad.after(), name=f"{CEILING}-{lad.n:02d}")
        if rec is None:
            return
        rec.update(ceiling=False, early=True)   # the ceiling after the ladder, if its compute is this
        lad.trials.append(rec)
        ms = rec.get("step_time_ms") if rec.get("status") in ("bound", "measured") else None
        bound = early.data_bound_ms(lad.ref_ms(), ms, lad.noise) if ms else None
        lad.early_ceiling = (key, rec, bound)
    if lad.early_ceiling[2] is not None:
        lad.queue = early.bounded(lad.queue, lad.early_ceiling[2])


def ceiling_guess(lad, stack: list | None = None) -> tuple:
    """The final ceiling's process on ``stack`` (the kept one by default), as a guess for the
    processes before it: none when the early ceiling's record stands for it (final_ceiling)."""
    stack = lad.stack if stack is None else stack
    return () if _early_stands(lad, stack) else _ceiling_process(lad, CEILING, stack)


def early_ceiling_guess(lad, stack: list, nxt) -> tuple:
    """The ceiling ceiling_first would run next on ``stack`` before ``nxt``, a data fix likely
    next, as a guess for the process before it; () when it would not run one."""
    timed = lad.early_ceiling is not None and lad.early_ceiling[0] == early.compute_key(stack)
    if nxt is None or timed or not any(early.feeds_data(c) for c in stack):
        return ()
    return _ceiling_process(lad, f"{CEILING}-{lad.n:02d}", stack)


def _ceiling_process(lad, name: str, stack: list) -> tuple:
    """(name, the ceiling's stack on ``stack``, timing only), when the ceiling runs a process."""
    if not will_run(lad.ctx.only, lad.base.get("config") or {}, lad.ctx.environment):
        return ()
    return ((name, ceiling_stack(stack), False),)


def _early_stands(lad, stack: list) -> bool:
    """Whether the ceiling run early, on ``stack``'s compute fixes and bounding the data fixes,
    is the ceiling of ``stack``."""
    early_run = lad.early_ceiling
    return early_run is not None and early_run[0] == early.compute_key(stack) and early_run[2] is not None


def final_ceiling(lad) -> None:
    """The data-free ceiling of the kept stack: the one run early when its compute fixes
    are the stack's, else a process of its own."""
    if _early_stands(lad, lad.stack):
        lad.early_ceiling[1]["ceiling"] = True
        lad.result["ceiling"] = lad.early_ceiling[1]
        return
    lad.result["ceiling"] = lad.ctx.runner.ceiling(lad.after())
    if lad.result["ceiling"] is not None:
        lad.trials.append(lad.result["ceiling"])
