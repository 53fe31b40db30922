"""Why a process after the baseline failed, named (docs/trials.md, "Failed trials"): the
script's own error, advisor's, or the environment's. A trial's record, the repeat's, the
ceiling's and the verification's carry it as ``failure`` (contracts.Failure); the terminal's
summary and the report count failed trials by it, apart from the rejected ones.

- ``script``: the user's code raised (child.json ``exit.failure``, read from the traceback in
  the child: runner/tracebacks.py), at the script's own line; or it exited with a non-zero code.
- ``advisor``: one of advisor's own lines raised or made the call that raised (a fix's
  conversion, the sandbox, the runner), the process failed before the script's first line
  (the jail, the bootstrap), a fix failed to apply, or advisor's measurement of the run failed
  (no step timed, a stack that did not hold). advisor's bug: the summary says so.
- ``environment``: out of memory, killed by a signal advisor did not send, or stopped at a
  time limit (no first step in time, a stall, the trial's timeout).

Torch-free: the parent and the reports read it.
"""

from __future__ import annotations

from collections import Counter

from advisor.contracts import Failure

KINDS = ("script", "advisor", "environment")

# The parent's reasons for stopping a child at a limit (runner/parent.py: _Limits.passed)
_LIMITS = ("never reached a training step within", "the script did not start within", "timed out after",
           "stalled: no progress")
_BEFORE_SCRIPT = "advisor's child process failed before running the script"
# runner/session.py: a fix whose run-time part raised while it was installed
FAILED_TO_APPLY = "failed to apply:"
_SIGNALS = {9: "SIGKILL: the host's out-of-memory killer, most likely", 11: "SIGSEGV: a crash in native code",
            6: "SIGABRT: native code aborted", 7: "SIGBUS: a bad memory access in native code"}


def of_process(child: dict) -> Failure | None:
    """The failure of a process that did not complete (run_child's result); None when it
    completed, or Ctrl-C cut it short (that is no failure)."""
    if not isinstance(child, dict) or child.get("status") == "complete" or child.get("interrupted") \
            or child.get("status") == "interrupted":
        return None
    reasons = [str(r) for r in child.get("incomplete_reasons") or []]
    first = reasons[0] if reasons else ""
    ex = child.get("exit") or {}
    steps = int(child.get("steps_seen") or 0)
    when = "before the first step" if steps == 0 else f"at step {steps + 1}"
    if any(first.startswith(p) for p in _LIMITS):
        return {"kind": "environment", "exception": None, "message": first, "when": when}
    found = ex.get("failure")
    if isinstance(found, dict) and found.get("kind") in KINDS:
        return {**found, "when": when}   # type: ignore[typeddict-item]
    if first.startswith(_BEFORE_SCRIPT):
        return {"kind": "advisor", "exception": None, "where": "before the script's first line",
                "message": "; ".join(reasons), "when": "before the script's first line"}
    sig = ex.get("signal")
    if isinstance(sig, int) and sig > 0:
        return {"kind": "environment", "exception": None, "when": when,
                "message": f"killed by signal {sig}" + (f" ({_SIGNALS[sig]})" if sig in _SIGNALS else "")}
    code = ex.get("code")
    if ex.get("exception") or (isinstance(code, int) and code not in (0, None)):
        return {"kind": "script", "exception": str(ex.get("exception") or "SystemExit").split(":")[0],
                "message": first, "when": when}
    # it ran to its end, but advisor's measurement of it did not (too few steps for the window
    # planned, no step recognized): the plan is advisor's
    return {"kind": "advisor", "exception": None, "message": first or "the run measured nothing", "when": when}


def of_trial(runs: list[dict], reason: str) -> Failure:
    """The failure of a trial whose verdict is "failed": its process's (the first that
    failed), else advisor's measurement (no step measured, a fix of the stack that did not
    apply in this run, a fix whose run-time part raised as it was installed)."""
    for r in runs:
        found = of_process(r)
        if found is not None:
            return found
    return {"kind": "advisor", "exception": None, "message": reason}


def under_fixes(f: Failure, baseline: dict, fixes: list[str]) -> Failure:
    """A script's error at a line the baseline ran without it, in a trial of ``fixes``: the fix
    changed what that line is given (a channels-last tensor to ``.view``), so the error is the
    fix's clash with the script, not a bug of the script's that the trial happened on. It stays
    the script's kind (advisor's code did not raise), with ``under`` naming the fixes."""
    where = str(f.get("where") or "")
    path, _, num = where.rpartition(":")
    ran = (baseline.get("executed_lines") or {}).get(path) if isinstance(baseline, dict) else None
    if f.get("kind") == "script" and fixes and num.isdigit() and isinstance(ran, list) and int(num) in ran:
        return {**f, "under": list(fixes)}
    return f


