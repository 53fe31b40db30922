"""`advisor analyze` as stages: the baseline (and a short or self-profiling script's runs of
their own) → its analysis and findings → the trials → fixes.patch → its verification as plain
python → the report. ``Analyze`` owns the stages and what a failure or a Ctrl-C at each means for
the run (kept, marked incomplete or interrupted); advisor.commands.analyze maps the command line
onto ``AnalyzeOptions`` and ``StageOptions`` and talks to the terminal.

Each stage hands plain data to the next: the child's result (runner), the analysis and findings
(advisor.results), the trials' records (advisor.trials), the patch and its verification
(advisor.fixes, advisor.verify), run.json (advisor.rundir) and the HTML report (advisor.report).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from advisor import costs, headroom, measure, payback, results, rundir, specs
from advisor.contracts import RunDocument
from advisor.specs import AnalyzeOptions

# patch.verification when Ctrl-C came first, or stopped the patched script's run
NOT_VERIFIED = {"status": "skipped", "reason": "interrupted (Ctrl-C)", "runs": 0}


@dataclass
class StageOptions:
    """Which stages run past the baseline, and how (AnalyzeOptions says how each process runs)."""
    trials: bool = True                  # --no-trials: the baseline alone
    verify: bool = True                  # --no-verify: fixes.patch is written, not run
    only: set[str] | None = None         # --fix: these fixes' trials only
    applied: list[dict] = field(default_factory=list)  # --apply: in every run, and in the patch
    budget_s: float | None = None        # --budget: the whole analyze (None: trials.default_budget_s)
    max_trials: int = 16
    trial_timeout: float = 900.0
    lookahead: int | None = None         # processes started ahead (None: by the host)
    json: bool = False                   # --json: the script's output goes to stderr
    run_steps: int | None = None         # --run-steps: the user's run length (advisor.payback)
    allow: frozenset = frozenset()       # --allow: the user's choices fixes may override (Fix.allowed_by)
    gpus: str | None = None              # --gpus: the visible GPUs the trials may use (trials.gpus)
    trial_gpus: int | None = None        # --trial-gpus: at most this many of them


class Interrupts:
    """What Analyze asks of Ctrl-C (advisor.commands.analyze.CtrlC): never pressed here."""
    stage = "baseline"
    during: str | None = None
    cleanup: list

    def __init__(self):
        self.cleanup = []

    def pressed(self) -> bool:
        return False


@dataclass
class Analyze:
    """One `advisor analyze` run: ``run()`` takes it through every stage and returns run.json's
    document (its "status" says how far it got)."""
    script: str
    script_args: list[str]
    run_dir: Path
    spec: dict                           # the baseline's (specs.make_spec)
    opts: AnalyzeOptions
    stages: StageOptions
    progress: Callable[[str], None] = print    # one line per event
    on_stage: Callable | None = None     # the baseline's progress records (stage, step, info)
    ctrl_c: Interrupts = field(default_factory=Interrupts)
    started: float = field(default_factory=time.monotonic)
    _told_quiet: bool = field(default=False, init=False)
    budget_s: float | None = field(default=None, init=False)   # the whole analyze's, once the trials know their GPUs

    def run(self) -> tuple[RunDocument, dict]:
        """(run.json's document, the baseline's child result)."""
        prep = self._prep()

        def on_progress(stage, step, info=None):
            if self.on_stage is not None:
                self.on_stage(stage, step, info)
            if prep is not None:
                prep.on_stage(stage)

        child = self._run_child(self.spec, on_progress=on_progress)
        own_traces, split = None, (self.opts, None)
        if not self.ctrl_c.pressed():  # after Ctrl-C the baseline's run is what there is
            child, own_traces, split = self._short_or_self_profiled(child, prep)
        self.ctrl_c.pressed()  # noted as the baseline's (a short script's runs of their own are)
        self.ctrl_c.stage = "trials"  # the baseline has run: a Ctrl-C from here cuts short what follows it
        doc = self._document(child, own_traces)
        self.save(doc)
        if self.stages.trials and doc["status"] == "complete":
            self._trials(split[0], child, doc, prep.take_warm(), prep.take_held(), split[1])
        elif self.stages.applied and doc["status"] == "complete":
            # --apply without trials: the baseline ran with the fixes; the patch must do the same
            self._patch_and_verify(split[0], doc, child, self.stages.applied, measure.samples_per_s(child))
            if self.ctrl_c.pressed():
                interrupted(doc, "verification", interrupted_reason(doc, "verification"))
            self.save(doc)
        if prep is not None:
            prep.close()
        # the processes' shared compile cache (specs.compile_cache_env) is this run's scratch
        shutil.rmtree(self.run_dir / "cache", ignore_errors=True)
        return doc, child

    def save(self, doc: RunDocument) -> None:
        """run.json and the HTML report, as they stand."""
        from advisor.report import write_html

        rundir.write_run(self.run_dir, doc)
        write_html(self.run_dir, doc)

    # ------------------------------------------------------------------------- stages

    def _prep(self):
        """What gets ready for the trials while the baseline runs (trials/prep.py); None without trials."""
        if not self.stages.trials:
            return None
        from advisor.trials.lookahead import host_count, quiet_s
        from advisor.trials.prep import TrialsPrep
        from advisor.trials.state import REPEAT

        # The repeat's spec is known now: it starts with the baseline and waits at its first
        # CUDA use (trials._Ladder._reference runs it timed only, with no fix but --apply's).
        lookahead = self.stages.lookahead
        repeat = specs.trial_spec(self.script, self.script_args, self.run_dir, self.opts, REPEAT,
                                  self.stages.applied, False, quiet_s(lookahead)) if host_count(lookahead) else None
        prep = TrialsPrep(self.spec.get("cwd"), self.stages.json, repeat, str(self.run_dir / "trials" / ".ahead-0"),
                          str(self.run_dir))
        self.ctrl_c.cleanup.append(prep.close)
        return prep

    def _short_or_self_profiled(self, child: dict, prep):
        """A script that ended before advisor was done gets its timing and profile in runs of their
        own; one that profiles itself, a run where its profiler writes (advisor.schedule). Returns
        the (merged) baseline, what its own profiler wrote, and the trials' (options, profile split)."""
        from advisor import schedule

        split = (self.opts, None)
        sched = schedule.plan(child, self.opts.profile_steps, self.opts.warmup)
        if sched is not None:
            if prep is not None:
                prep.drop_held()  # started on the default schedule
            child = schedule.complete(child, self.spec, sched, self._run_child, self.progress)
            split = schedule.for_trials(self.opts, sched)
        return child, schedule.own_profiler_run(child, self.spec, self._run_child, self.progress), split

    def _tell_quiet(self) -> None:
        """Once, before the first process after the baseline: where the script's output goes now."""
        if not self.opts.verbose and not self._told_quiet:
            self._told_quiet = True
            self.progress(f"the script's output is shown for the baseline only; each later process writes it to "
                          f"stdout.txt in its own directory under {self.run_dir} (--verbose shows it)")

    def _run_child(self, spec: dict, on_progress=None) -> dict:
        """One process of the baseline's stage, under the run's limits."""
        from advisor.runner.parent import run_child

        if spec.get("output_file"):
            self._tell_quiet()
        return run_child(spec, timeout=self.opts.timeout, step_timeout=self.opts.step_timeout,
                         on_progress=on_progress, stdout_to_stderr=self.stages.json,
                         stall_timeout=self.opts.stall_timeout)

    def _document(self, child: dict, own_traces) -> RunDocument:
        """The baseline's analysis and findings (each rank's too), as run.json's document."""
        analysis, model, trace_err = results.analyze_trace_files(self.run_dir, child.get("trace_files") or [])
        results.merge_child_results(analysis, child)
        extra = [trace_err] if trace_err and child.get("status") == "complete" else []
        rank_models, rank_analyses, rank_rows = results.rank_analyses(self.run_dir, child, analysis)
        findings, skipped = results.run_findings(model, analysis, child.get("config") or {},
                                                 child.get("environment") or {}, self.opts.rules_dirs,
                                                 extra_models=rank_models, extra_analyses=rank_analyses,
                                                 thresholds=self.opts.thresholds)
        doc = results.build_run_document(self.spec, child, analysis, findings, skipped, extra)
        if rank_rows:
            doc["ranks"] = rank_rows
        if child.get("schedule"):
            doc["schedule"] = child["schedule"]
        doc["roofline"] = headroom.summary(doc, child)
        if own_traces is not None:
            doc["own_traces"] = own_traces
        if length := payback.run_length(child, self.stages.run_steps):
            doc["run_length"] = length
        if self.ctrl_c.pressed():
            during = self.ctrl_c.during or "trials"
            interrupted(doc, during, "interrupted (Ctrl-C) after the baseline: no trial ran"
                        if during == "trials" and self.stages.trials else None)
        return doc

    def _trials(self, opts: AnalyzeOptions, child: dict, doc: RunDocument, warm=None, held=None,
                split_profile: dict | None = None) -> None:
        from advisor import trials
        from advisor.beside import Beside
        from advisor.trials import gpus

        st = self.stages
        began = time.monotonic()
        beside = Beside()
        self._tell_quiet()
        where = gpus.plan(child, opts.nproc_per_node, st.gpus, st.trial_gpus)
        if len(where["gpus"]) > 1:
            self.progress(f"trials side by side on {len(where['gpus'])} GPUs ({', '.join(where['gpus'])}), one each")
        self.budget_s = st.budget_s or trials.default_budget_s(len(where["gpus"]))
        ctx = trials.TrialContext(
            script=self.script, script_args=self.script_args, run_dir=self.run_dir, opts=opts, baseline=child,
            baseline_findings=doc["findings"], environment=doc["environment"],
            budget_s=self.budget_s, started=self.started,
            max_trials=st.max_trials, trial_timeout=st.trial_timeout, only=st.only, applied=st.applied,
            stdout_to_stderr=st.json, started_ahead=(warm, held), lookahead=st.lookahead, progress=self.progress,
            split_profile=split_profile, interrupted=self.ctrl_c.pressed, allow=st.allow, gpus=where["gpus"])
        result = trials.run_trials(
            ctx, on_final_stack=lambda result, runner: self._verify_beside(beside, opts, doc, child, result, runner))
        ended = time.monotonic()
        beside.join(self.ctrl_c.pressed)   # the patch's verification, when it ran beside the last trials
        doc["trials"] = result["trials"]
        doc["trial_summary"] = {k: result.get(k) for k in ("noise", "threshold", "stack", "interrupted", "processes",
                                                           "lookahead", "expected_s")}
        doc["trial_summary"].update(compile_summary(doc["trials"], child))
        doc["trial_summary"]["gpus"] = result.get("gpus") or {"gpus": where["gpus"], "why_one": where["why_one"]}
        doc["trial_summary"].update({k: result[k] for k in ("unsettled", "settled", "stopped_early") if result.get(k)})
        costs.settle(doc, child)   # one-offs against the lead-in's noise, rates against the ceiling
        if result["stack"] and not beside.started:
            self._patch_kept(opts, doc, child, result, doc.get("run_length"))
        pressed = self.ctrl_c.pressed()  # asked first: a second press stops here at once
        if result["interrupted"] or pressed:
            during = self.ctrl_c.during or "trials"
            interrupted(doc, during, interrupted_reason(doc, during))
        now = time.monotonic()
        doc["trial_summary"]["wall_s"] = round(now - self.started, 1)  # the whole analyze, to here
        # where it went: the baseline's stage (its runs and analysis), the trials, the patch and its verification
        doc["trial_summary"]["phases_s"] = {"baseline": round(began - self.started, 1),
                                            "trials": round(ended - began, 1), "patch": round(now - ended, 1)}
        doc["roofline"] = headroom.summary(doc, child)
        self.save(doc)

    def _verify_beside(self, beside, opts: AnalyzeOptions, doc: RunDocument, child: dict, result: dict,
                       runner) -> None:
        """Side by side, once the ladder's stack is final: fixes.patch and its verification in a
        thread, on a GPU the ladder's runner (trials.gpus.ParallelRunner) gives up for it, while
        the batch sizes and the ceiling run on the others. Not for a stack that launches
        several processes (they take every GPU), nor when no GPU is free."""
        if not result["stack"] or specs.launch_nproc(result["stack"], opts.nproc_per_node) > 1:
            return
        gpu = runner.claim()
        if gpu is None:
            return
        final = {**result, "stack": list(result["stack"]), "trials": list(result["trials"])}
        # what the patch reads of the trials, as they stand (run_trials' whole record replaces it)
        doc["trials"] = final["trials"]
        doc["trial_summary"] = {"noise": result["noise"], "threshold": result["threshold"]}
        self.progress(f"the stack is final: verifying fixes.patch on GPU {gpu}, beside the last trials")
        beside.start(lambda: self._patch_kept(opts, doc, child, final, doc.get("run_length"), gpu, beside.signals),
                     release=lambda: runner.release(gpu))

    def _patch_kept(self, opts: AnalyzeOptions, doc: RunDocument, child: dict, result: dict,
                    length: dict | None, gpu: str | None = None, signals=None) -> None:
        """fixes.patch for the kept stack, less the fixes whose one-off cost the run does not pay
        back (advisor.payback, where the run's length is known), and its verification. --apply's
        fixes were measured in every trial too: the patch carries them (after Ctrl-C: the fixes
        kept before it, not verified)."""
        costs.settle(doc, child)   # the records' one-offs judged against the lead-in's noise first
        records = payback.kept_records(doc["trials"], result["stack"])
        left = payback.unpaid(records, length)
        # the stack's record: the last kept trial (a bundle's too), else what the fixes the patch
        # keeps measured (a record after a left-out fix has that fix in it: payback.patched_record)
        last = measure.kept_trial(doc["trials"]) if not left else payback.patched_record(records, left, child)
        stack = [s for s in result["stack"] if s["name"] not in left]
        if stack or self.stages.applied:
            once = bool(last) and (last.get("runs") or 1) == 1 and not last.get("estimated")
            self._patch_and_verify(opts, doc, child, [*self.stages.applied, *stack],
                                   (last or {}).get("samples_per_s") or measure.samples_per_s(child), gpu, signals,
                                   retime=once)
        patch = doc.setdefault("patch", {"file": None, "notes": []})
        if (last or {}).get("estimated") and patch.get("verification"):
            patch["verification"]["stack_estimated"] = last["estimated"]
        if left:
            patch["left_out"] = left
        if records:
            patch["payback"] = payback.shares(records, length)   # each kept fix's own one-off and saving
        e2e = payback.end_to_end(child, last, length)
        if e2e:
            patch["end_to_end"] = e2e

    def _patch_and_verify(self, opts: AnalyzeOptions, doc: RunDocument, child: dict, stack: list[dict],
                          stack_rate: float | None, gpu: str | None = None, signals=None,
                          retime: bool = False) -> None:
        """fixes.patch for the kept stack (and --apply's fixes), then the patch run as plain python
        (advisor.verify) unless --no-verify, or Ctrl-C came first or stopped it (NOT_VERIFIED):
        doc["patch"]. Beside the trials (advisor.beside: ``signals``, on ``gpu``) Ctrl-C reaches
        it through ``signals``, and the trials' thread keeps the run's stage and run.json."""
        from advisor import verify
        from advisor.fixes import make_patch

        fixes = [{"intervention": f["name"], "params": f.get("params") or {}} for f in stack]
        path = Path(self.script).absolute()
        root = verify.patch_root(str(path))   # the git repository's root, else where advisor ran
        texts: dict = {}
        diff, notes = make_patch(str(path), fixes, doc["config"], root=root,
                                 executed=doc.get("executed_lines"), texts=texts, argv=self.script_args)
        _record_sources(doc, notes)
        command = verify.recommended_command(self.script, self.script_args, notes)
        if diff:
            (self.run_dir / "fixes.patch").write_text(verify.patch_header(command, root, os.getcwd()) + diff)
        doc["patch"] = {"file": "fixes.patch" if diff else None, "command": command, "notes": notes, "root": root}
        if not self.stages.verify or not (diff or any(n.get("argv_changes") or n.get("env_changes") for n in notes)):
            return
        pressed = (lambda: bool(signals.count)) if signals is not None else self.ctrl_c.pressed
        if pressed():
            doc["patch"]["verification"] = dict(NOT_VERIFIED)
            return
        if signals is None:
            self.ctrl_c.stage = "verification"
            rundir.write_run(self.run_dir, doc)
        self._tell_quiet()
        doc["patch"]["verification"] = verify.verify(
            self.script, self.script_args, self.run_dir, opts, diff, texts, notes, fixes, child, stack_rate,
            timeout=self.stages.trial_timeout, stdout_to_stderr=self.stages.json, progress=self.progress,
            noise_band=(doc.get("trial_summary") or {}).get("threshold"), gpu=gpu, signals=signals,
            retime_stack=(lambda: self._time_stack(opts, stack, gpu, signals)) if retime else None,
            fits=self._fits, applied=self.stages.applied, root=root)
        if pressed():  # it stopped the patched script: its run says nothing
            doc["patch"]["verification"] = dict(NOT_VERIFIED)

    def _fits(self, seconds: float) -> bool:
        """Whether a run of this many seconds, started now, ends inside the whole analyze's budget
        (as the trials plan it: trials.planned_end)."""
        from advisor import trials

        return self.budget_s is None or time.monotonic() - self.started + seconds <= trials.planned_end(self.budget_s)

    def _time_stack(self, opts: AnalyzeOptions, stack: list[dict], gpu: str | None, signals) -> float | None:
        """The kept stack timed once more with advisor's run-time fixes (a timing-only process,
        verify/stack: not a trial): the second reference of a verification that fell short of a
        stack timed once (advisor.verify)."""
        from advisor.runner.parent import run_child

        spec = specs.trial_spec(self.script, self.script_args, self.run_dir, opts, "verify-stack", list(stack),
                                profile=False)
        spec["run_dir"] = str(self.run_dir / "verify" / "stack")
        if gpu is not None:
            spec["environ"]["CUDA_VISIBLE_DEVICES"] = gpu
        self.progress("the patched script fell short of the stack, timed once: timing the stack again")
        again = run_child(spec, timeout=self.stages.trial_timeout, step_timeout=opts.step_timeout,
                          stdout_to_stderr=self.stages.json, stall_timeout=opts.stall_timeout, signals=signals)
        return measure.samples_per_s(again) if again.get("status") == "complete" else None


