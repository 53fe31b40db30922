"""Parent side of a profiling run: validate the script, launch the child (bootstrap.py) in its
own session/process group with the terminal passed through, follow progress.jsonl, enforce
time limits, forward Ctrl-C, and turn child.json into a result with a status and reasons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from advisor.runner import escapes, ranks
from advisor.runner._util import PARENT_ENV, read_json, write_json_atomic
from advisor.runner.follow import Progress, Signals, Stop, follow, stops_of
from advisor.runner.output import open_output, output_path, tail_reason
from advisor.runner.sandbox import library_caches

BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
JAIL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jail.py")
GRACE_S = 5.0          # after SIGINT, how long the child gets to save before SIGKILL
_STARTUP_S = 60.0      # allowance for the child's start-up (torch import) before step_timeout
# A script that stops making progress after its first step (a deadlocked loader, a hung
# collective, a sleep) is stopped once it has been silent this long: no step record and no
# "alive" one (a forward, a batch, a backward, a torch.save: runner/liveness.py). That is
# STALL_STEPS times its median step, at least STALL_MIN_S (one long call between steps, a
# recompile or a big checkpoint, is not a stall), at most STALL_MAX_S.
STALL_STEPS, STALL_MIN_S, STALL_MAX_S = 50, 120.0, 900.0
STACKS = "stacks.txt"  # where the child's faulthandler writes every thread's stack on SIGUSR2
_PY_SUFFIXES = (".py", ".pyw")


def start_child(spec_path: str, cwd: str | None, stdout_to_stderr: bool, warm=None,
                spec: dict | None = None) -> tuple[subprocess.Popen, bool]:
    """The child for the spec at spec_path: the process started ahead (a runner.ahead.WarmChild,
    used or closed) when it fits, else a fresh one; and whether it was the one started ahead.
    A spec with nproc_per_node > 1 starts under torch.distributed.run, never from one ahead.
    A sandboxed spec (``sandbox_root``) starts in the OS-level sandbox (runner/jail.py)."""
    several = spec is not None and ranks.nproc(spec) > 1
    jail = jail_of(spec)
    proc = (warm.go(spec_path) if warm is not None and not several and warm.fits(cwd, stdout_to_stderr, jail)
            else None)
    if proc is not None:
        return proc, True
    if warm is not None:
        warm.close()
    output = output_path(spec, os.path.dirname(spec_path))
    if several:
        return _spawn(ranks.launch_args(spec, BOOTSTRAP, spec_path), cwd, stdout_to_stderr, bare=True, jail=jail,
                      output=output), False
    return _spawn([spec_path], cwd, stdout_to_stderr, jail=jail, output=output), False


def jail_of(spec: dict | None) -> str | None:
    """The directory kept real (advisor's run directory) for a sandboxed spec, else None. A run
    that lets the script's own profiler write where it asks (``own_profiler``) has the Python
    hooks alone."""
    root = (spec or {}).get("sandbox_root")
    if not root or spec.get("own_profiler"):
        return None
    return str(root)


def _spawn(args: list[str], cwd: str | None, stdout_to_stderr: bool, bare: bool = False,
           jail: str | None = None, output: str | None = None) -> subprocess.Popen:
    """bootstrap.py (``bare``: the command line as given) in a new session (its own process
    group, killed as one), in the script's cwd; ``stdout_to_stderr`` (--json): the script's
    prints go to stderr; ``output``: a file its stdout and stderr go to instead (a process
    after the baseline: the sandbox's, a launcher's and python's own start-up messages too);
    ``jail``: the directory kept real in the OS-level sandbox it starts in.
    Its stdin is the one runner/stdin.py hands each process."""
    from advisor.runner import stdin

    env = {**os.environ, PARENT_ENV: str(os.getpid())}  # taken out again before the script runs
    cmd = [sys.executable, *(args if bare else [BOOTSTRAP, *args])]
    if jail is not None:
        cmd = [sys.executable, JAIL, "--root", jail, *(a for p in library_caches(existing=True) for a in ("--pass", p)),
               "--", *cmd]
    out = open_output(output)
    try:
        proc = subprocess.Popen(cmd, cwd=cwd or None, start_new_session=True, stdin=stdin.for_child(jail is not None),
                                stdout=out if out is not None else sys.stderr.fileno() if stdout_to_stderr else None,
                                stderr=out, env=env)
    finally:
        if out is not None:
            os.close(out)
    stdin.started(proc)
    return proc


# ---------------------------------------------------------------------- validation
def validate_script(path) -> str | None:
    """One-line error when `path` cannot be run as a Python script, else None."""
    p = os.fspath(path)
    if not os.path.lexists(p):
        return f"{p}: no such file"
    if not os.path.exists(p):
        return f"{p}: broken symbolic link"
    if os.path.isdir(p):
        return f"{p}: is a directory, not a Python script"
    if not os.path.isfile(p):
        return f"{p}: not a regular file"
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"{p}: cannot read: {e.strerror or e}"
    is_py = p.lower().endswith(_PY_SUFFIXES)
    if p.lower().endswith((".pyc", ".pyo")):
        return f"{p}: not a Python script (compiled bytecode; pass the .py source)"
    if b"\0" in data[:65536]:
        return f"{p}: not a Python script (binary file)"
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, p, "exec", dont_inherit=True)
    except SyntaxError as e:
        if not is_py:
            return (f"{p}: not a Python script (no .py extension and not valid Python: "
                    f"line {e.lineno}: {e.msg})")
        return f"{p}:{e.lineno}: {type(e).__name__}: {e.msg}"
    except (ValueError, UnicodeDecodeError) as e:
        return f"{p}: not a Python script ({e})"
    except (MemoryError, RecursionError) as e:
        return f"{p}: cannot be compiled ({type(e).__name__})"
    return None


# ---------------------------------------------------------------------- run
def _empty_child() -> dict:
    return {"stage": "started", "steps_seen": 0, "step_times_ms": [], "data_wait_ms": [],
            "losses": [], "batch_size": None, "batch_size_source": None,
            "step_source": "optimizer-hook", "trace_files": [], "config": {}, "environment": {},
            "memory": {"max_allocated_bytes": None, "max_reserved_bytes": None, "capacity_bytes": None},
            "notes": [], "exit": {"code": None, "exception": None, "stopped_by_advisor": False}}


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def stall_limit(intervals: list[float], stall_timeout: float | None) -> float:
    """Seconds without progress after which a script that has stepped is stalled."""
    if stall_timeout:
        return float(stall_timeout)
    return min(STALL_MAX_S, max(STALL_MIN_S, STALL_STEPS * (_median(intervals) or 0.0)))


def run_child(spec: dict, *, timeout: float, step_timeout: float, on_progress=None,
              grace: float = GRACE_S, stdout_to_stderr: bool = False, warm=None, held=None,
              stall_timeout: float | None = None, signals=None) -> dict:
    """Run spec["script"] under advisor in a child process; see docs/internals.md §1.
    warm: a runner.ahead.WarmChild to start from; held: a runner.ahead.HeldChild started on
    this spec, waiting at the script's first CUDA use, to release (else it starts as warm).
    signals: what stands for Ctrl-C (a ``count`` that grows) for a run in a thread of its own
    (trials.gpus); else the process's own signals.

    Returns child.json's content plus ``status`` ("complete" | "incomplete"),
    ``incomplete_reasons`` (one-line strings), ``interrupted`` (Ctrl-C was pressed) and
    ``elapsed_s``; ``exit.code`` is the child's real return code (negative: killed by that
    signal) and ``exit.signal`` the signal number or None. Never raises because of the script.
    """
    total = _planned_steps(spec)
    t0, spawned = time.monotonic(), time.time()
    proc, started_warm, started_held = _launch(spec, step_timeout, stdout_to_stderr, warm, held)
    progress = Progress(os.path.join(spec["run_dir"], "progress.jsonl"), on_progress)
    limits = _Limits(t0, timeout, step_timeout, stall_timeout, spec["run_dir"])
    stop = Stop(proc, spec, grace)
    with signals if signals is not None else Signals() as signals:
        signals.pgid = stop.pgid
        try:
            rc = follow(proc, progress, limits, stop, signals)
        finally:
            signals.pgid = None   # its group is gone: nothing may signal the number again
    progress.read_rest()

    result, missing = _merged_result(spec["run_dir"], rc, progress.steps)
    result.update(interrupted=stop.interrupted, stalled=stop.stalled, elapsed_s=round(time.monotonic() - t0, 3),
                  started_warm=started_warm, started_held=started_held)
    if isinstance(result.get("startup"), dict):  # the child's milestones, from the spawn (or the go)
        result["startup"]["spawned"] = round(spawned, 3)
        result["startup"]["stopped"] = stops_of(stop.pgid)   # SIGSTOPs advisor sent it: out of its lead-in
        if started_held:  # ... or the release: what it did before is negative, done ahead
            result["startup"]["ahead_spawned"] = round(held.spawned, 3)
    if ranks.nproc(spec) > 1:
        result["ranks"] = ranks.collect(spec, result)
    # with the hooks alone: what changed in the user's tree meanwhile, past them (native code)
    escapes.note_escapes(result, spec, held.spawned if started_held else spawned)
    reasons = _reasons(result, total, stop.reason, stop.interrupted, missing)
    if reasons and not stop.interrupted:  # its output went to a file: what it said last, with the reasons
        reasons += tail_reason(spec)
    result["status"] = "incomplete" if reasons else "complete"
    result["incomplete_reasons"] = reasons
    return result


def _planned_steps(spec: dict) -> int:
    """The steps the child should take: warm-up, timed and profiled."""
    profile_n = int(spec.get("profile_steps", 3))
    # +1: the profiler's own warmup step (see StepClock in state.py)
    return int(spec.get("warmup_steps", 5)) + int(spec.get("measure_steps", 20)) + (profile_n + 1 if profile_n else 0)


def _launch(spec: dict, step_timeout: float, stdout_to_stderr: bool, warm, held) -> tuple[subprocess.Popen, bool, bool]:
    """The child: the process held on this spec, released (its directory becomes run_dir, its
    progress file the one followed here), else one started now, from warm when it fits.
    Returns (the process, whether it was started ahead, whether it was the held one)."""
    spec_path = os.path.join(spec["run_dir"], "spec.json")
    proc = held.release(spec, spec_path, _STARTUP_S + step_timeout) if held is not None else None
    if proc is not None:
        if warm is not None:
            warm.close()
        return proc, True, True
    _fresh_run_dir(spec, spec_path)
    # stdout_to_stderr: `--json` keeps stdout for advisor's JSON alone; the script's prints
    # still reach the terminal, on stderr.
    proc, started_warm = start_child(spec_path, spec.get("cwd"), stdout_to_stderr, warm, spec)
    return proc, started_warm, False


def _fresh_run_dir(spec: dict, spec_path: str) -> None:
    """spec.json written, an earlier child's child.json gone and its progress.jsonl emptied."""
    run_dir = spec["run_dir"]
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(spec_path, spec)
    progress_path = os.path.join(run_dir, "progress.jsonl")
    for stale in (os.path.join(run_dir, "child.json"), progress_path):
        try:
            os.remove(stale)
        except FileNotFoundError:
            pass
    open(progress_path, "wb").close()


@dataclass
class _Limits:
    """When advisor stops the child: it has not started its script, or not reached a first step,
    in time; the whole run's timeout; a stall after its first step (stall_limit)."""

    t0: float                  # when run_child began (monotonic)
    timeout: float
    step_timeout: float
    stall_timeout: float | None
    run_dir: str

    def passed(self, progress: Progress, now: float) -> tuple[str, bool] | None:
        """The limit the child has passed, as (why it is stopped, whether it stalled); None
        while it is within them all."""
        started_at = progress.started_at
        # step_timeout counts from the script's start (torch's import is not the script's)
        if not progress.first_step and started_at is not None and now - started_at > self.step_timeout:
            return f"never reached a training step within {self.step_timeout:g} s", False
        if started_at is None and now - self.t0 > _STARTUP_S + self.step_timeout:
            return (f"the script did not start within {_STARTUP_S + self.step_timeout:g} s "
                    "(python or torch start-up hung?)"), False
        if now - self.t0 > self.timeout:
            return f"timed out after {self.timeout:g} s", False
        limit = stall_limit(progress.intervals, self.stall_timeout)
        if progress.last_seen is not None and now - progress.last_seen > limit:
            med = _median(progress.intervals)
            return (f"stalled: no progress (no training step, forward, batch or backward) "
                    f"for {limit:g} s after step {progress.steps}"
                    + (f" (its median step: {med * 1e3:.3g} ms)" if med is not None else "")
                    + f"; every thread's stack is in {os.path.join(self.run_dir, STACKS)}"), True
        return None


def _merged_result(run_dir: str, rc: int, steps: int) -> tuple[dict, bool]:
    """child.json (an empty record when the child wrote none: then True) with what the parent
    saw: the steps of its progress records, the real exit code and the signal that killed it."""
    child = read_json(os.path.join(run_dir, "child.json"))
    missing = not isinstance(child, dict)
    result = _empty_child()
    if not missing:
        result.update(child)
    result["steps_seen"] = max(int(result.get("steps_seen") or 0), steps)
    result["losses"] = [float("nan") if v is None else v for v in result.get("losses") or []]
    ex = dict(result.get("exit") or {})
    ex["code"] = rc
    ex["signal"] = -rc if rc is not None and rc < 0 else None
    ex.setdefault("exception", None)
    ex.setdefault("stopped_by_advisor", False)
    result["exit"] = ex
    return result, missing


def _when(steps: int) -> str:
    return "before the first step" if steps == 0 else f"at step {steps + 1}"


def _reasons(r: dict, total: int, kill_reason, interrupted: bool, missing: bool) -> list[str]:
    ex = r["exit"]
    rc = ex["code"]
    steps = r["steps_seen"]
    complete = r.get("stage") == "measured" and not kill_reason and not interrupted
    if complete and rc == 0:
        return []
    out = []
    if kill_reason:
        out.append(kill_reason)
    elif interrupted:
        out.append(f"interrupted (Ctrl-C) {_when(steps)}")
    elif missing and rc not in (None, 0):
        out.append(f"advisor's child process failed before running the script (exit code {rc})")
    elif ex.get("exception") == "KeyboardInterrupt":
        out.append(f"script interrupted (KeyboardInterrupt) {_when(steps)}")
    elif ex.get("exception"):
        out.append(f"script raised {ex['exception']} {_when(steps)}")
    elif rc is not None and rc < 0:
        out.append(f"killed by signal {-rc} ({_signame(-rc)}) {_when(steps)}")
    elif rc not in (None, 0):
        where = "before the first step" if steps == 0 else f"after {steps} steps"
        out.append(f"script exited with code {rc} {where}")
    elif steps == 0:
        out.append("script finished without a training step: no torch.optim optimizer stepped, no backward "
                   "pass was followed by an update of its parameters, and advisor.step() was never called")
    elif r.get("stage") != "measured" and steps < total:
        out.append(f"script finished after {steps} steps, fewer than "
                   f"warmup+measure+profile={total}")
    elif r.get("stage") != "measured":
        # enough steps, but too fast for the timed window's minimum time (a fix that made each
        # step much faster on a short script): the window had not closed when the script ended
        out.append(f"script finished after {steps} steps, before advisor's timed window had run its minimum "
                   f"time (stage {r.get('stage')!r})")
    if not out:
        out.append(f"child ended at stage {r.get('stage')!r} with exit code {rc}")
    return out


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def format_reasons(result: dict) -> str:
    """All reasons on one line (for a console summary)."""
    return "; ".join(result.get("incomplete_reasons") or [])

