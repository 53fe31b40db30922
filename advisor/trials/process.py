"""One trial process and what the ladder knows of its run: the trial's context, its spec, the
child started (ahead where a guess matched), a short script's trial timed and profiled apart, and
the group's best so far."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from advisor import fixes, measure, results, specs
from advisor.contracts import TrialRecord
from advisor.trials import compile_book
from advisor.trials.candidates import Candidate
from advisor.trials.lookahead import quiet_s


class Pending(NamedTuple):
    """The best value so far of a group of competing candidates (worker counts), kept once the
    group's last value has run."""
    cand: Candidate
    runs: list[dict]
    analysis: dict | None
    model: object
    record: TrialRecord


class TrialRunner:
    """How the ladder runs a trial and reads it: the script in a child process (run_child), the
    rules on the trial's trace, the data-free ceiling's process. Tests hand the ladder a subclass
    that times nothing (tests/test_trials_ladder.py)."""

    def process(self, ctx: TrialContext, name: str, stack: list[Candidate], profile: bool = True,
                guesses: list[tuple[str, list[Candidate], bool]] | None = None) -> tuple[dict, dict | None, object]:
        """One trial process: (child result, its trace's analysis, its trace model)."""
        return _run(ctx, name, stack, profile, guesses)

    def findings(self, model, analysis: dict, config: dict, environment: dict, ctx: TrialContext,
                 rules: list | None = None) -> list:
        """What the rules find on a trial's trace."""
        found, _ = results.run_findings(model, analysis, config, environment, ctx.opts.rules_dirs, rules=rules,
                                         thresholds=ctx.opts.thresholds)
        return found

    def ceiling(self, after, name: str | None = None) -> dict | None:
        """The data-free ceiling's record (trials/ceiling.py): after the ladder, or run early
        under another name to bound the data fixes left (trials/early.py)."""
        from advisor.trials.ceiling import NAME, measure_ceiling

        return measure_ceiling(after, name or NAME)


@dataclass
class Slot:
    """A process run side by side with others (trials.gpus): its GPU (CUDA_VISIBLE_DEVICES; None:
    every GPU visible, as the baseline ran) and what stops it from another thread, as Ctrl-C
    would (run_child's signals: a ``count``; its ``pgid`` while it runs)."""
    gpu: str | None
    cancel: object


@dataclass
class Pace:
    """How long the processes take, for the budget (TrialContext.out_of_budget): each finished
    process's seconds (the ladder's), and what the patch's plain-python run should take: the
    kept stack's process, its samples computed as the user's run will (not loaded from the
    analyze's cache); None: as the others."""
    took: list[float] = field(default_factory=list)
    verify_s: float | None = None
    compile_s: list[float] = field(default_factory=list)   # torch.compile's seconds in each process that compiled
    # seconds from spawn to python and torch imported in each process started cold (not from a
    # spare): the baseline's, a ddp trial's
    cold_s: list[float] = field(default_factory=list)

    def compile_guess(self) -> float:
        """What a process that compiles should take on top of the others: the most a process of
        this analyze compiled for, or COMPILE_GUESS_S before any did."""
        return max(self.compile_s, default=COMPILE_GUESS_S)

    def cold_start(self) -> float:
        """What a process started cold (the patch's verification, a ddp trial) pays before its
        script that one started from a spare does not: the most a cold process of the analyze
        took to import python and torch."""
        return max(self.cold_s, default=0.0)

    def extra_for(self, names: list[str]) -> float:
        """The seconds a process of these fixes takes on top of the others: a compile where one
        compiles (compile_guess), a cold start where one cannot start from a spare (Fix.fresh:
        ddp's ranks under torchrun)."""
        return (self.compile_guess() if any(fixes.trait(n, "compiles") for n in names) else 0.0) \
            + (self.cold_start() if any(fixes.trait(n, "fresh") for n in names) else 0.0)

    def verification_after(self, kept: dict) -> float:
        """What the patch's plain-python run should take once ``kept`` is the stack's process:
        as long as it, started cold where it started from a spare, its samples computed where
        it loaded them from the analyze's cache."""
        ahead = kept.get("started_warm") or kept.get("started_held")
        return float(kept["elapsed_s"]) + measure.samples_cache_s(kept) + (self.cold_start() if ahead else 0.0)

    def note(self, child: dict, compiled: bool = False) -> None:
        """A finished process's figures: its start-up where it started cold, and its compile
        where a fix of its stack compiled the model (``compiled``: a library's incidental
        compile elsewhere says nothing of the model's)."""
        if not child.get("started_warm") and not child.get("started_held"):
            install = measure.startup_s(child).get("install")
            if isinstance(install, (int, float)) and install > 0:
                self.cold_s.append(float(install))
        if compiled and isinstance(child.get("compile_s"), (int, float)) and child["compile_s"] > 0:
            self.compile_s.append(float(child["compile_s"]))


