"""What happened, in a few lines that always end an analyze in the terminal: the findings (and
the rules skipped, grouped by why), the fixes kept or why none, where the patch is or why there
is none, the command to run, the report. A run on a CPU that found nothing says why, instead of
ending on a table."""

from __future__ import annotations

import shlex
from collections import Counter

from advisor import failures


def _skipped(doc: dict) -> str:
    skipped = [s for s in doc.get("skipped_rules") or [] if isinstance(s, dict)]
    if not skipped:
        return ""
    why = Counter(str(s.get("reason") or s.get("why") or "?") for s in skipped)
    parts = [f"{n} {reason}" if n > 1 else reason for reason, n in why.most_common(3)]
    return f"; {len(skipped)} rule(s) skipped ({'; '.join(parts)})"


def _findings(doc: dict) -> str:
    found = doc.get("findings") or []
    if not found:
        return "findings: none" + _skipped(doc)
    worst = Counter(str(f.get("severity") or "?") for f in found)
    return f"findings: {len(found)} ({', '.join(f'{n} {s}' for s, n in worst.most_common())})" + _skipped(doc)


def _kept(doc: dict) -> str:
    summary = doc.get("trial_summary") or {}
    if summary.get("unsettled"):
        return f"kept: nothing: {summary['unsettled']}"
    trials = doc.get("trials") or []
    if not trials:
        return "kept: no trials ran (--no-trials, or the run did not complete)" if not doc.get("applied") else \
            f"kept: the fixes you applied (--apply {'; '.join(map(str, doc['applied']))})"
    kept = [t for t in trials if t.get("status") == "accepted" and not t.get("apart")]
    # a failed trial is not a fix found no faster: counted apart, by whose failure it was
    bad = failures.words(trials)
    if not kept:
        ran = [t for t in trials if t.get("status") in ("accepted", "rejected", "unsure")]
        # "none was faster" only where every trial ran to a verdict: a failed one was not measured
        said = [f"{len(ran)} trial(s) ran and none was faster beyond the noise" if not bad else
                f"{len(ran)} trial(s) measured, not faster beyond the noise"] if ran else []
        said += [bad] if bad else []
        # fixes proposed but never started for want of time: the budget's doing, not the fixes'
        unrun = [t for t in trials if t.get("status") == "not run" and not t.get("ceiling")
                 and "budget" in str(t.get("reason") or "")]
        if unrun:
            said.append(f"{len(unrun)} proposed fix trial(s) not run, the trial budget spent "
                        f"({', '.join(str(t.get('name')) for t in unrun[:3])}{', ...' if len(unrun) > 3 else ''}): "
                        "a larger --budget gives them room")
        return f"kept: nothing: {'; '.join(said)}" if said else \
            "kept: nothing: no finding proposed a fix advisor can trial here"
    last = kept[-1]
    gain = last.get("speedup_vs_baseline")
    return f"kept: {', '.join(str(t.get('fix') or t.get('name')) for t in kept)}" + \
        (f" ({gain:.2f}x the baseline in the trials)" if isinstance(gain, (int, float)) else "") + \
        (f"; {bad}" if bad else "")


def _patch(doc: dict) -> list[str]:
    patch = doc.get("patch") or {}
    run_dir = str(doc.get("run_dir") or ".")
    if not patch:
        return ["patch: none (no fix was kept)"]
    placed = [n.get("intervention") for n in patch.get("notes") or [] if n.get("applied")]
    changes = any(n.get("argv_changes") or n.get("env_changes") for n in patch.get("notes") or [])
    if patch.get("file"):
        lines = [f"patch: {run_dir}/{patch['file']} ({', '.join(map(str, placed))})"]
    elif changes:
        lines = [f"patch: no code change; the command below changes what your command line sets ({', '.join(map(str, placed))})"]
    else:
        why = "; ".join(str(n.get("reason")) for n in patch.get("notes") or [] if n.get("reason"))
        lines = [f"patch: none{': ' + why if why else ''}"]
    v = patch.get("verification") or {}
    if v.get("status"):
        lines[0] += f", {v['status']} as plain python"
    if patch.get("command") and (patch.get("file") or changes):
        lines.append(f"run: {shlex.join(str(a) for a in patch['command'])}")   # alone on its line: copyable
    return lines


def outcome_lines(doc: dict) -> list[str]:
    """The closing lines of an analyze (plain text: the terminal escapes them)."""
    return [_findings(doc), _kept(doc), *_patch(doc)]
