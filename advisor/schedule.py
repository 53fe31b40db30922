"""Scripts shorter than advisor's schedule, and scripts that run their own profiler.

A script that ends by itself before advisor has timed and profiled it has told its length:
the steps it ran. The phases are then split over fresh runs of the script, each within that
length (as trials are fresh runs): a timing run, at least MIN_WARMUP warm-up steps then every
step left timed, when the first run timed fewer than MIN_TIMED; and a profiling run,
warm-up, the profiler's own warm-up step and up to profile_steps profiled steps, when it
wrote no trace. Both are sandboxed like trials; their results stand in for the first run's.

A script that profiles itself had its profiler disarmed (two Kineto sessions cannot run at
once). One more run lets it work, sandboxed but for the traces it writes, which land where
the script asked, and stops at the first step after they are written: the user gets the
traces `python script.py` would have left, and advisor's answer too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from advisor import measure, specs
from advisor.runner._util import MIN_TIMED

MIN_WARMUP = 2
# Steps the script's own profiler is given, past the first run's, to write a trace.
OWN_PROFILER_STEPS = 500
DISARMED = "disarmed the script's"
# What the timing run measures: these keys of its result replace the first run's.
TIMING_KEYS = ("step_times_ms", "measure_window_ms", "step_timing", "batches_per_epoch", "settle_steps",
               "left_out_steps", "left_out_ms", "warmup_step_times_ms", "warmup_step_ends", "warmup_step_cpu_wait",
               "data_wait_ms", "item_wait_ms",
               "item_waits", "batch_size", "batch_size_source", "step_counts", "memory")


@dataclasses.dataclass
class Schedule:
    steps: int                   # the script's length, from its first run
    timing: dict | None          # {"warmup_steps", "measure_steps"} of a timing run; None: the first run's window stands
    profile: dict | None         # {"warmup_steps", "profile_steps"} of a profiling run; None: it was profiled

    def describe(self) -> str:
        parts = []
        if self.timing:
            parts.append(f"timed in a run of its own ({self.timing['warmup_steps']} warm-up steps, "
                         f"{self.timing['measure_steps']} timed)")
        if self.profile:
            parts.append(f"profiled in another ({self.profile['warmup_steps']} warm-up steps, 1 for the profiler, "
                         f"{self.profile['profile_steps']} profiled)")
        return f"the script trains {self.steps} steps, fewer than advisor's schedule: " + " and ".join(parts)


def script_steps(child: dict) -> int | None:
    """The script's length when it ended by itself, cleanly, before advisor was done."""
    ex = child.get("exit") or {}
    if ex.get("code") != 0 or ex.get("stopped_by_advisor") or child.get("interrupted") or child.get("stalled"):
        return None
    n = int(child.get("steps_seen") or 0)
    return n or None