def failed_to_apply(child: dict) -> dict[str, str]:
    """{fix: its error} for each fix whose run-time part raised while it was installed
    (runner/session.py's note "intervention 'NAME' failed to apply: ERROR")."""
    out = {}
    for note in child.get("notes") or []:
        head, sep, err = str(note).partition(f" {FAILED_TO_APPLY} ")
        if sep and head.startswith("intervention '") and head.endswith("'"):
            out[head[len("intervention '"):-1]] = err
    return out


def count(trials: list[dict]) -> dict[str, int]:
    """Failed trials by kind ({"script": n, "advisor": n, "environment": n}); a record written
    before failures were named counts as advisor's (nothing says it was the script)."""
    out = dict.fromkeys(KINDS, 0)
    for t in failed(trials):
        out[kind_of(t)] += 1
    return out


def failed(trials: list[dict]) -> list[dict]:
    return [t for t in trials if isinstance(t, dict) and t.get("status") == "failed"]


def kind_of(t: dict) -> str:
    kind = (t.get("failure") or {}).get("kind") if isinstance(t.get("failure"), dict) else None
    return kind if kind in KINDS else "advisor"


def at(f: dict) -> str:
    """Where a failure happened, with its exception: "src/train.py:31 (FileNotFoundError)"."""
    where = f.get("where") or ""
    exc = f.get("exception") or ""
    return f"{where} ({exc})" if where and exc else where or exc or str(f.get("message") or "?")


def words(trials: list[dict]) -> str:
    """The failed trials in one clause: "8 trial(s) failed (8 through the script's error at
    src/train.py:31 (FileNotFoundError: ...); 0 through advisor)"; "" when none failed. A failure
    through advisor is called advisor's bug, with where it was raised."""
    bad = failed(trials)
    if not bad:
        return ""
    by = count(trials)
    parts = []
    script = [t.get("failure") or {} for t in bad if kind_of(t) == "script"]
    if script:
        common = Counter(at(f) for f in script).most_common(2)
        first = next(f for f in script if at(f) == common[0][0])
        msg = f": {first['message']}" if first.get("message") and first.get("where") else ""
        under = f" under {'+'.join(first['under'])} (a line the baseline ran)" if first.get("under") else ""
        parts.append(f"{by['script']} through the script's error{under} at {common[0][0]}{msg}"
                     + (", and elsewhere" if len(common) > 1 else ""))
    else:
        parts.append("0 through the script's error")
    ours = [t.get("failure") or {"message": t.get("reason")} for t in bad if kind_of(t) == "advisor"]
    if ours:
        common = Counter(at(f) for f in ours).most_common(1)[0][0]
        parts.append(f"{by['advisor']} through advisor (advisor's bug: {common}; please report it)")
    else:
        parts.append("0 through advisor")
    if by["environment"]:
        env = [t.get("failure") or {} for t in bad if kind_of(t) == "environment"]
        parts.append(f"{by['environment']} through the environment ({Counter(str(f.get('message')) for f in env).most_common(1)[0][0]})")
    return f"{len(bad)} trial(s) failed ({'; '.join(parts)})"


def line(f: dict) -> str:
    """One failure in a line for a trial's reason: "the script's error at train.py:31:
    open('../log.txt', 'a')", "advisor's bug at advisor/interventions/channels_last.py:42 (through
    the script's task.py:11)", "the environment: killed by signal 9 (...)"."""
    kind = f.get("kind")
    src = f": {f['line']}" if f.get("line") else ""
    if kind == "script" and f.get("under"):
        return (f"the script's error under {'+'.join(f['under'])} at {f['where']}{src} (the baseline ran that "
                f"line: the fix changes what it is given)")
    if kind == "script":
        return f"the script's error at {f['where']}{src}" if f.get("where") else f"the script's error: {f.get('message')}"
    if kind == "environment":
        return f"the environment: {f.get('message')}" + (f" at {f['where']}" if f.get("where") else "")
    via = f" (through the script's {f['script_where']}: {f.get('script_line')})" if f.get("script_where") else ""
    return (f"advisor's bug at {f['where']}{src}{via}" if f.get("where") else
            f"advisor's bug: {f.get('message')}")
