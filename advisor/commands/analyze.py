"""`advisor analyze` on the terminal: the command line mapped onto advisor.pipeline's options,
Ctrl-C (CtrlC), the progress lines and the summary. The stages are advisor.pipeline.Analyze's."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import orjson

from advisor import results, rundir, specs
from advisor.commands import err, fail as _fail, say
from advisor.pipeline import Analyze, StageOptions, interrupted
from advisor.trials.process import default_budget_s

EXIT_INTERRUPTED = 130  # as a shell reports a command Ctrl-C stopped (128 + SIGINT)
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
    only = set(ns.fix.split(",")) if ns.fix else None
    unknown = sorted((only or set()) - set(fixes.names()))
    if unknown:
        return _fail(f"--fix: no fix named {', '.join(unknown)}; known: {', '.join(fixes.names())}", 2)
    allow = frozenset(filter(None, (w.strip() for w in (getattr(ns, "allow", "") or "").split(","))))
    words = {f.allowed_by for f in fixes.all_fixes() if f.allowed_by}
    if allow - words:
        return _fail(f"--allow: no such choice {', '.join(sorted(allow - words))}; known: {', '.join(sorted(words))}", 2)
    try:
        applied = fixes.parse_specs(ns.apply) if ns.apply else []
    except ValueError as exc:
        return _fail(f"--apply: {exc}", 2)
    opts = specs.AnalyzeOptions(
        warmup=ns.warmup, profile_steps=ns.profile_steps, measure_steps=ns.steps, measure_min_s=ns.min_time,
        # the budget's default by the GPUs is known after the baseline: the one-GPU one here
        measure_max_s=specs.window_cap_s(ns.budget * 60.0 if ns.budget else default_budget_s(1)), timeout=ns.timeout,
        step_timeout=ns.step_timeout, stall_timeout=ns.stall_timeout, out=ns.out, record_memory=ns.memory,
        with_stack=ns.with_stack, record_shapes=ns.shapes, rules_dirs=ns.rules,
        thresholds=ns.thresholds, verbose=getattr(ns, "verbose", False),
        # --apply ddp runs every process of the run as the ddp fix launches it, the baseline's too
        nproc_per_node=specs.launch_nproc(applied, max(1, ns.nproc_per_node)))
    stages = StageOptions(
        trials=not ns.no_trials, verify=not getattr(ns, "no_verify", False), only=only, applied=applied,
        budget_s=ns.budget * 60.0 if ns.budget else None, max_trials=ns.max_trials, trial_timeout=ns.trial_timeout, json=ns.json,
        run_steps=getattr(ns, "run_steps", None), allow=allow, gpus=getattr(ns, "gpus", None),
        trial_gpus=getattr(ns, "trial_gpus", None),
        # ranks start under torch.distributed.run, never ahead (runner/ranks.py)
        lookahead=0 if opts.nproc_per_node > 1 else ns.lookahead)
    try:
        run_dir = rundir.new_run_dir(script, ns.out)
        if getattr(ns, "cache", None):
            specs.use_cache_dir(ns.cache)
    except OSError as exc:
        return _fail(str(exc))
    spec = specs.make_spec(script, script_args, run_dir, opts, interventions=applied)
    # the script's stdin, read once and replayed to every process (runner/stdin.py)
    spec["stdin"] = stdin.capture()
    say(f"run directory {run_dir}")
    with CtrlC() as ctrl_c:
        try:
            run = Analyze(script, script_args, run_dir, spec, opts, stages, progress=say, on_stage=_progress,
                          ctrl_c=ctrl_c, started=started)
            doc, child = run.run()
        except _Abort:
            return _stopped_at_once(run_dir, ctrl_c)
    return _finish(doc, child, run_dir, ns.json)


def _finish(doc: dict, child: dict, run_dir: Path, as_json: bool) -> int:
    """The summary on the terminal (or --json's on stdout) and the exit status."""
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(results.json_summary(doc), option=orjson.OPT_INDENT_2) + b"\n")
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
        interrupted(doc, during, f"stopped at once by a second Ctrl-C during the {during}: run.json holds what "
                                  "was written before it")
        rundir.write_run(run_dir, doc)
    except (OSError, ValueError):  # none written yet (the baseline was running), or not readable
        pass
    return _fail(f"stopped (Ctrl-C twice): what was written is kept in {run_dir}", EXIT_INTERRUPTED)