# torch.compile's seconds before a process of the analyze measured them: the low end of the
# corpus' first compiles (docs/trials.md, "Cost and budget", has the figures)
COMPILE_GUESS_S = 30.0


@dataclass
class TrialContext:
    script: str
    script_args: list[str]
    run_dir: Path
    opts: specs.AnalyzeOptions
    baseline: dict                  # the baseline's child result
    baseline_findings: list
    environment: dict
    budget_s: float = 240.0         # the whole analyze's, from `started` (its start: advisor.pipeline)
    max_trials: int = 16
    trial_timeout: float = 900.0
    only: set[str] | None = None
    applied: list[dict] = field(default_factory=list)  # --apply: in every run, under the stack
    progress: object = None         # callable(str) for one-line progress
    stdout_to_stderr: bool = False  # --json: the script's output must not mix with advisor's
    started: float = field(default_factory=time.monotonic)
    # started during the baseline (trials.prep): a runner.ahead.WarmChild for the first trial
    # process, and a HeldChild for the repeat; taken by the ladder's Lookahead
    started_ahead: tuple = (None, None)
    lookahead: int | None = None    # guesses started ahead of each trial (None: by the host, lookahead.py)
    split_profile: dict | None = None  # a short script: profiled trials are profiled in a run of their own (advisor.schedule)
    ahead: object = None            # lookahead.Lookahead, while the ladder runs
    # Ctrl-C was pressed (advisor.commands.analyze): no process starts after it; None: only a
    # process that Ctrl-C reached tells (run_child forwards it)
    interrupted: Callable[[], bool] | None = None
    runner: TrialRunner = field(default_factory=TrialRunner)   # how a trial runs (a fake one in tests)
    allow: frozenset = frozenset()  # --allow: what a fix may override of the user's choices (Fix.allowed_by)
    gpus: list[str] = field(default_factory=list)  # the trials' GPUs, several: side by side (trials.gpus)
    slot: Slot | None = None        # this process's GPU and its stop, side by side (trials.gpus)
    pace: Pace = field(default_factory=Pace)   # how long processes take, for the budget

    def out_of_budget(self, extra_s: float = 0.0, changes_stack: bool = True, room_s: float = 0.0) -> bool:
        """No process starts that would not end inside the budget, as long as the processes so
        far took (their median; the baseline's before any) and ``extra_s`` of its own (a
        compile), with the patch's verification still to come. A process whose verdict may
        change the stack is followed by the verification of that stack, at least as long as
        itself; one that does not (the data-free ceiling) has the verification after it on one
        GPU, beside it on several. ``room_s``: a later process's seconds it must leave (the
        scale-out that goes last: _Ladder.out_of_budget)."""
        took, verify_s = self.pace.took, self.pace.verify_s
        per = (statistics.median(took) if took else float(self.baseline.get("elapsed_s") or 0.0)) + extra_s
        verify = per if verify_s is None else verify_s
        if changes_stack:
            left = per + max(verify, per)
        else:
            left = max(per, verify) if len(self.gpus) > 1 else per + verify
        return time.monotonic() - self.started + left + room_s > planned_end(self.budget_s)


# The whole analyze's default budget, by the GPUs its trials run on side by side: side by side,
# the guesses take the next processes' start-up off the ladder's chain of verdicts.
DEFAULT_BUDGET_S = {1: 240.0, 2: 180.0, 4: 120.0}


# What the processes are planned to fill of the budget: the estimates they start on (the median
# process, a compile's guess, the verification's) err either way, and the verification's analysis
# and the report come after the last; planned to its very end, half the analyzes end past it.
PLANNED_FRACTION = 0.95


def planned_end(budget_s: float) -> float:
    """The seconds from the analyze's start by which its processes are planned to end."""
    return budget_s * PLANNED_FRACTION


def default_budget_s(gpus: int) -> float:
    """--budget's default for trials on this many GPUs side by side (1: one after another)."""
    return DEFAULT_BUDGET_S[max(k for k in DEFAULT_BUDGET_S if k <= max(1, gpus))]


def finished(child: dict) -> bool:
    """Whether a run Ctrl-C reached had measured all it was asked to first (then it is kept)."""
    return child.get("stage") == "measured" and bool((child.get("exit") or {}).get("stopped_by_advisor"))


