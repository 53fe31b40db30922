"""`advisor analyze`: the baseline run (and a short script's or a self-profiling script's runs of
their own), its analysis and findings, the trials, fixes.patch and its verification, the report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

from advisor import headroom, measure, pipeline, rundir
from advisor.commands import err, fail as _fail, say
from advisor.trials.prep import TrialsPrep

_last_stage: list[str] = []


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
    from advisor import interventions
    from advisor.runner.parent import run_child, validate_script

    started = time.monotonic()
    problem = validate_script(script)
    if problem:
        return _fail(problem)
    ns.fix_names = set(ns.fix.split(",")) if ns.fix else None
    if ns.fix_names:
        unknown = sorted(ns.fix_names - set(interventions.MODULES))
        if unknown:
            return _fail(f"--fix: no fix named {', '.join(unknown)}; known: {', '.join(sorted(interventions.MODULES))}", 2)
    try:
        ns.applied = interventions.parse_specs(ns.apply) if ns.apply else []
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
    say(f"run directory {run_dir}")
    prep = None
    if not ns.no_trials:
        from advisor.trials.ladder import REPEAT
        from advisor.trials.lookahead import host_count, quiet_s

        # The repeat's spec is known now: it starts with the baseline and waits at its first
        # CUDA use (trials._Ladder._reference runs it timed only, with no fix but --apply's).
        repeat = pipeline.trial_spec(script, script_args, run_dir, opts, REPEAT, ns.applied, False,
                                     quiet_s(ns.lookahead)) if host_count(ns.lookahead) else None
        prep = TrialsPrep(spec.get("cwd"), ns.json, repeat, str(run_dir / "trials" / ".ahead-0"))

    def on_progress(stage, step, info=None):
        _progress(stage, step, info)
        if prep is not None:
            prep.on_stage(stage)

    child = run_child(spec, timeout=opts.timeout, step_timeout=opts.step_timeout, on_progress=on_progress,
                      stdout_to_stderr=ns.json, stall_timeout=opts.stall_timeout)
    child, own_traces, split = _short_or_self_profiled(ns, spec, opts, child, prep)
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
    rundir.write_run(run_dir, doc)
    _render(run_dir, doc)
    if not ns.no_trials and doc["status"] == "complete":
        _run_trials(ns, script, script_args, run_dir, split[0], child, doc, started, prep.take_warm(), prep.take_held(),
                    split[1])
    elif ns.applied and doc["status"] == "complete":
        # --apply without trials: the baseline ran with the fixes; the patch must do the same
        _patch_and_verify(ns, script, script_args, run_dir, split[0], doc, child, ns.applied,
                          measure.samples_per_s(child))
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
                split_profile: dict | None = None) -> None:
    from advisor import trials

    ctx = trials.TrialContext(
        script=script, script_args=script_args, run_dir=run_dir, opts=opts, baseline=child,
        baseline_findings=doc["findings"], environment=doc["environment"], budget_s=ns.budget * 60.0,
        max_trials=ns.max_trials, trial_timeout=ns.trial_timeout,
        only=ns.fix_names, applied=ns.applied, stdout_to_stderr=ns.json, warm=warm, held=held, lookahead=ns.lookahead,
        progress=say, split_profile=split_profile)
    result = trials.run_trials(ctx)
    doc["trials"] = result["trials"]
    doc["trial_summary"] = {k: result.get(k) for k in ("noise", "threshold", "stack", "interrupted", "processes",
                                                       "lookahead")}
    if result["interrupted"]:
        doc["incomplete_reasons"].append("trials interrupted (Ctrl-C): the report shows what finished")
    if result["stack"]:
        # --apply's fixes were measured in every trial too: the patch carries them
        _patch_and_verify(ns, script, script_args, run_dir, opts, doc, child, [*ns.applied, *result["stack"]],
                          (measure.kept_trial(result["trials"]) or {}).get("samples_per_s"))
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
                      stack_rate: float | None) -> None:
    """fixes.patch for the kept stack (and --apply's fixes), then the patch run as plain python
    (advisor.verify) unless --no-verify: doc["patch"]."""
    from advisor import verify
    from advisor.patch import make_patch

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
    rundir.write_run(run_dir, doc)
    doc["patch"]["verification"] = verify.verify(
        script, script_args, run_dir, opts, diff, texts, notes, fixes, child, stack_rate,
        timeout=ns.trial_timeout, stdout_to_stderr=ns.json, progress=say)


def _render(run_dir: Path, doc: dict) -> None:
    from advisor.report import SavedRun, render

    (run_dir / "index.html").write_text(render("html", SavedRun(doc, run_dir)), encoding="utf-8")
