"""Command line: `advisor analyze|inspect|report|compare|rules|rule`.

Exit codes: 0 done, 1 the run or input was incomplete/bad (what was captured is kept),
2 usage error, 3 `compare --fail-below`: the new run is slower than the gate allows.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import orjson
from rich.console import Console

from advisor import headroom, measure, pipeline, rundir
from advisor.trials.prep import TrialsPrep

err = Console(stderr=True, highlight=False)


def _fail(msg: str, code: int = 1) -> int:
    err.print(f"[bold red]advisor:[/] {msg}", markup=True, highlight=False, soft_wrap=True)
    return code


def _add_rule_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="override a rule threshold (see advisor/thresholds.py)")
    p.add_argument("--rules", action="append", default=[], metavar="DIR", help="extra rule directory")


def _add_analyze_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="run directory to create (default: reports/<time>-<script>)")
    p.add_argument("--warmup", type=int, default=5, help="steps run before anything is timed (default 5)")
    p.add_argument("--profile-steps", type=int, default=3,
                   help="steps profiled, after the timed ones (default 3)")
    p.add_argument("--steps", type=int, default=20, help="steps timed without the profiler (default 20)")
    p.add_argument("--min-time", type=float, default=1.0,
                   help="time at least this many seconds, up to 10x --steps (default 1.0)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the script is stopped (default 1800)")
    p.add_argument("--step-timeout", type=float, default=300.0,
                   help="seconds allowed to reach the first training step (default 300)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="seconds without a training step, once stepping, before the script is stopped as "
                        "stalled, with every thread's stack (default: 50 median steps, 120-900 s)")
    p.add_argument("--memory", action="store_true",
                   help="record allocator events in the trace (memory timeline; adds profiler overhead)")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks in the trace (larger)")
    p.add_argument("--shapes", action="store_true", help="record operator input shapes in the trace")
    p.add_argument("--no-trials", action="store_true", help="diagnose only; do not trial fixes")
    p.add_argument("--fix", help="trial only these fixes (comma-separated)")
    p.add_argument("--apply", metavar="FIX[:KEY=VALUE...],...",
                   help="run the baseline (and every trial) with these fixes applied, "
                        "e.g. amp,channels-last,dataloader-workers:num_workers=8")
    p.add_argument("--budget", type=float, default=15.0, help="minutes for trials (default 15)")
    p.add_argument("--max-trials", type=int, default=16, help="most trials to run (default 16)")
    p.add_argument("--trial-timeout", type=float, default=900.0, help="seconds before a trial is stopped (default 900)")
    p.add_argument("--no-verify", action="store_true",
                   help="do not run the patched script as plain python to check fixes.patch")
    p.add_argument("--lookahead", type=int, default=None, metavar="N",
                   help="trial processes started ahead on a guess of the next trial, each waiting at the "
                        "script's first CUDA use (default: 2 with 8+ cores, 1 with 4+, 0 below; 0 turns it off)")
    _add_rule_options(p)
    p.add_argument("--json", action="store_true",
                   help="print machine-readable results on stdout (the script's own output goes to stderr)")


EXIT_GATE_FAILED = 3


def _version() -> str:
    """`advisor X.Y.Z`, with torch's version read from its installed metadata (torch is not imported)."""
    from importlib import metadata

    import advisor

    text = f"advisor {advisor.__version__}"
    try:
        text += f" (torch {metadata.version('torch')})"
    except metadata.PackageNotFoundError:
        pass
    return text


class _VersionAction(argparse.Action):
    """--version, with the text built only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit()


def _fraction(text: str) -> float:
    """--fail-below: a fraction of the base run's throughput, in (0, 10]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0 or value > 10:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in (0, 10] (e.g. 0.95: fail below 0.95 x BASE)")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="advisor", description="Profiling-driven performance advisor for PyTorch training.")
    parser.add_argument("--version", action=_VersionAction, help="print advisor's version (and torch's) and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze", help="run a training script under the profiler and report where time goes",
                       usage="advisor analyze [options] SCRIPT [script args...]")
    _add_analyze_options(a)
    a.add_argument("script", help="the training script, run as `python SCRIPT args...` would")
    a.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments passed to the script untouched")
    i = sub.add_parser("inspect", help="analyze existing traces without running anything")
    i.add_argument("traces", nargs="+", help="trace file (.json/.json.gz), run directory or TensorBoard log dir")
    _add_rule_options(i)
    i.add_argument("--json", action="store_true", help="print machine-readable results on stdout")
    r = sub.add_parser("report", help="re-render a run's index.html from its run.json (nothing is re-run)")
    r.add_argument("run", help="run directory (or its run.json)")
    c = sub.add_parser("compare", help="render two runs side by side (e.g. before and after fixes.patch), "
                                       "or gate a run's throughput against a base run (--fail-below)",
                       description="Compare two runs: the HTML page (--out), a throughput gate for CI "
                                   "(--fail-below), machine-readable numbers (--json). Exit codes: 0 done (gate "
                                   "passed), 1 a run is missing, incomplete or unmeasured, 2 usage error, "
                                   "3 the gate failed.")
    c.add_argument("run_a", metavar="BASE", help="run directory (or its run.json): the reference")
    c.add_argument("run_b", metavar="NEW", help="run directory (or its run.json): compared with the reference")
    c.add_argument("--out", help="HTML file to write (needed unless --fail-below or --json is given)")
    c.add_argument("--names", help="labels of the two runs, comma-separated (default: the directory names)")
    c.add_argument("--fail-below", type=_fraction, metavar="FRACTION",
                   help="exit 3 when NEW's samples/s fall below FRACTION x BASE's (e.g. 0.95); steps/s "
                        "for both when either run has no samples/s (batch size unknown)")
    c.add_argument("--json", action="store_true",
                   help="print both runs' throughput, their ratio and the gate's verdict as JSON on stdout")
    sub.add_parser("rules", help="list the rule catalogue")
    rc = sub.add_parser("rule", help="print one rule's documentation")
    rc.add_argument("code")
    return parser


