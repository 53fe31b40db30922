"""`advisor analyze`: the baseline run (and a short script's or a self-profiling script's runs of
their own), its analysis and findings, the trials, fixes.patch and its verification, the report."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import orjson

from advisor import headroom, measure, pipeline, rundir
from advisor.commands import err, fail as _fail, say
from advisor.trials.prep import TrialsPrep

EXIT_INTERRUPTED = 130  # as a shell reports a command Ctrl-C stopped (128 + SIGINT)
# patch.verification when Ctrl-C came first, or stopped the patched script's run
NOT_VERIFIED = {"status": "skipped", "reason": "interrupted (Ctrl-C)", "runs": 0}
_last_stage: list[str] = []


class _Abort(BaseException):
    """A second Ctrl-C: advisor stops at once (not an Exception: nothing on the way catches it)."""


class CtrlC:
    """Ctrl-C during `advisor analyze`. The first press stops what runs and keeps what finished:
    run_child forwards it to the process running then, which saves and ends (a trial Ctrl-C cut
    short is discarded), and no process starts after it; between processes it is noted here and
    nothing is cut. The trials' verdicts so far, the kept fixes and their fixes.patch (not
    verified) are written, with status "interrupted", and advisor exits 130. A second press stops
    at once (_Abort): run.json as it was last written is marked interrupted, and advisor exits 130.

    Presses are counted through a wakeup fd: while a child runs, run_child's own SIGINT handler
    stands in for this one, and the fd sees every SIGINT whichever Python handler takes it."""

    def __init__(self):
        self.presses = 0
        self.stage = "baseline"       # what a Ctrl-C now would cut short (contracts.INTERRUPTED_DURING)
        self.during: str | None = None  # the stage of the first press
        self.cleanup: list = []       # what to close when stopping at once (processes started ahead)
        self.aborting = False
        self._fds: tuple[int, int] | None = None
        self._old: tuple = ()
        self._said = False

    def __enter__(self) -> CtrlC:
        try:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
        except OSError:
            return self
        try:
            old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            old_handler = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread: signals are not delivered here
            os.close(r)
            os.close(w)
            return self
        self._fds, self._old = (r, w), (old_fd, old_handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._fds is None:
            return
        old_fd, old_handler = self._old
        if self.presses:  # advisor is on its way out with 130: a later press must not raise on the way
            old_handler = signal.SIG_IGN
        signal.signal(signal.SIGINT, old_handler if old_handler is not None else signal.default_int_handler)
        signal.set_wakeup_fd(old_fd)
        for fd in self._fds:
            os.close(fd)
        self._fds = None

    def _count(self) -> int:
        if self._fds is not None:
            while True:
                try:
                    data = os.read(self._fds[0], 512)
                except (BlockingIOError, InterruptedError):
                    break
                if not data:
                    break
                self.presses += data.count(signal.SIGINT)
        if self.presses and self.during is None:
            self.during = self.stage
        return self.presses

    def _on_sigint(self, signum, frame) -> None:
        if self.aborting:
            return
        if self._count() >= 2:
            self.aborting = True
            raise _Abort
        if not self._said:  # plain os.write: print() or rich may be half-way through a line here
            self._said = True
            os.write(2, f"advisor ▸ {self._line()}\n".encode())

    def _line(self) -> str:
        return "Ctrl-C: stopping, what has finished is kept (Ctrl-C again stops at once)"

    def pressed(self) -> bool:
        """Whether Ctrl-C was pressed; _Abort once it was pressed twice."""
        if self._count() >= 2 and not self.aborting:
            self.aborting = True
            raise _Abort
        if self.presses and not self._said:
            self._said = True
            say(self._line())
        return self.presses > 0


def _progress(stage: str, step: int | None, info: dict | None = None) -> None:
    # One line per stage: the script's own output shares the terminal, so no live display.
    text = {"started": "script started", "warmup": "warming up", "profile": "profiling",
            "measure": "measuring without the profiler", "measuring": "measuring without the profiler",
            "profiling": "profiling", "profiler-started": "starting the profiler", "exporting": "writing the trace",
            "stopped": "stopping the script"}.get(stage, stage)
    if _last_stage and _last_stage[-1] == text:
        return
    _last_stage.append(text)
    suffix = f" (step {step})" if step is not None else ""
    say(f"{text}{suffix}")


def cmd_analyze(ns: argparse.Namespace, script: str, script_args: list[str]) -> int:
    from advisor import fixes
    from advisor.runner import stdin
    from advisor.runner.parent import validate_script

    started = time.monotonic()
    problem = validate_script(script)
    if problem:
        return _fail(problem)
    ns.fix_names = set(ns.fix.split(",")) if ns.fix else None
    if ns.fix_names:
        unknown = sorted(ns.fix_names - set(fixes.names()))
        if unknown:
            return _fail(f"--fix: no fix named {', '.join(unknown)}; known: {', '.join(fixes.names())}", 2)
    try:
        ns.applied = fixes.parse_specs(ns.apply) if ns.apply else []
    except ValueError as exc:
        return _fail(f"--apply: {exc}", 2)
    opts = pipeline.AnalyzeOptions(
        warmup=ns.warmup, profile_steps=ns.profile_steps, measure_steps=ns.steps, measure_min_s=ns.min_time, timeout=ns.timeout,
        step_timeout=ns.step_timeout, stall_timeout=ns.stall_timeout, out=ns.out, record_memory=ns.memory,
        with_stack=ns.with_stack, record_shapes=ns.shapes, rules_dirs=ns.rules,
        thresholds=ns.thresholds,
        # --apply ddp runs every process of the run as the ddp fix launches it, the baseline's too
        nproc_per_node=pipeline.launch_nproc(ns.applied, max(1, ns.nproc_per_node)))
    if opts.nproc_per_node > 1:
        ns.lookahead = 0   # ranks start under torch.distributed.run, never ahead (runner/ranks.py)
    try:
        run_dir = rundir.new_run_dir(script, ns.out)
    except OSError as exc:
        return _fail(str(exc))
    spec = pipeline.make_spec(script, script_args, run_dir, opts, interventions=ns.applied)
    # the script's stdin, read once and replayed to every process (runner/stdin.py)
    spec["stdin"] = stdin.capture()
    say(f"run directory {run_dir}")
    with CtrlC() as ctrl_c:
        try:
            return _analyze(ns, script, script_args, opts, run_dir, spec, started, ctrl_c)
        except _Abort:
            return _stopped_at_once(run_dir, ctrl_c)


def _analyze(ns, script: str, script_args: list[str], opts, run_dir: Path, spec: dict, started: float,
             ctrl_c: CtrlC) -> int:
    """The baseline, its analysis and findings, the trials, the patch and the report; Ctrl-C as
    CtrlC says. Returns the exit status."""
    from advisor.runner.parent import run_child

    prep = None
    if not ns.no_trials:
        from advisor.trials.ladder import REPEAT
        from advisor.trials.lookahead import host_count, quiet_s

        # The repeat's spec is known now: it starts with the baseline and waits at its first
        # CUDA use (trials._Ladder._reference runs it timed only, with no fix but --apply's).
        repeat = pipeline.trial_spec(script, script_args, run_dir, opts, REPEAT, ns.applied, False,
                                     quiet_s(ns.lookahead)) if host_count(ns.lookahead) else None
        prep = TrialsPrep(spec.get("cwd"), ns.json, repeat, str(run_dir / "trials" / ".ahead-0"), str(run_dir))
        ctrl_c.cleanup.append(prep.close)

    def on_progress(stage, step, info=None):
        _progress(stage, step, info)
        if prep is not None:
            prep.on_stage(stage)

    child = run_child(spec, timeout=opts.timeout, step_timeout=opts.step_timeout, on_progress=on_progress,
                      stdout_to_stderr=ns.json, stall_timeout=opts.stall_timeout)
    own_traces, split = None, (opts, None)
    if not ctrl_c.pressed():  # after Ctrl-C the baseline's run is what there is
        child, own_traces, split = _short_or_self_profiled(ns, spec, opts, child, prep)
    ctrl_c.pressed()  # noted as the baseline's (a short script's runs of their own are)
    ctrl_c.stage = "trials"  # the baseline has run: a Ctrl-C from here cuts short what follows it
    analysis, model, trace_err = pipeline.analyze_trace_files(run_dir, child.get("trace_files") or [])
    pipeline.merge_child_results(analysis, child)
    extra = [trace_err] if trace_err and child.get("status") == "complete" else []
    rank_models, rank_analyses, rank_rows = pipeline.rank_analyses(run_dir, child, analysis)
    findings, skipped = pipeline.run_findings(model, analysis, child.get("config") or {},
                                              child.get("environment") or {}, opts.rules_dirs,
                                              extra_models=rank_models, extra_analyses=rank_analyses,
                                              thresholds=opts.thresholds)
    doc = pipeline.build_run_document(spec, child, analysis, findings, skipped, extra)
    if rank_rows:
        doc["ranks"] = rank_rows
    if child.get("schedule"):
        doc["schedule"] = child["schedule"]
    doc["roofline"] = headroom.summary(doc, child)
    if own_traces is not None:
        doc["own_traces"] = own_traces
    if ctrl_c.pressed():
        during = ctrl_c.during or "trials"
        _interrupted(doc, during, "interrupted (Ctrl-C) after the baseline: no trial ran"
                     if during == "trials" and not ns.no_trials else None)
    rundir.write_run(run_dir, doc)
    _render(run_dir, doc)
    if not ns.no_trials and doc["status"] == "complete":
        _run_trials(ns, script, script_args, run_dir, split[0], child, doc, started, prep.take_warm(), prep.take_held(),
                    split[1], ctrl_c)
    elif ns.applied and doc["status"] == "complete":
        # --apply without trials: the baseline ran with the fixes; the patch must do the same
        _patch_and_verify(ns, script, script_args, run_dir, split[0], doc, child, ns.applied,
                          measure.samples_per_s(child), ctrl_c)
        if ctrl_c.pressed():
            _interrupted(doc, "verification", _interrupted_reason(doc, "verification"))
        rundir.write_run(run_dir, doc)
        _render(run_dir, doc)
    if prep is not None:
        prep.close()
    if ns.json:
        sys.stdout.buffer.write(orjson.dumps(pipeline.json_summary(doc), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        from advisor.report.terminal import print_summary
        print_summary(doc, err)
    if child.get("stalled"):
        _print_stacks(run_dir)
    if doc["status"] == "interrupted":
        return _fail(f"interrupted (Ctrl-C): {'; '.join(doc['incomplete_reasons'])} (kept in {run_dir})",
                     EXIT_INTERRUPTED)
    if doc["status"] != "complete":
        return _fail(f"run incomplete: {'; '.join(doc['incomplete_reasons']) or 'unknown'} (kept in {run_dir})")
    return 0


def _short_or_self_profiled(ns, spec: dict, opts, child: dict, prep):
    """A script that ended before advisor was done gets its timing and profile in runs of their
    own; one that profiles itself, a run where its profiler writes (advisor.schedule). Returns
    the (merged) baseline, what its own profiler wrote, and the trials' (options, profile split)."""
    from advisor import schedule
    from advisor.runner.parent import run_child

    def run(s: dict) -> dict:
        return run_child(s, timeout=opts.timeout, step_timeout=opts.step_timeout, stdout_to_stderr=ns.json,
                         stall_timeout=opts.stall_timeout)

    split = (opts, None)
    sched = schedule.plan(child, opts.profile_steps, opts.warmup)
    if sched is not None:
        if prep is not None:
            prep.drop_held()  # started on the default schedule
        child = schedule.complete(child, spec, sched, run, say)
        split = schedule.for_trials(opts, sched)
    return child, schedule.own_profiler_run(child, spec, run, say), split


