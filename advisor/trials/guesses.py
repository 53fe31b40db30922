"""What the ladder will most likely run next: the processes advisor.trials.lookahead starts ahead.

A guess is made while a trial runs, before its verdict and before the rules have read its
trace, from the ladder's own choice of rungs (rungs.pick) on the two stacks the verdict can
leave. The rules then re-rank the queue on the new trace and may find what only shows with
the fix in: the preload that the rules ask for once DataLoader workers are in (ADV118 fires
only with workers), a bundle the new ranking puts ahead of deferred syncs, or deferred syncs
lifted over the floor by a faster step. A trial nobody guessed starts fresh, at its whole
start-up (docs/trials.md). So beyond the first rung of
each branch, the guesses name what a kept fix's rules ask for next (a rule's AFTER) and the
rungs the new ranking may put first, the rejected fixes a kept fix may bring back, and a
fix the rules asked for once and may ask for again.
"""

from __future__ import annotations

from advisor import fixes
from advisor.trials import apart, early, rungs, stopping
from advisor.trials.candidates import Candidate, expand
from advisor.trials.state import LadderView


def trial_name(n: int, cand: Candidate) -> str:
    return f"{n:02d}-" + "+".join(_part_name(p) for p in cand.parts)


def _part_name(cand: Candidate) -> str:
    values = [str(v) for v in cand.params.values() if not isinstance(v, (bool, list, dict))]
    return cand.name + (f"-{'-'.join(values)}" if cand.group and values else "")


def likely_next(ladder: LadderView, cand: Candidate | None, name: str = "") -> list[tuple[str, list[Candidate], bool]]:
    """The processes likely to come after cand's trial `name` (None: after the baseline's
    repeat), as (name, stack, profiled), most likely first: the next rung on the stack with
    cand kept (once the queue is spent: a fix skipped on its bound, the batch sizes); the kept
    stack timed again, when its one run could decide the verdict (_Ladder._confirm); the next
    rung on the stack without cand; what the rules ask for once cand is in (follow_ups); the
    processes long to start (rungs.slow_start) two ahead: after next where cand is kept
    (two_ahead), and the rung after the next one where both are rejected; then the rungs a new
    ranking of the queue may put first (alternatives), the fixes the kept one may bring back
    (retries, dropped), and the process after next that starts quickly."""
    if not ladder.ctx.ahead.count:
        return []
    first: list[tuple[str, list[Candidate], bool]] = []
    likely: list[tuple[str, list[Candidate], bool]] = []  # what the kept fix's rules ask for next
    soon: list[tuple[str, list[Candidate], bool]] = []
    later: list[tuple[str, list[Candidate], bool]] = []
    for kept in ((True, False) if cand is not None else (False,)):
        stack, queue = list(ladder.stack), list(ladder.queue)
        if kept and not (cand.group and any(q.group == cand.group for q in queue)):
            stack.append(cand)  # a group's value is kept once the group's last one has run
        if not kept and cand is not None and cand.fallback and "rejected" in cand.fallback_when:
            queue.insert(0, cand.fallback)
        kept_names = ladder.kept_names(stack)
        rode = {p.key for p in rungs.riders_of(cand)} if not kept and cand is not None else set()
        args = ladder.pick_args(_riders(cand) if not kept and cand is not None and not rode else ())
        if rode:  # riders rejected with compile do not ride again: compile alone is the fallback
            args["riders"] = tuple(r for r in args["riders"] if r.key not in rode)
        p = rungs.pick(queue, ladder.tried, kept_names, **args)
        nxt = ladder.n + 1
        bound = [c for c in [*(c for c, _ in p.skipped), *ladder.bound.values()] if c.gain_is_upper_bound
                 and c.key not in ladder.tried and c.name not in kept_names][:1]
        if kept:  # what the kept fix's rules ask for first (preload after workers, deferred syncs after compile)
            # each as the ladder would run it once the rules queue it: compile (AFTER amp)
            # only when nothing else is left to try, riders and all
            for c in follow_ups(ladder, cand, stack, p.tried, kept_names):
                r = rungs.pick([c, *queue], ladder.tried, kept_names, **args).rung  # its fallback if it cannot apply
                if r is not None and c.name in {x.name for x in r.parts}:
                    likely.append((trial_name(nxt, r), [*stack, r], True))
        if kept:   # a data fix kept before another: the data-free ceiling comes first (stopping.ceiling_first)
            data = [c for c in (p.rung, *(g[1][-1] for g in likely)) if c is not None and early.feeds_data(c)]
            first += stopping.early_ceiling_guess(ladder, stack, data[0] if data else None)
        if p.rung is not None:
            first.append((trial_name(nxt, p.rung), [*stack, p.rung], True))
        if not kept and cand is not None and cand.fallback and "rejected" not in cand.fallback_when:
            # refused or crashed, its fallback comes next (a preload refused: precompute)
            first.append((trial_name(nxt, cand.fallback), [*stack, cand.fallback], True))
        if p.rung is not None:
            if not kept:  # next rejected too: the rung after it, when its process is long to start
                soon += [(trial_name(nxt + 1, c), [*stack, c], True)
                         for c in alternatives(p, kept_names, args) if rungs.slow_start(c)]
            if cand is None and len(ladder.ctx.gpus) > 2:
                later += after_the_first(ladder, stack, p, kept_names, args)
            if kept:
                later += [(trial_name(nxt, c), [*stack, c], True)
                          for c in [*alternatives(p, kept_names, args), *bound, *retries(ladder, kept_names),
                                    *dropped(ladder, p.tried, kept_names)]]
                deeper = two_ahead(ladder, [*stack, p.rung], p, kept_names, args)
                # a compile's or a cudnn.benchmark search's start-up is the longest (several
                # times the trial's before it), and so is a batch size's on a compiled stack
                # (a graph of its own): its guess two ahead comes before the rest
                (soon if any(_slow(g[1]) for g in deeper) else later).extend(deeper)
        else:
            # The queue spent: a fix skipped on its bound comes back if the rules ask again on
            # the new trace (deferred syncs after compile, slow to start fresh), else the
            # batch sizes (x4 too, while compile runs: it compiles a graph of its own).
            sizes = _sizes(ladder, [*ladder.result["apart"], *p.apart])
            # the first of them beside the other branch's next rung; the data-free ceiling and
            # the second batch size (run only if the first paid) after those
            after = [(trial_name(nxt, c), [*stack, c], True) for c in bound] + \
                [(apart.name(a), [*stack, a], True) for a in sizes[:2 - len(bound)]]
            after[1:1] = list(stopping.ceiling_guess(ladder, stack))
            first += after[:1]
            soon += after[1:]
            if kept:
                later += [(trial_name(nxt, c), [*stack, c], True)
                          for c in [*retries(ladder, kept_names), *dropped(ladder, p.tried, kept_names)]]
        if kept and len(ladder.ref_runs) == 1:
            first.append((f"{name}-reference", list(ladder.stack), False))
    return unique([*first, *likely, *soon, *later])