def split_analyze_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `analyze` argv into advisor's options and the script's argv.

    Everything from the first positional on belongs to the script — even `--help`.
    """
    p = argparse.ArgumentParser(add_help=False)
    _add_analyze_options(p)
    takes_value = {s for a in p._actions for s in a.option_strings if a.nargs != 0}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        i += 2 if (tok in takes_value and "=" not in tok) else 1
    return argv, []


def _thresholds(ns: argparse.Namespace) -> str | None:
    """ADVISOR_THRESHOLDS and --threshold NAME=VALUE, checked now: ns.thresholds, which every
    rule run is given (the trials' too); a one-line error when one is unknown."""
    from advisor.thresholds import Thresholds

    try:
        ns.thresholds = Thresholds.from_environment(getattr(ns, "threshold", None) or [])
    except ValueError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "analyze":
        own, script_argv = split_analyze_argv(argv[1:])
        if not script_argv:
            _parser().parse_args(["analyze", *own])  # prints usage / help and exits
            return _fail("analyze needs a script: advisor analyze [options] SCRIPT [args...]", 2)
        ns = _parser().parse_args(["analyze", *own, script_argv[0]])
        bad = _thresholds(ns)
        return _fail(bad, 2) if bad else cmd_analyze(ns, script_argv[0], script_argv[1:])
    ns = _parser().parse_args(argv)
    bad = _thresholds(ns)
    if bad:
        return _fail(bad, 2)
    return {"inspect": cmd_inspect, "report": cmd_report, "compare": cmd_compare, "rules": cmd_rules,
            "rule": cmd_rule}[ns.command](ns)


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
    err.print(f"[cyan]advisor ▸[/] {text}{suffix}", markup=True, highlight=False)


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
        thresholds=ns.thresholds)
    try:
        run_dir = rundir.new_run_dir(script, ns.out)
    except OSError as exc:
        return _fail(str(exc))
    spec = pipeline.make_spec(script, script_args, run_dir, opts, interventions=ns.applied)
    err.print(f"[cyan]advisor ▸[/] run directory {run_dir}", markup=True, highlight=False)
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
    findings, skipped = pipeline.run_findings(model, analysis, child.get("config") or {},
                                              child.get("environment") or {}, opts.rules_dirs,
                                              thresholds=opts.thresholds)
    doc = pipeline.build_run_document(spec, child, analysis, findings, skipped, extra)
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

    def say(line: str) -> None:
        err.print(f"[cyan]advisor ▸[/] {line}", markup=True, highlight=False)

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

    ctx = trials.TrialContext(split_profile=split_profile,
        script=script, script_args=script_args, run_dir=run_dir, opts=opts, baseline=child,
        baseline_findings=doc["findings"], environment=doc["environment"], budget_s=ns.budget * 60.0,
        max_trials=ns.max_trials, trial_timeout=ns.trial_timeout,
        only=ns.fix_names, applied=ns.applied, stdout_to_stderr=ns.json, warm=warm, held=held, lookahead=ns.lookahead,
        progress=lambda line: err.print(f"[cyan]advisor ▸[/] {line}", markup=True, highlight=False))
    result = trials.run_trials(ctx)
    doc["trials"] = result["trials"]
    doc["trial_summary"] = {k: result.get(k) for k in ("noise", "threshold", "stack", "interrupted", "processes",
                                                       "lookahead")}
    if result["interrupted"]:
        doc["incomplete_reasons"].append("trials interrupted (Ctrl-C): the report shows what finished")
    if result["stack"]:
        # --apply's fixes were measured in every trial too: the patch carries them
        _patch_and_verify(ns, script, script_args, run_dir, opts, doc, child, [*ns.applied, *result["stack"]],
                          _stack_rate(result["trials"]))
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