def _run_trials(ns, script, script_args, run_dir, opts, child, doc, started: float, warm=None, held=None,
                split_profile: dict | None = None, ctrl_c: CtrlC | None = None) -> None:
    from advisor import trials

    ctx = trials.TrialContext(
        script=script, script_args=script_args, run_dir=run_dir, opts=opts, baseline=child,
        baseline_findings=doc["findings"], environment=doc["environment"], budget_s=ns.budget * 60.0,
        max_trials=ns.max_trials, trial_timeout=ns.trial_timeout,
        only=ns.fix_names, applied=ns.applied, stdout_to_stderr=ns.json, warm=warm, held=held, lookahead=ns.lookahead,
        progress=say, split_profile=split_profile, interrupted=ctrl_c.pressed if ctrl_c is not None else None)
    result = trials.run_trials(ctx)
    doc["trials"] = result["trials"]
    doc["trial_summary"] = {k: result.get(k) for k in ("noise", "threshold", "stack", "interrupted", "processes",
                                                       "lookahead")}
    if result["stack"]:
        # --apply's fixes were measured in every trial too: the patch carries them (after
        # Ctrl-C: the fixes kept before it, not verified)
        _patch_and_verify(ns, script, script_args, run_dir, opts, doc, child, [*ns.applied, *result["stack"]],
                          (measure.kept_trial(result["trials"]) or {}).get("samples_per_s"), ctrl_c)
    pressed = ctrl_c is not None and ctrl_c.pressed()  # asked first: a second press stops here at once
    if result["interrupted"] or pressed:
        during = (ctrl_c.during if ctrl_c is not None else None) or "trials"
        _interrupted(doc, during, _interrupted_reason(doc, during))
    doc["trial_summary"]["analyze_wall_s"] = round(time.monotonic() - started, 1)  # baseline + trials
    doc["roofline"] = headroom.summary(doc, child)
    rundir.write_run(run_dir, doc)
    _render(run_dir, doc)


