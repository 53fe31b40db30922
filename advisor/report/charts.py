"""What the report's charts draw, one run or two: the per-row numbers of the trials and breakdown
charts, kernel shares, and a step's timeline. Shared by the run page (html.py) and the compare
page (compare.py)."""

from __future__ import annotations

from pathlib import Path

from advisor.report import view
from advisor.report.timeline import timeline_from_file


def timeline(run_dir: Path | None, traces: list[str], title: str) -> dict | None:
    if run_dir is None or not traces:
        return None
    path = run_dir / traces[-1]
    if not view.in_run_dir(traces[-1]) or not path.is_file():
        return {"title": title, "missing": f"{traces[-1]} is not in the run directory"}
    tl, err = timeline_from_file(path)
    if tl is None:
        return {"title": title, "missing": err or "no steps in the trace"}
    return {"title": title, **tl}


def bars(rows: list[dict], scaled: bool = False) -> list[dict]:
    """The per-row numbers the charts draw (labels are data; the page draws them as text).
    scaled: each row's breakdown scaled to its own measured step where it has one (the
    profiler's overhead taken out), else as profiled."""
    out = []
    for r in rows:
        ov = r.get("overhead") or {}
        breakdown = ov["breakdown"] if scaled and ov.get("scaled") else r["breakdown"]
        out.append({"name": r["name"], "label": r["label"], "status": r["status"], "apart": r["apart"],
                    "gain": r["gain"], "speedup": r["speedup"], "samples_per_s": r["samples_per_s"],
                    "step_time_ms": r["step_time_ms"], "peak_memory_bytes": r["peak_memory_bytes"],
                    "profiled_step_time_ms": r["profiled_step_time_ms"],
                    "breakdown": {k: view.num(v) for k, v in (breakdown or {}).items()},
                    "breakdown_scaled": bool(scaled and ov.get("scaled")),
                    "kernels": {k: view.num(v) for k, v in (r["kernel_time_by_class"] or {}).items()}})
    return out


def nums(d) -> dict:
    return {str(k): view.num(v) for k, v in (d or {}).items()} if isinstance(d, dict) else {}