def _stack_rate(trials: list[dict]) -> float | None:
    """The kept stack's samples/s in the runner: the last accepted rung's."""
    kept = [t for t in trials if t.get("status") == "accepted" and not t.get("apart")]
    return kept[-1].get("samples_per_s") if kept else None


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
    say = lambda line: err.print(f"[cyan]advisor ▸[/] {line}", markup=True, highlight=False)  # noqa: E731
    doc["patch"]["verification"] = verify.verify(
        script, script_args, run_dir, opts, diff, texts, notes, fixes, child, stack_rate,
        timeout=ns.trial_timeout, stdout_to_stderr=ns.json, progress=say)


def _render(run_dir: Path, doc: dict) -> None:
    from advisor.report import SavedRun, render

    (run_dir / "index.html").write_text(render("html", SavedRun(doc, run_dir)), encoding="utf-8")


def cmd_inspect(ns: argparse.Namespace) -> int:
    from advisor.metrics import analyze
    from advisor.trace import TraceError, load_traces

    models = []
    for target in ns.traces:
        try:
            models.extend(load_traces(target))
        except TraceError as exc:
            return _fail(str(exc))
    config = _run_config(ns.traces) if len(ns.traces) == 1 else {}
    ranked = _ranks(models)
    analyses = [analyze(m) for m in models]  # once each: every rank's rules also see the others'
    results = []
    for i, (model, analysis) in enumerate(zip(models, analyses)):
        env = pipeline.environment_from_trace(model)
        others = [j for j in range(len(models)) if j != i] if ranked else []
        findings, skipped = pipeline.run_findings(model, analysis, config, env, ns.rules,
                                                  extra_models=[models[j] for j in others],
                                                  extra_analyses=[analyses[j] for j in others],
                                                  thresholds=ns.thresholds)
        results.append({"trace": str(model.meta.get("trace_path")), "environment": env,
                        "analysis": analysis, "findings": findings, "skipped_rules": skipped})
    if ns.json:
        sys.stdout.buffer.write(orjson.dumps(results if len(results) > 1 else _inspect_json(results[0]),
                                             option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    else:
        from advisor.report.terminal import print_inspect
        for res in results:
            print_inspect(res, Console())
    return 0


def _ranks(models: list) -> bool:
    """Whether the models are distinct ranks of one distributed job."""
    ranks = [(m.meta.get("distributed_info") or {}).get("rank") for m in models]
    return len(models) > 1 and None not in ranks and len(set(ranks)) == len(ranks)


def _run_config(targets: list[str]) -> dict:
    """Inspecting an advisor run directory: its observed config makes the config rules run."""
    p = Path(targets[0])
    if p.is_dir() and (p / "run.json").is_file():
        return rundir.read_json(p / "run.json").get("config") or {}
    return {}


def _inspect_json(res: dict) -> dict:
    a = res["analysis"]
    return {"trace": res["trace"], "step_time_ms": a.get("step_time_ms"), "breakdown": a.get("breakdown"),
            "kernel_time_by_class": a.get("kernel_time_by_class"), **res}


def cmd_report(ns: argparse.Namespace) -> int:
    from advisor.report import SavedRun

    try:
        run = SavedRun.load(ns.run)
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    _render(run.run_dir, run.doc)
    err.print(f"[cyan]advisor ▸[/] wrote {run.run_dir / 'index.html'}", markup=True, highlight=False)
    return 0


def _rate_text(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _ratio_text(ratio: float, threshold: float, passed: bool) -> str:
    """The ratio to two decimals, or more where two would show it on the wrong side of the threshold."""
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if (float(text) >= threshold) if passed else (float(text) < threshold):
            return text
    return f"{ratio:.6f}"


def _measured(doc: dict, label: str, arg: str) -> tuple[dict | None, str | None]:
    """A run's measurement, or the one-line reason it cannot be compared."""
    status = doc.get("status")
    if status != "complete":
        reasons = "; ".join(str(r) for r in doc.get("incomplete_reasons") or [])
        return None, (f"{label} {arg} is not a complete run (status {status!r}"
                      + (f": {reasons}" if reasons else "") + "): it cannot be compared")
    meas = doc.get("measurement")
    meas = meas if isinstance(meas, dict) else {}
    sps, step = _positive(meas.get("samples_per_s")), _positive(meas.get("step_time_ms"))
    if sps is None and step is None:
        return None, f"{label} {arg} has no measurement (neither samples/s nor step time): it cannot be compared"
    return {"samples_per_s": sps, "step_time_ms": step}, None


def _positive(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _gate(ns: argparse.Namespace, docs: list[dict], dirs: list[Path]) -> tuple[dict | None, str | None]:
    """Both runs' throughput, their ratio and the --fail-below verdict (None without a threshold)."""
    meas = []
    for doc, label, arg in zip(docs, ("BASE", "NEW"), (ns.run_a, ns.run_b)):
        m, why = _measured(doc, label, arg)
        if why:
            return None, why
        meas.append(m)
    base, new = meas
    note = None
    if base["samples_per_s"] is not None and new["samples_per_s"] is not None:
        unit, rates = "samples/s", (base["samples_per_s"], new["samples_per_s"])
    else:
        missing = [label for label, m in (("BASE", base), ("NEW", new)) if m["samples_per_s"] is None]
        lacking = [label for label, m in (("BASE", base), ("NEW", new)) if m["step_time_ms"] is None]
        if lacking:
            return None, (f"{' and '.join(missing)} has no samples/s and {' and '.join(lacking)} no step time: "
                          "the runs cannot be compared")
        unit, rates = "steps/s", (1000.0 / base["step_time_ms"], 1000.0 / new["step_time_ms"])
        note = f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} no samples/s (batch size unknown): comparing steps/s"
    ratio = rates[1] / rates[0]
    threshold = ns.fail_below
    # A relative tolerance so that NEW exactly at threshold x BASE passes despite rounding.
    passed = None if threshold is None else ratio >= threshold * (1 - 1e-9)
    result = {"base": {"run_dir": str(dirs[0]), "samples_per_s": base["samples_per_s"],
                       "step_time_ms": base["step_time_ms"]},
              "new": {"run_dir": str(dirs[1]), "samples_per_s": new["samples_per_s"],
                      "step_time_ms": new["step_time_ms"]},
              "ratio": ratio, "threshold": threshold, "unit": unit, "passed": passed}
    if note:
        result["note"] = note
    if threshold is None:
        line = f"compare: NEW {_rate_text(rates[1])} {unit} is {ratio:.2f}x BASE {_rate_text(rates[0])}"
    else:
        side = "at or above" if passed else "below"
        line = (f"gate: NEW {_rate_text(rates[1])} {unit} is {_ratio_text(ratio, threshold, passed)}x "
                f"BASE {_rate_text(rates[0])} ({side} {threshold:g}): {'pass' if passed else 'FAIL'}")
    if note:
        line += f" [{note}]"
    result["line"] = line
    return result, None


def cmd_compare(ns: argparse.Namespace) -> int:
    if ns.out is None and ns.fail_below is None and not ns.json:
        return _fail("compare needs --out FILE (the HTML page), --fail-below FRACTION (the gate) or --json", 2)
    docs, dirs = [], []
    for run in (ns.run_a, ns.run_b):
        try:
            path = rundir.find_run_json(run)
            docs.append(rundir.read_json(path))
        except (OSError, ValueError) as exc:
            return _fail(str(exc))
        if not isinstance(docs[-1], dict):
            return _fail(f"{path} is not a run.json written by `advisor analyze`")
        dirs.append(path.parent)
    if ns.names:
        names = [n.strip() for n in ns.names.split(",")]
        if len(names) != 2 or not all(names):
            return _fail("--names takes two labels: --names before,after", 2)
    else:
        names = [d.resolve().name for d in dirs]
        if names[0] == names[1]:
            names = ["A", "B"]
    gate = None
    if ns.fail_below is not None or ns.json:
        gate, why = _gate(ns, docs, dirs)
        if why:
            return _fail(why)
    if ns.out is not None:
        from advisor.report.html import write_compare

        out = Path(ns.out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_compare(docs[0], docs[1], dirs[0], dirs[1], out, names=(names[0], names[1]))
        except OSError as exc:
            return _fail(str(exc))
        err.print(f"[cyan]advisor ▸[/] wrote {out}", markup=True, highlight=False)
    if gate is None:
        return 0
    line = gate.pop("line")
    if ns.json:
        print(line, file=sys.stderr)
        sys.stdout.write(orjson.dumps(gate, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(line)
    return 0 if gate["passed"] is not False else EXIT_GATE_FAILED


def cmd_rules(ns: argparse.Namespace) -> int:
    from rich.table import Table

    from advisor.engine import load_rules

    table = Table("code", "name", "severity", "fix", title="advisor rules")
    for rule in load_rules():
        table.add_row(rule.code, rule.name, rule.severity, rule.fix or "")
    Console().print(table)
    return 0


def cmd_rule(ns: argparse.Namespace) -> int:
    from advisor.engine import load_rules

    for rule in load_rules():
        if rule.code.upper() == ns.code.upper() or rule.name == ns.code:
            print(f"{rule.code} {rule.name}\n\n{rule.doc}")
            return 0
    return _fail(f"no rule {ns.code!r}; `advisor rules` lists them", 2)


if __name__ == "__main__":
    sys.exit(main())