def plan(child: dict, profile_steps: int, warmup: int) -> Schedule | None:
    """The runs a first run that ended early still needs; None when it needs none or when its
    end was not the script's own (a crash, a kill: its reasons stand)."""
    n = script_steps(child)
    if n is None or n < 2:
        return None
    timed = len(measure.step_times(child)) >= MIN_TIMED and bool(child.get("measure_window_ms"))
    profiled = bool(child.get("trace_files")) or profile_steps <= 0
    if timed and profiled:
        return None
    timing = None
    if not timed:
        w = min(warmup, max(MIN_WARMUP, n // 3)) if n >= MIN_WARMUP + MIN_TIMED else max(1, n - MIN_TIMED)
        timing = {"warmup_steps": w, "measure_steps": n - w}
    profile = None
    if not profiled:
        p = min(profile_steps, max(1, n - 1 - MIN_WARMUP))
        profile = {"warmup_steps": min(warmup, n - 1 - p), "profile_steps": p}
    return Schedule(n, timing, profile)


def for_trials(opts, sched: Schedule):
    """The trials' options for a short script (its timing run's phases; the window closes with
    the script) and the phases of the profiling run each profiled trial then needs."""
    if sched.timing:
        opts = dataclasses.replace(opts, warmup=sched.timing["warmup_steps"],
                                   measure_steps=sched.timing["measure_steps"], measure_min_s=0.0)
    return opts, sched.profile


def timing_spec(spec: dict, sched: Schedule, where: Path) -> dict:
    return specs.sandbox({**spec, **sched.timing, "profile_steps": 0, "measure_min_s": 0.0, "run_dir": str(where),
                             "tb_dir": str(Path(spec["run_dir"]) / "tb"), "record_lines": False,
                             "count_flops": False}, spec.get("sandbox_root") or spec["run_dir"])


def profile_spec(spec: dict, sched: Schedule, where: Path) -> dict:
    return specs.sandbox({**spec, **sched.profile, "measure_steps": 0, "run_dir": str(where),
                             "tb_dir": str(Path(spec.get("tb_dir") or Path(spec["run_dir"]) / "tb")),
                             "record_lines": False, "count_flops": False},
                            spec.get("sandbox_root") or spec["run_dir"])


def complete(first: dict, spec: dict, sched: Schedule, run, say=None) -> dict:
    """The first run's result with the runs its schedule asks for: `run(spec) -> child`.
    Returns the merged result; its status is the extra runs' (their reasons if they fail)."""
    say = say or (lambda s: None)
    base = Path(spec["run_dir"])
    merged = dict(first)
    reasons: list[str] = []
    runs = [{"run": "first", "steps": sched.steps, "role": "learned the script's length"}]
    if sched.timing:
        say(f"timing the {sched.steps}-step script in a run of its own")
        t = run(timing_spec(spec, sched, base / "schedule" / "timing"))
        runs.append({"run": "timing", **sched.timing, "status": t.get("status")})
        if measure.step_times(t) and t.get("measure_window_ms"):
            merged.update({k: t.get(k) for k in TIMING_KEYS if k in t})
            if t.get("ranks"):   # each rank's timed steps (runner/ranks.py)
                merged["ranks"] = t["ranks"]
        else:
            reasons.append("the timing run measured no step: " + ("; ".join(t.get("incomplete_reasons") or [])
                                                                  or "unknown"))
        merged["notes"] = _union(merged.get("notes"), t.get("notes"))
    if sched.profile:
        say(f"profiling the {sched.steps}-step script in a run of its own")
        p = run(profile_spec(spec, sched, base / "schedule" / "profile"))
        runs.append({"run": "profile", **sched.profile, "status": p.get("status")})
        if p.get("trace_files"):
            merged["trace_files"] = list(p["trace_files"])   # relative to the shared tb root's parent
            traced = {r["rank"]: r.get("trace_files") or [] for r in p.get("ranks") or []}
            merged["ranks"] = [{**r, "trace_files": traced.get(r["rank"], [])} for r in merged.get("ranks") or []]
        else:
            reasons.append("the profiling run wrote no trace: " + ("; ".join(p.get("incomplete_reasons") or [])
                                                                   or "unknown"))
        merged["notes"] = _union(merged.get("notes"), p.get("notes"))
    merged["schedule"] = {"script_steps": sched.steps, "runs": runs, "text": sched.describe()}
    merged["notes"] = _union(merged.get("notes"), [sched.describe()])
    merged["status"] = "incomplete" if reasons else "complete"
    merged["incomplete_reasons"] = reasons
    if not reasons:
        merged["stage"] = "measured"
    return merged


def own_profiler_run(first: dict, spec: dict, run, say=None) -> dict | None:
    """One more run, with the script's own profiler let work, when the first run disarmed it:
    {"traces": [paths it wrote], "steps", "status", "reason"}; None when it had none."""
    if not any(str(n).startswith(DISARMED) for n in first.get("notes") or []):
        return None
    (say or (lambda s: None))("running the script once more with its own profiler, for the traces it writes")
    where = Path(spec["run_dir"]) / "schedule" / "own-profiler"
    steps = int(first.get("steps_seen") or 0)
    child = run(specs.quiet({**spec, "run_dir": str(where), "run_name": "own-profiler", "tb_dir": str(where / "tb"),
                             "warmup_steps": 10 ** 9, "measure_steps": 0, "profile_steps": 0, "own_profiler": True,
                             "max_steps": steps + OWN_PROFILER_STEPS, "sandbox_writes": True, "record_lines": False,
                             "count_flops": False}))
    own = child.get("own_profiler") or {}
    traces = [p for p in own.get("exports") or [] if Path(p).exists() or Path(p + ".gz").exists()]
    out = {"traces": traces, "steps": child.get("steps_seen"), "sessions": own.get("sessions", 0)}
    if traces:
        out["status"] = "written"
    else:
        out["status"] = "none written"
        out["reason"] = "; ".join(child.get("incomplete_reasons") or []) or \
            f"the script's profiler wrote no trace in {child.get('steps_seen')} steps"
    return out


def _union(a, b) -> list:
    out = list(a or [])
    for x in b or []:
        if x not in out:
            out.append(x)
    return out