def _spec(ctx: TrialContext, name: str, stack: list[Candidate], profile: bool = True, first: bool | None = None) -> dict:
    """first (by default: profiled): the trial's first process, its last candidate new. When
    every part of that candidate refuses to apply, the run stops there (stop_if_refused): the
    rest of it would time the stack before it again. A re-timing runs to its end whatever."""
    from advisor.patch.switches import trial_args

    applied = [*ctx.applied, *(s for c in stack for s in c.as_specs())]
    # a fix in the script's own form turns on the script's switch on its command line
    spec = specs.trial_spec(ctx.script, trial_args(ctx.script_args, applied), ctx.run_dir, ctx.opts, name,
                            applied, profile, quiet_s(ctx.lookahead))
    if (profile if first is None else first) and stack:
        spec["stop_if_refused"] = sorted({p.name for p in stack[-1].parts})
    if ctx.slot is not None and ctx.slot.gpu is not None:   # a GPU of its own (trials.gpus), set before the script's first line
        spec["environ"] = {**spec.get("environ", {}), "CUDA_VISIBLE_DEVICES": ctx.slot.gpu}
    return spec


def _run(ctx: TrialContext, name: str, stack: list[Candidate], profile: bool = True,
         guesses: list[tuple[str, list[Candidate], bool]] | None = None,
         first: bool | None = None) -> tuple[dict, dict | None, object]:
    """One trial process. profile=False: a timing-only re-run (a confirmation round).
    guesses: (name, stack, profile) of the processes likely to come next, started ahead while
    this one runs (advisor.trials.lookahead); None keeps the guesses already made."""
    from advisor.runner.parent import run_child

    if profile and ctx.split_profile:
        return _run_split(ctx, name, stack, guesses)
    spec = _spec(ctx, name, stack, profile, first)
    held, warm = ctx.ahead.take(spec)
    ctx.ahead.guess(spec, None if guesses is None else [_spec(ctx, *g) for g in guesses])
    try:
        child = run_child(spec, timeout=ctx.trial_timeout, step_timeout=ctx.opts.step_timeout,
                          stdout_to_stderr=ctx.stdout_to_stderr, warm=warm, held=held,
                          stall_timeout=ctx.opts.stall_timeout,
                          on_progress=ctx.ahead.on_stage,
                          signals=ctx.slot.cancel if ctx.slot is not None else None)
    finally:
        ctx.ahead.resume()
    ctx.ahead.note(child)
    compile_book.settle(child, spec)   # a compile it loaded from the shared cache is costed cold
    names = [*(a["name"] for a in ctx.applied), *(p.name for c in stack for p in c.parts)]
    changes_batch = any(fixes.trait(n, "changes_batch") for n in names)
    measure.hold_batch(child, ctx.baseline, changes_batch)
    if child.get("interrupted"):  # Ctrl-C reached the trial: the ladder stops (_Ladder.process)
        if not finished(child):
            return child, None, None      # cut short: discarded
        # it had measured everything when Ctrl-C came (it was stopping): kept
        child.update(status="complete", incomplete_reasons=[])
    analysis, model, _err = results.analyze_trace_files(ctx.run_dir, child.get("trace_files") or [])
    results.merge_child_results(analysis, child)
    return child, analysis, model


def _run_split(ctx: TrialContext, name: str, stack: list[Candidate], guesses) -> tuple[dict, dict | None, object]:
    """A short script's trial: timed in one run, profiled in another (advisor.schedule)."""
    from advisor.runner.parent import run_child

    child, _, _ = _run(ctx, name, stack, False, guesses, first=True)
    if child.get("status") != "complete" or child.get("interrupted") or (ctx.interrupted and ctx.interrupted()) \
            or child.get("refused"):
        return child, None, None  # after Ctrl-C, no profile run: the timed run is what there is
    spec = {**_spec(ctx, name, stack, True), **ctx.split_profile, "measure_steps": 0,
            "run_dir": str(Path(ctx.run_dir) / "trials" / name / "profile")}
    prof = run_child(spec, timeout=ctx.trial_timeout, step_timeout=ctx.opts.step_timeout,
                     stdout_to_stderr=ctx.stdout_to_stderr, stall_timeout=ctx.opts.stall_timeout,
                     on_progress=ctx.ahead.on_stage, signals=ctx.slot.cancel if ctx.slot is not None else None)
    child["trace_files"] = prof.get("trace_files") or []
    analysis, model, _err = results.analyze_trace_files(ctx.run_dir, child["trace_files"])
    results.merge_child_results(analysis, child)
    return child, analysis, model
