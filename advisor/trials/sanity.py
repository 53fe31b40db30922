"""Measurement sanity: two runs of the same unchanged script that disagree by more than any
plausible run-to-run noise (a tenfold difference on a loaded host: docs/trials.md) are a
measurement failure, not noise. advisor says what it sees in the runs (a window still
warming up, a one-off step inside it, a loaded host), times the reference again, and judges fixes
only once two or more runs agree; otherwise it says the host is too noisy to judge them, with the
figures, instead of a threshold of several hundred percent."""

from __future__ import annotations

import math
import os
import statistics

from advisor import measure

IMPLAUSIBLE = 0.5   # runs of one configuration further apart than this: not noise
RETIMES = 2         # more runs of the reference before giving up
WARMING = 1.5       # a window whose first third is this much slower than its last still warmed up
ONE_OFF = 5.0       # a step this many times the window's median is a one-off


def load_average() -> float | None:
    """The host's 1-minute load average (/proc/loadavg; os.getloadavg elsewhere), None if unknown."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def _run_note(name: str, child: dict) -> str | None:
    times = measure.step_times(child)
    if len(times) < 3:
        return None
    med, third = statistics.median(times), max(1, len(times) // 3)
    first, last = statistics.fmean(times[:third]), statistics.fmean(times[-third:])
    if first > WARMING * last:
        return f"{name}'s timed window was still warming up (its first steps {first:.1f} ms, its last {last:.1f} ms)"
    worst = max(times)
    if worst > ONE_OFF * med and (worst - med) > 0.3 * sum(times):
        return f"one step of {worst:.1f} ms inside {name}'s window (its median {med:.1f} ms)"
    return None


def diagnose(named_runs: list[tuple[str, dict]], cpu_count: int | None = None) -> str:
    """What the runs' step times and the host say about why they disagree, in words."""
    notes = [n for n in (_run_note(name, run) for name, run in named_runs) if n]
    load, cpus = load_average(), cpu_count or os.cpu_count() or 1   # the machine's, as the load average
    if load is not None and load > cpus:
        notes.append(f"the host is loaded (load average {load:.1f} on {cpus} cores)")
    return "; ".join(notes) or "nothing in the runs' step times or the host's load explains it"


def _log(run: dict) -> float | None:
    rate = measure.samples_per_s(run) or (1e3 / measure.step_ms(run) if measure.step_ms(run) else None)
    return math.log(rate) if rate else None


def settle(runs: list[dict]) -> tuple[list[dict], dict | None, float | None]:
    """(the runs that agree, the one left out or None, their noise): every run when they agree
    within IMPLAUSIBLE, else all but the one furthest from the others' median when the rest
    then agree; their noise is None when they never do."""
    noise = measure.pooled_noise([runs])
    if noise is not None and noise <= IMPLAUSIBLE:
        return runs, None, noise
    if len(runs) < 3:
        return runs, None, None
    logs = [_log(r) for r in runs]

    def distance(i):
        others = [x for j, x in enumerate(logs) if j != i and x is not None]
        return abs(logs[i] - statistics.median(others)) if logs[i] is not None and others else math.inf
    worst = max(range(len(runs)), key=distance)
    rest = [r for i, r in enumerate(runs) if i != worst]
    noise = measure.pooled_noise([rest])
    return (rest, runs[worst], noise) if noise is not None and noise <= IMPLAUSIBLE else (runs, None, None)


def rates_text(named_runs: list[tuple[str, dict]]) -> str:
    return ", ".join(f"{name} {measure.step_ms(run):.1f} ms" for name, run in named_runs if measure.step_ms(run))