def _print_stacks(run_dir: Path, most: int = 80) -> None:
    """Where each thread of a stalled script was (the child's faulthandler dump)."""
    from advisor.runner.parent import STACKS

    try:
        lines = (run_dir / STACKS).read_text(errors="replace").splitlines()
    except OSError:
        return
    if lines:
        err.print("[yellow]advisor ▸[/] the script stalled; where each thread was:", markup=True, highlight=False)
        err.print("\n".join(lines[:most]) + ("\n…" if len(lines) > most else ""), markup=False, highlight=False,
                  soft_wrap=True)


def _patch_and_verify(ns, script, script_args, run_dir, opts, doc, child, stack: list[dict],
                      stack_rate: float | None, ctrl_c: CtrlC | None = None) -> None:
    """fixes.patch for the kept stack (and --apply's fixes), then the patch run as plain python
    (advisor.verify) unless --no-verify, or Ctrl-C came first or stopped it (NOT_VERIFIED):
    doc["patch"]."""
    from advisor import verify
    from advisor.fixes import make_patch

    fixes = [{"intervention": f["name"], "params": f.get("params") or {}} for f in stack]
    path = Path(script).absolute()
    texts: dict = {}
    diff, notes = make_patch(str(path), fixes, doc["config"], root=str(path.parent),
                             executed=doc.get("executed_lines"), texts=texts, argv=script_args)
    if diff:
        (run_dir / "fixes.patch").write_text(diff)
    doc["patch"] = {"file": "fixes.patch" if diff else None, "notes": notes}
    if getattr(ns, "no_verify", False) or not (diff or any(n.get("argv_changes") for n in notes)):
        return
    if ctrl_c is not None and ctrl_c.pressed():
        doc["patch"]["verification"] = dict(NOT_VERIFIED)
        return
    if ctrl_c is not None:
        ctrl_c.stage = "verification"
    rundir.write_run(run_dir, doc)
    doc["patch"]["verification"] = verify.verify(
        script, script_args, run_dir, opts, diff, texts, notes, fixes, child, stack_rate,
        timeout=ns.trial_timeout, stdout_to_stderr=ns.json, progress=say)
    if ctrl_c is not None and ctrl_c.pressed():  # it stopped the patched script: its run says nothing
        doc["patch"]["verification"] = dict(NOT_VERIFIED)