def after_the_first(ladder: LadderView, stack: list[Candidate], p: rungs.Pick, kept: set[str], args: dict) -> list:
    """While the repeat runs: the stack stays as it is and its first rung (p.rung) is all but
    certain, so on GPUs side by side the rung after it runs too, on either of its verdicts (the
    GPUs beyond the first rung's idle through the repeat otherwise)."""
    return [*two_ahead(ladder, [*stack, p.rung], p, kept, args),
            *((trial_name(ladder.n + 2, c), [*stack, c], True) for c in alternatives(p, kept, args))]


def two_ahead(ladder: LadderView, stack: list[Candidate], p: rungs.Pick, kept: set[str], args: dict) -> list:
    """The process after next where this fix and the next rung are both kept (`stack` holds
    them): a process's start-up (the script's data, a preloaded dataset, cudnn.benchmark's
    search or a compile) is longer than most trials run once started ahead (docs/trials.md),
    so a guess made one trial ahead is often still starting when its turn
    comes. The batch size once the queue is spent there."""
    q = rungs.pick(p.queue, p.tried, kept | {x.name for x in p.rung.parts}, **args)
    n = ladder.n + 2
    if q.rung is not None:
        return [(trial_name(n, q.rung), [*stack, q.rung], True)]
    sizes = _sizes(ladder, [*ladder.result["apart"], *p.apart, *q.apart])
    return [(apart.name(a), [*stack, a], True) for a in sizes[:1]]