def compile_summary(trials: list[dict], baseline: dict) -> dict:
    """trial_summary's compile figures: torch.compile's seconds over the whole analyze (the
    baseline and every trial process), and the cache that stays (the environment's, or --cache
    DIR's; specs.compile_cache_env)."""
    spent = [t["compile_s"] for t in [baseline, *trials] if isinstance(t.get("compile_s"), (int, float))]
    out: dict = {"compile_s": round(sum(spent), 1)} if spent else {}
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):   # the user's, or --cache DIR's: it stays
        out["compile_cache"] = os.path.dirname(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    return out


def _record_sources(doc: RunDocument, notes: list) -> None:
    """config.<key>.source: where each value a placed fix changes is set, as the patch followed it
    (advisor.patch.knobs), under the config entry of the fix's call site."""
    from advisor import fixes

    for note in notes:
        key = fixes.trait(note.get("intervention"), "where_key", None)
        entry = doc.get("config", {}).get(key) if key else None
        if note.get("sources") and isinstance(entry, dict):
            entry.setdefault("source", {}).update(note["sources"])


def interrupted_reason(doc: RunDocument, during: str) -> str:
    """What a Ctrl-C during the trials or the patch's verification left, in words."""
    patch = doc.get("patch") or {}
    if during == "verification":
        return "interrupted (Ctrl-C) while fixes.patch was verified: the patch is kept, not verified"
    # verified beside the trials' last processes before the press (advisor.beside): it says so itself
    verified = (patch.get("verification") or {}).get("status") not in (None, "skipped")
    return ("trials interrupted (Ctrl-C): the trials that had finished are kept"
            + (f"; fixes.patch holds the fixes kept before it{'' if verified else ', not verified'}"
               if patch.get("file") else ""))


def interrupted(doc: RunDocument, during: str, reason: str | None) -> None:
    """Mark the run interrupted by Ctrl-C (run.json status "interrupted", exit 130), the stage it
    cut short named (contracts.INTERRUPTED_DURING); `reason` joins incomplete_reasons, else one
    naming Ctrl-C unless there is one (the baseline's run says where Ctrl-C stopped it)."""
    doc["status"] = "interrupted"
    doc["interrupted_during"] = during
    reasons = doc.setdefault("incomplete_reasons", [])
    if reason and reason not in reasons:
        reasons.append(reason)
    elif not any("Ctrl-C" in r for r in reasons):
        reasons.append(f"interrupted (Ctrl-C) during the {during}")