def _interrupted_reason(doc: dict, during: str) -> str:
    """What a Ctrl-C during the trials or the patch's verification left, in words."""
    patched = bool((doc.get("patch") or {}).get("file"))
    if during == "verification":
        return "interrupted (Ctrl-C) while fixes.patch was verified: the patch is kept, not verified"
    return ("trials interrupted (Ctrl-C): the trials that had finished are kept"
            + ("; fixes.patch holds the fixes kept before it, not verified" if patched else ""))


def _interrupted(doc: dict, during: str, reason: str | None) -> None:
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


def _stopped_at_once(run_dir: Path, ctrl_c: CtrlC) -> int:
    """A second Ctrl-C: the processes started ahead closed, run.json as last written marked
    interrupted (when there is one), exit 130. The report is not rendered again."""
    for close in ctrl_c.cleanup:
        try:
            close()
        except Exception:  # noqa: BLE001 - stopping: what cannot be closed ends with advisor
            pass
    during = ctrl_c.during or ctrl_c.stage
    try:
        doc = rundir.read_json(run_dir / "run.json")
        _interrupted(doc, during, f"stopped at once by a second Ctrl-C during the {during}: run.json holds what "
                                  "was written before it")
        rundir.write_run(run_dir, doc)
    except (OSError, ValueError):  # none written yet (the baseline was running), or not readable
        pass
    return _fail(f"stopped (Ctrl-C twice): what was written is kept in {run_dir}", EXIT_INTERRUPTED)


def _render(run_dir: Path, doc: dict) -> None:
    from advisor.report import SavedRun, render

    (run_dir / "index.html").write_text(render("html", SavedRun(doc, run_dir)), encoding="utf-8")