def _sizes(ladder: LadderView, cands: list[Candidate]) -> list[Candidate]:
    """The batch sizes to measure apart, smallest first; none that cannot apply to the script
    (a batch not made by a DataLoader: its process would start for a trial that is skipped)."""
    ok = [c for c in cands if not rungs.fix_for(c).not_applicable(ladder.ref_config, ladder.ctx.environment,
                                                                     c.params)]
    return sorted(ok, key=lambda c: c.params.get("factor") or 0)


def _slow(stack: list[Candidate]) -> bool:
    """A process long to start: its last fix's (rungs.slow_start), or a batch size measured
    apart on a compiled stack, which compiles a graph of its own. (Guessed only once compile,
    the last rung, ran, they came well after the ladder's end: docs/trials.md.)"""
    last = stack[-1]
    return rungs.slow_start(last) or (fixes.trait(last.name, "apart") and any(rungs.compiles(c) for c in stack))


def unique(gs: list[tuple[str, list[Candidate], bool]]) -> list[tuple[str, list[Candidate], bool]]:
    """Each process once: the first of the guesses on the same stack and profiling."""
    out: list[tuple[str, list[Candidate], bool]] = []
    for g in gs:
        if all(_differs(g, o) for o in out):
            out.append(g)
    return out


def _differs(a, b) -> bool:
    """Two guesses are two processes: another stack, or profiled where the other is not."""
    return [c.key for c in a[1]] != [c.key for c in b[1]] or a[2] != b[2]


def follow_ups(ladder: LadderView, cand: Candidate, stack: list[Candidate], tried: set[str], kept: set[str]) -> list[Candidate]:
    """What the rules ask for once cand's fix is in: the fix of every rule whose AFTER names
    one of cand's fixes (ADV118: the loop still waits with DataLoader workers -> preload the
    dataset; ADV110: a sync per step, once compile made the step short -> defer it), neither
    tried nor kept. Whether it applies to the script is rungs.pick's to say (compile's CUDA
    graphs do not apply to a step that accumulates gradients: its default mode does)."""
    names = {p.name for p in cand.parts}
    out = []
    for rule in ladder.rules():
        if not (rule.fix and names & set(rule.after)):
            continue
        for c in expand({"intervention": rule.fix}, rule.code, None, ladder.ctx.environment)[:1]:
            if not (c.key in tried or c.name in kept or (ladder.ctx.only and c.name not in ladder.ctx.only)):
                out.append(c)
    return out


def alternatives(p: rungs.Pick, kept: set[str], args: dict) -> list[Candidate]:
    """The rung a new ranking of the queue may put first on the same stack: the one pick would
    choose after p.rung. (The first fix skipped on its bound is guessed beside it: the new
    trace's faster step may lift its gain over the floor, as deferred syncs after the small
    safe fixes.)"""
    second = rungs.pick(p.queue, p.tried, kept, **args).rung
    return [second] if second is not None else []


def retries(ladder: LadderView, kept: set[str]) -> list[Candidate]:
    """Fixes rejected as not faster that a kept fix may bring back (rungs.worth_retrying: the
    step 1.5x faster, or the GPU far less idle, as deferred syncs after compile; unguessed,
    each starts fresh). Those that would ride with compile last: they come back alone only
    once the step is no longer host-bound (AMP after the small safe fixes)."""
    slow = [(ladder.rejected[k], rungs.rides(ladder.rejected[k].name, at)) for k, at in ladder.slow.items()
            if k in ladder.rejected and ladder.rejected[k].name not in kept]
    return [c for c, rides in slow if not rides] + [c for c, rides in slow if rides]


def dropped(ladder: LadderView, tried: set[str], kept: set[str]) -> list[Candidate]:
    """Fixes once queued that the rules did not ask for again on a kept stack's trace, never
    tried: a finding near its threshold may fire again on the next one (it flickers as the
    stack changes: docs/trials.md). The most recently dropped first."""
    return [c for k, c in reversed(ladder.dropped.items()) if k not in tried and c.name not in kept
            and not fixes.trait(c.name, "last")][:1]


def _riders(cand: Candidate) -> tuple:
    """Rejected, a fix that cuts GPU time most likely was so on a host-bound step: it rides."""
    return tuple(p for p in cand.parts if fixes.trait(p.name, "rides_with_compile"))
