"""Trials: re-run the unmodified script with each proposed fix applied at run time, keep
what is faster beyond noise with healthy loss, and stack the winners.

The ladder is greedy, as a performance engineer works: candidates ranked by the rules'
estimated gain are tried one at a time on top of the fixes accepted so far; after each
accepted fix the new trace is analysed and the rules re-run, so costs that only show
once the first ones are gone (launch-bound after AMP, say) join the queue. Fixes that
change training dynamics (batch size) are measured apart, on top of the final stack.
A kept fix's run is the next reference as it is; it is timed again only when a verdict
could turn on that one run (advisor.trials.verdicts.retime_reference).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

from advisor import engine, failures, fixes, measure
from advisor.contracts import TrialRecord
from advisor.runtime import SAMPLES_VARY
from advisor.trials import apart, compile_book, guesses, reference, rungs, scaling, script_forms, stopping
from advisor.trials.candidates import Candidate, candidates_from_findings
from advisor.trials.ceiling import NAME as CEILING
from advisor.trials.gpus import ParallelRunner
from advisor.trials.lookahead import Lookahead, default_count
from advisor.trials.process import Pending, TrialContext
from advisor.trials.state import CONFIRM_ROUNDS, CUT_SHORT, After, Interrupted, Reference
from advisor.trials.verdicts import Verdict, judge, regime_noise, regroup, relative, retime_reference


def run_trials(ctx: TrialContext, on_final_stack=None) -> dict:
    """Run the ladder; returns {"noise", "threshold", "trials": [...], "stack": [...], "apart": [...],
    "interrupted"}. After Ctrl-C (a process it reached, or ctx.interrupted) nothing new starts:
    the trial that was running is recorded as not run, every verdict reached before it is kept,
    and so is the stack (a group's best value so far included). on_final_stack: side by side,
    called with (the result, the ParallelRunner) once the stack is final, before the
    measurements on top of it (advisor.pipeline verifies the patch beside them)."""
    side_by_side = None
    count = default_count(ctx.baseline, ctx.lookahead)
    if len(ctx.gpus) > 1:   # the guesses run to the end on the other GPUs, one each (trials.gpus)
        side_by_side = ctx.runner = ParallelRunner(ctx.runner, ctx.gpus)
        count = len(ctx.gpus) - 1
    ctx.ahead = Lookahead(ctx.run_dir, count, str(Path.cwd()), ctx.stdout_to_stderr, *ctx.started_ahead)
    ctx.ahead.note(ctx.baseline)
    # the baseline's own compile, where it shares the trials' cache (--cache DIR): the cold cost
    # of the graphs every trial without a program change then loads
    compile_book.settle(ctx.baseline, {"script": str(Path(ctx.script).absolute()),
                                       "argv": [ctx.script, *ctx.script_args], "interventions": []})
    ctx.started_ahead = (None, None)
    try:
        result = _Ladder(ctx, on_final_stack).run()
        result["lookahead"] = ctx.ahead.summary()
        if side_by_side is not None:
            result["gpus"] = side_by_side.summary()
        return result
    finally:
        if side_by_side is not None:
            side_by_side.close()   # guesses still running
        ctx.ahead.close()  # what was started for processes that will not come


class _Ladder:
    """The state of one ladder: the kept stack, its reference runs, the pooled noise, the queue."""

    def __init__(self, ctx: TrialContext, on_final_stack=None):
        self.ctx = ctx
        self.on_final_stack = on_final_stack
        self.say = ctx.progress or (lambda s: None)
        self.trials: list[dict] = []
        self.result = {"noise": None, "threshold": None, "trials": self.trials, "stack": [], "apart": [],
                       "interrupted": False, "processes": 1}
        self.base = ctx.baseline
        ctx.pace.note(ctx.baseline)   # started cold: what the verification's start-up will take
        self.stack: list[Candidate] = []
        self.groups: list[list[dict]] = []   # every configuration timed more than once: pooled noise
        self.noise = 0.0
        self.ref_runs: list[dict] = []
        self.ref_config: dict = self.base.get("config") or {}
        self.facts: dict = {}   # what trials found of the script itself, kept in ref_config (_learn_refusal)
        self.loss_ref = self.base
        self.queue: list[Candidate] = []
        self.tried: set[str] = set()
        # Values of one setting (worker counts) compete: the best accepted one is kept once
        # the last of them has run. group -> (candidate, runs, analysis, model, record)
        self.pending: dict[str, Pending] = {}
        # Rejected as not faster: (the reference's ms/step it was judged against, the GPU's
        # idle share of its own trace's step). Worth another try once the bottleneck has moved
        # (rungs.worth_retrying).
        self.slow: dict[str, tuple[float, float | None]] = {}
        self.rejected: dict[str, Candidate] = {}  # the fixes in `slow`, by key
        self.retried: set[str] = set()
        self.learned: set[str] = set()  # queued from a rejected trial's trace (_learn)
        self.bound: dict[str, Candidate] = {}  # skipped on their bound: the rules may ask again
        self.dropped: dict[str, Candidate] = {}  # queued once, not asked for on the kept stack's trace
        self.n = 0
        self._rules: list | None = None
        # The data-free ceiling run early (_ceiling_first): (its stack's compute fixes, its
        # record, the most a data fix can take off the step on them; None: no bound).
        self.early_ceiling: tuple[tuple, dict, float | None] | None = None

    def rules(self) -> list:
        """The rule catalogue (--rules directories too), loaded once for the ladder: the requeue
        after each trial runs it, and the guesses read its AFTER."""
        if self._rules is None:
            self._rules = engine.load_rules(self.ctx.opts.rules_dirs)
        return self._rules

    def process(self, name: str, stack: list[Candidate], profile: bool = True, guesses=None):
        """One process (ctx.runner); Interrupted when Ctrl-C came before it or cut it short."""
        if self.stopping():
            raise Interrupted(name)
        self.result["processes"] += 1
        child, analysis, model = self.ctx.runner.process(self.ctx, name, stack, profile, guesses)
        if child.get("status") == "complete" and isinstance(child.get("elapsed_s"), (int, float)):
            self.ctx.pace.took.append(float(child["elapsed_s"]))   # how long the next ones should take (out_of_budget)
            self.ctx.pace.note(child, compiled=any(fixes.trait(p.name, "compiles") for c in stack for p in c.parts))
        if child.get("interrupted"):
            self.result["interrupted"] = True
        if self.stopping() and child.get("status") != "complete":
            raise Interrupted(name)
        return child, analysis, model

    def stopping(self) -> bool:
        """Whether Ctrl-C was pressed: the ladder keeps what it has and starts nothing more.
        ctx.interrupted is asked every time (a second press stops advisor at once from there)."""
        if self.ctx.interrupted is not None and self.ctx.interrupted():
            self.result["interrupted"] = True
        return self.result["interrupted"]

    def _pool(self, *runs_lists: list[dict]) -> None:
        self.groups = regroup(self.groups, *runs_lists)
        self.noise = regime_noise(self.groups, self.ref_runs) or measure.pooled_noise(self.groups) or self.noise

    def run(self) -> dict:
        try:
            self.queue = script_forms.add(candidates_from_findings(self.ctx.baseline_findings, self.ctx.environment,
                                                                   self.ctx.only),
                                          self.ctx.script, self.ctx.script_args, self.ctx.baseline)
            self._expect()
            reference.measure_reference(self)
            if self.result.get("unsettled") and self.ctx.only is None:   # nothing can be judged: nothing more runs
                return self.result
            while self.queue and not self.stopping():
                stopping.stop_early(self)
                cand = self._pick()
                if cand is None:
                    continue
                self._trial(cand)
                self.settle_groups()
            # no figure where nothing was timed twice (a failed repeat and no re-timing since)
            measured_noise = self.noise if measure.pooled_noise(self.groups) is not None else None
            self.result["noise"], self.result["threshold"] = measured_noise, measure.acceptance_threshold(self.noise)
            if not self.stopping() and self.on_final_stack is not None and isinstance(self.ctx.runner, ParallelRunner):
                # no rung comes now: the guesses on one give their GPUs back
                self.ctx.runner.keep_guesses({apart.name(c) for c in self.result["apart"]} | {CEILING})
                self.on_final_stack(self.result, self.ctx.runner)
            if not self.stopping():
                after = dataclasses.replace(self.after(), then=stopping.ceiling_guess(self))
                measured = apart.measure_all(after, self.result["apart"], self.overridden())
                self.trials.extend(measured)
                self.result["apart"] = measured
            if not self.stopping():
                stopping.final_ceiling(self)
        except KeyboardInterrupt:  # Ctrl-C (Interrupted: a process it cut short, or one not started)
            self.result["interrupted"] = True
        if self.result["interrupted"]:
            # a group's best value so far was accepted: it is kept (its other values are not run)
            for group in list(self.pending):
                winner = self.pending.pop(group)
                self._commit(winner.cand, winner.runs, winner.analysis, winner.model)
            if self.groups:  # the noise the verdicts so far were judged at
                self.result["noise"], self.result["threshold"] = self.noise, measure.acceptance_threshold(self.noise)
        return self.result

    def _expect(self) -> None:
        """Say how long the trials should take: a process each for the repeat, the fixes the
        baseline's findings ask for and the data-free ceiling, each as long as the baseline's
        process took, within the budget (trial_summary.expected_s). Compiles and what the rules
        ask for on later traces come on top; lookahead and cached compiles take some off."""
        per = self.base.get("elapsed_s")
        if not isinstance(per, (int, float)) or per <= 0:
            return
        n = 2 + len({c.key for c in self.queue})
        left = self.ctx.budget_s - (time.monotonic() - self.ctx.started)   # of the whole analyze's budget
        expected = max(0.0, min(n * per, left))
        self.result["expected_s"] = round(expected, 1)
        capped = " (the budget)" if expected < n * per else ""
        took = f"{expected / 60:.0f} min" if expected >= 90 else f"{expected:.0f} s"
        side = f"; less, {len(self.ctx.gpus)} GPUs side by side" if len(self.ctx.gpus) > 1 else ""
        self.say(f"trials: about {took}{capped}: {n} processes of about {per:.0f} s (the repeat, {n - 2} "
                 f"fix{'es' if n - 2 != 1 else ''}, the data-free ceiling), compiles on top{side}")

    def settle_groups(self) -> None:
        """A group's best value joins the stack once none of its values is left to try (tried,
        or dropped by a requeue): checked after every trial, for every group, so that a kept
        value is not lost when a later commit requeues the group's last value away
        (docs/trials.md, "What shaped the ladder")."""
        left = {c.group for c in self.queue if c.key not in self.tried}   # a value asked for twice counts once
        for group in [g for g in self.pending if g not in left]:
            winner = self.pending.pop(group)
            self._commit(winner.cand, winner.runs, winner.analysis, winner.model)

    def after(self) -> After:
        """The ladder's outcome as the measurements on top of it see it."""
        return After(stack=list(self.stack), base=self.base, environment=self.ctx.environment,
                     reference=Reference(self.ref_runs, self.loss_ref, self.noise), process=self.process,
                     out_of_budget=self.ctx.out_of_budget, ahead=self.ctx.ahead.count, only=self.ctx.only,
                     applied=tuple(self.ctx.applied))

    def _pick(self) -> Candidate | None:
        """The next rung (rungs.pick), its skipped fixes recorded and its notes said."""
        p = rungs.pick(self.queue, self.tried, self.kept_names(), **self.pick_args())
        self.queue, self.tried = p.queue, p.tried
        self.result["apart"] += p.apart
        for cand, why in p.skipped:
            self._skipped(cand, why)
            if cand.gain_is_upper_bound:
                self.bound[cand.key] = cand
        for line in p.notes:
            self.say(line)
        return p.rung

    def pick_args(self, riders: tuple = ()) -> dict:
        """rungs.pick's arguments; riders: more fixes to ride with compile, each once (a guess
        on a pair just rejected would add channels_last twice, rejected alone before too)."""
        each = {r.key: r for r in (*self._riders(), *riders)}
        return dict(config=self.ref_config, environment=self.ctx.environment, only=self.ctx.only,
                    retried=frozenset(self.retried), slow=frozenset(self.slow),
                    apart=frozenset(fixes.with_trait("apart")) | frozenset(self.overridden()),
                    floor_ms=self.floor_ms(), riders=tuple(each.values()))

    def overridden(self) -> dict[str, str]:
        """{fix: the user's choice it would override} for the fixes measured apart for it: the
        baseline's config shows the choice (Fix.overrides) and --allow does not name its word."""
        config = self.base.get("config") or {}
        return {f.name: why for f in fixes.all_fixes() if f.allowed_by not in self.ctx.allow
                and (why := f.overrides(config))}

    def floor_ms(self) -> float:
        """The least gain confirmation rounds could still accept: at the noise of the
        reference's own regime, 0 (the 3% floor) while nothing there was timed twice: the
        rounds measure it then. A floor borrowed from another regime (the loader-bound stacks')
        would reject small real gains on a fast compiled step."""
        noise = regime_noise(self.groups, self.ref_runs) or 0.0
        return measure.acceptance_threshold(noise, 1 + CONFIRM_ROUNDS, 1 + CONFIRM_ROUNDS) * self.ref_ms()

    def _riders(self) -> list[Candidate]:
        """Fixes rejected on a host-bound step and not queued again: they ride with compile."""
        return [self.rejected[k] for k, at in self.slow.items()
                if k in self.tried and rungs.rides(self.rejected[k].name, at)]

    def own_extra(self, cand: Candidate) -> float:
        """The seconds a process of cand on the stack takes on top of the others (Pace.extra_for)."""
        return self.ctx.pace.extra_for([p.name for c in [*self.stack, cand] for p in c.parts])

    def out_of_budget(self, cand: Candidate) -> bool:
        """No process of cand starts that would not end inside the budget with its own extra
        seconds, leaving the room a fix that scales out still needs after it."""
        return self.ctx.out_of_budget(self.own_extra(cand), room_s=self._scale_out_room(cand))

    def _scale_out_room(self, cand: Candidate) -> float:
        """A fix that scales out (ddp) goes last, and on a machine of several GPUs it is most
        often the largest gain of all: a process of another fix starts only where the scale-out's
        own still fits after it (as long as a process, its cold start and compile on top), so a
        short budget is not spent on the small fixes before it."""
        if fixes.trait(cand.name, "scales_out"):
            return 0.0
        waiting = next((c for c in self.queue if fixes.trait(c.name, "scales_out") and c.key not in self.tried), None)
        if waiting is None:
            return 0.0
        took = self.ctx.pace.took
        per = statistics.median(took) if took else float(self.base.get("elapsed_s") or 0.0)
        return per + self.ctx.pace.extra_for([p.name for c in [*self.stack, waiting] for p in c.parts])

    def kept_names(self, stack: list[Candidate] | None = None) -> set[str]:
        return {a["name"] for a in self.ctx.applied} | {p.name for c in (self.stack if stack is None else stack)
                                                         for p in c.parts}

    def _trial(self, cand: Candidate) -> None:
        ctx = self.ctx
        if self.stopping():  # Ctrl-C since the loop looked: not started, not recorded
            return
        if self.out_of_budget(cand) or self.n >= ctx.max_trials:
            self.trials.append({"name": cand.key, "fix": cand.name, "status": "not run",
                                "reason": "trial budget spent", "interventions": []})
            return
        mod = rungs.fix_for(cand)
        self.n += 1
        name = guesses.trial_name(self.n, cand)
        self.say(f"trial {name}: {mod.describe(cand.params)}")
        try:
            child, analysis, model = self.process(name, [*self.stack, cand],
                                                  guesses=guesses.likely_next(self, cand, name))
        except Interrupted:
            self.trials.append({"name": name, "fix": cand.name, "params": cand.params, "status": "not run",
                                "reason": CUT_SHORT, "origin": cand.origin,
                                "interventions": [c.key for c in [*self.stack, cand]]})
            raise
        runs = [child]
        rec: TrialRecord = {"name": name, "fix": cand.name, "params": cand.params, "origin": cand.origin,
               "description": mod.describe(cand.params), "changes_numerics": mod.changes_numerics,
               "interventions": [c.key for c in [*self.stack, cand]], **measure.trial_figures(child, analysis, self.base)}
        if cand.members:
            rec["members"] = [m.key for m in cand.members]
        if cand.note:
            rec["rung_note"] = cand.note
        # Losses are held to the baseline's: with a kept fix that changes numerics (AMP) in the
        # stack, at that fix's tolerance (held to a safe fix's 10%, a safe fix on top of AMP
        # would be rejected for AMP's own bf16 losses).
        numerics = mod.changes_numerics or any(rungs.fix_for(c).changes_numerics for c in self.stack)
        status, reason, gain, used = self._confirm(name, cand, runs, numerics)
        rec.update(status=status, reason=reason, gain_vs_previous=gain, threshold=used,
                   runs=len(runs), reference_runs=len(self.ref_runs), noise_at_verdict=self.noise)
        if status == "failed":
            rec["failure"] = failures.under_fixes(failures.of_trial(runs, reason), self.base,
                                                  [p.key for p in cand.parts])
        if len(runs) > 1:
            rec["step_time_ms"] = measure.mean_step_ms(runs)
            rec["speedup_vs_baseline"] = measure.plus_one(measure.pooled_gain(runs, self.groups[0]))
            rec["samples_per_s"] = measure.samples_per_s(child, rec["step_time_ms"])
        # a fix that launches a process per GPU is judged against one GPU too (trials/scaling.py)
        if fixes.known(cand.name) and fixes.get(cand.name).processes(cand.params) and not self.stopping():
            try:
                self._scaling(name, cand, rec)
            except Interrupted:
                pass  # the trial's own verdict stands, without its scaling
        self.trials.append(rec)
        if rec["status"] == "skipped":
            self._learn_refusal(name, rec["reason"])
        if rec["status"] == "accepted":
            if cand.group is None:
                self._commit(cand, runs, analysis, model)
            else:
                self._compete(cand, runs, analysis, model, rec, used)
        riders = rungs.riders_of(cand)
        if rec["status"] in ("rejected", "failed"):
            for part in riders:  # they rode with compile: that was their retry (a crash with it too)
                self.slow.pop(part.key, None)
        if rec["status"] == "rejected" and not rec["reason"].startswith("numerics") and not self.stopping():
            for part in cand.parts:  # a bundle's members come back one by one from the rules
                if part not in riders:
                    self.slow[part.key] = (self.ref_ms(), rungs.idle_share(analysis))
                    self.rejected[part.key] = part
            self._learn(child, analysis, model, name)
        self._fall_back(cand, rec["status"])
        if any(p.key in self.retried for p in cand.parts):
            rec["reason"] += " (tried again after the stack changed)"

    def _scaling(self, name: str, cand: Candidate, rec: dict) -> None:
        """The ddp trial against one GPU (advisor.trials.scaling); a DataParallel script's
        one-GPU run is a reference record of its own, before the trial's."""
        found, ref = scaling.measure_scaling(self.after(), name, rec, int(cand.params.get("nproc") or 2))
        if ref is not None:
            self.trials.append(ref)
        if found is not None:
            rec["scaling"] = found
            rec["reason"] += "; " + scaling.describe(found)

    def _skipped(self, cand: Candidate, why: str) -> None:
        """The record of a fix that cannot apply to this script (no process ran)."""
        self.trials.append({"name": cand.key, "fix": cand.name, "params": cand.params, "status": "skipped",
                            "reason": why, "origin": cand.origin, "interventions": []})

    def _learn_refusal(self, name: str, reason: str) -> None:
        """A refusal about the script's dataset, not about the fix (a sample read twice
        differs): the fixes that need repeatable samples read it in the config rungs.pick
        judges them on, and are skipped without a process of their own."""
        why = next((part for part in reason.split("; ") if SAMPLES_VARY in part), None)
        if why is not None:
            self.facts["samples"] = {"value": {"repeatable": False, "why": why.split(": ")[0], "found_by": name}}
            self.ref_config = {**self.ref_config, **self.facts}

    def judged_alone(self) -> set[str]:
        """The keys of the fixes trialled as a rung of their own (rungs.split): the last of a
        record's stack, where it ran one fix."""
        return {t["interventions"][-1] for t in self.trials if t.get("interventions") and not t.get("members")
                and not t.get("apart") and t.get("status") not in ("skipped", "not run")}

    def _fall_back(self, cand: Candidate, status: str) -> None:
        """The candidate's fallback runs next when the verdict is one it falls back on
        (cannot apply, crashed; for compile's reduce-overhead also not accepted). A rung of
        several fixes that failed is split: each of its fixes not judged alone yet runs alone
        next (rungs.split), the one that ranked first first."""
        alone = rungs.split(cand, self.judged_alone(), self.kept_names()) if status == "failed" else []
        if alone:
            self.say(f"{cand.key} failed: trying {', '.join(m.key for m in alone)} alone")
            for m in reversed(alone):
                self.tried.discard(m.key)
                self.queue.insert(0, m)
            return
        if cand.fallback and status in cand.fallback_when:
            self.say(f"{cand.key} {status}: trying {cand.fallback.key} instead")
            self.queue.insert(0, cand.fallback)

    def _learn(self, child, analysis, model, name: str) -> None:
        """A fix that did not pay can still show what stands in the way: AMP that halves the
        kernel time of an eager step which does not get faster leaves a launch-bound trace.
        What the rules find in the rejected trial's trace joins the queue; the rejected fix
        is retried once the bottleneck has moved (_commit, rungs.worth_retrying)."""
        queued = {q.key for q in self.queue} | {c.key for c in self.stack}
        found = [c for c in rungs.requeue([], child, analysis, model, self.ctx, self.tried, rules=self.rules())
                 if c.key not in queued]
        if found:
            self.say(f"trial {name}'s trace points at {', '.join(sorted({c.name for c in found}))}: queued")
            self.queue = sorted(self.queue + found, key=lambda c: -(c.est_gain_ms or 0.0))
            # The rules need not find them on the kept stack's trace (without the rejected
            # fix, the step may not be launch-bound): they stay queued until tried (dropped,
            # compile would go untried).
            self.learned |= {c.key for c in found}

    def _confirm(self, name: str, cand: Candidate, runs: list[dict], changes_numerics: bool) -> Verdict:
        """The verdict, after re-timing a gain inside the noise band: the reference and the
        trial again, alternately, so that slow drift of the host hits both alike. A reference
        timed once (a kept fix's own run) is first timed again alone when the verdict could
        turn on it (verdicts.retime_reference): confirm on demand."""
        def verdict_now():
            return judge(runs, self.ref_runs, self.loss_ref, self.noise, changes_numerics, [p.name for p in cand.parts])

        verdict = verdict_now()
        measured = regime_noise(self.groups, self.ref_runs) is not None
        if len(self.ref_runs) == 1 and retime_reference(verdict.status, verdict.gain, verdict.threshold, measured) \
                and not self.out_of_budget(cand) and not self.stopping():
            self.say(f"trial {name}: {verdict.reason}; the reference has one run"
                     f"{'' if measured else ' and no noise of its own regime'}: timing it again")
            # guessed beside what comes next: a confirmation round's first run, the same stack
            # timed again (unguessed, it compiles on the critical path)
            nxt = guesses.likely_next(self, cand, name)
            round1 = (f"{name}-confirm1-reference", self.stack, False)
            again_ref = self._again(f"{name}-reference", self.stack,
                                    guesses.unique([*nxt[:1], round1, *nxt[1:]]))
            if again_ref.get("status") == "complete":
                self.ref_runs = [*self.ref_runs, again_ref]
                self._pool(self.ref_runs)  # its pair now sets the noise of its regime
            verdict = verdict_now()
        after = guesses.likely_next(self, cand, name)  # what comes once the verdict is in
        while verdict.status == "unsure" and len(runs) < 1 + CONFIRM_ROUNDS \
                and not self.out_of_budget(cand) \
                and not self.stopping():
            self.say(f"trial {name}: {verdict.reason}; timing the reference and the trial again")
            k = len(runs)
            # each run of a round is guessed while the one before it runs (started fresh, each
            # pays its start-up on the ladder's critical path)
            nxt = [(f"{name}-confirm{k + 1}-reference", self.stack, False)] if k + 1 < 1 + CONFIRM_ROUNDS else []
            again_ref = self._again(f"{name}-confirm{k}-reference", self.stack,
                                    [(f"{name}-confirm{k}", [*self.stack, cand], False), *after])
            again = self._again(f"{name}-confirm{k}", [*self.stack, cand], [*nxt, *after])
            if again_ref.get("status") == "complete":
                self.ref_runs = [*self.ref_runs, again_ref]
            if again.get("status") == "complete":
                runs.append(again)
            self._pool(self.ref_runs, runs)
            verdict = verdict_now()
        if verdict.status == "unsure" and self.stopping():  # kept as it stands: not judged either way
            return verdict._replace(reason=verdict.reason + "; not confirmed: interrupted (Ctrl-C)")
        if verdict.status == "unsure":
            return verdict._replace(status="rejected", reason=verdict.reason + "; not confirmed")
        return verdict

    def _again(self, name: str, stack: list[Candidate], guesses) -> dict:
        """A timing-only run for a verdict (the reference, or a confirmation round): after
        Ctrl-C, none (an empty result): the verdict stands on the runs it has."""
        try:
            return self.process(name, stack, profile=False, guesses=guesses)[0]
        except Interrupted:
            return {"status": "interrupted"}

    def _compete(self, cand, runs, analysis, model, rec: dict, used: float) -> None:
        """A group's values come in order of preference on a tie: a later one within the noise
        of the best wins (more workers: headroom for the fixes that speed the GPU up later)."""
        best = self.pending.get(cand.group)
        if best is None or relative(rec, best.record) > -used / 2:
            if best is not None:
                best.record["status"], best.record["reason"] = "superseded", \
                    f"{rec['name']} was as fast within noise, {fixes.trait(cand.group, 'tie_reason', 'and came later')}"
            self.pending[cand.group] = Pending(cand, runs, analysis, model, rec)
            # the group's other values next: the fixes after them are trialled on its winner
            self.queue.sort(key=lambda c: c.group != cand.group)
        else:
            rec["status"], rec["reason"] = "superseded", f"{best.record['name']} was faster"

    def _commit(self, cand, runs, analysis, model) -> None:
        self.stack.append(cand)
        self.result["stack"] = [s for c in self.stack for s in c.as_specs()]
        # The kept fix's runs (one, unless it was confirmed) are the new reference as they
        # are: it is timed again only when a later verdict could turn on it (_confirm). A
        # repeat after every kept fix cost a process each, mostly after gains a second run
        # could not change.
        self.ref_runs, self.ref_config = runs, {**(runs[0].get("config") or self.ref_config), **self.facts}
        self._pool(runs)  # the new reference's runs, and its regime, set the noise from here on
        if isinstance(runs[0].get("elapsed_s"), (int, float)):   # the patch's run to come (out_of_budget)
            self.ctx.pace.verify_s = self.ctx.pace.verification_after(runs[0])
        if self.stopping():
            return  # nothing runs after it: no requeue
        now = (self.ref_ms(), rungs.idle_share(analysis))
        retry = {k for k, at in self.slow.items() if rungs.worth_retrying(at, now)}
        if fixes.trait(cand.name, "scales_out"):
            retry = set()  # more GPUs share the samples; each one's step is what it was
        # torch.compile waits behind every other fix (Fix.last); the finding that queued it can
        # flicker as they change the step (docs/trials.md): once queued, it stays.
        waiting = {c.key for c in self.queue if fixes.trait(c.name, "last")}
        scale_out = {c.key for c in self.queue if fixes.trait(c.name, "scales_out")}  # stays queued too
        if waiting and (now[1] is None or now[1] >= rungs.HOST_BOUND_IDLE):  # still host-bound:
            retry = {k for k in retry if not rungs.rides(self.rejected[k].name, self.slow[k])}  # they ride
        before = {c.key: c for c in self.queue}
        self.queue = rungs.requeue(self.queue, runs[0], analysis, model, self.ctx, self.tried - retry,
                                   frozenset(self.learned | waiting | scale_out), self.rules())
        # what the rules no longer ask for here may come back on the next trace (a finding
        # near its threshold): advisor.trials.guesses names it
        now_keys = {c.key for c in self.queue}
        self.dropped = {k: c for k, c in {**self.dropped, **before}.items() if k not in now_keys and k not in self.tried}
        for c in self.queue:
            alt: Candidate | None = c
            while alt is not None:  # a fallback rejected as not faster is retried with its candidate
                if alt.key in retry:
                    self.tried.discard(alt.key)
                    self.retried.add(alt.key)
                    self.slow[alt.key] = now  # once more only after the next such change
                alt = alt.fallback

    def ref_ms(self) -> float:
        return measure.mean_step_ms(self.ref_runs) or 0.0
