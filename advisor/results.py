"""A process's results → the run's analysis and document: its traces parsed into the model and
its metrics (each rank's too), the rules' findings, the measurement, run.json and its summary."""

from __future__ import annotations

import datetime as _dt
import statistics
from pathlib import Path

import advisor
from advisor import measure
from advisor.contracts import Finding, RunDocument

RUN_SCHEMA = 1


def summarize_measurement(child: dict) -> dict:
    """Throughput from the unprofiled, synchronized steps (no profiler overhead in it)."""
    times = measure.step_times(child)
    out: dict = {"steps_measured": len(times), "batch_size": child.get("batch_size"),
                 "batch_size_source": child.get("batch_size_source"),
                 "micro_batches": measure.micro_batches(child),
                 "left_out_steps": child.get("left_out_steps") or {}}
    if child.get("window_closed_by"):   # runner/window.py: the steps asked, min time, precise, ...
        out["window_closed_by"] = child["window_closed_by"]
    if child.get("batches_per_epoch"):   # the training loader's len(): a break-even in epochs too
        out["steps_per_epoch"] = max(1, int(child["batches_per_epoch"]) // measure.micro_batches(child))
    if int(child.get("world_size") or 1) > 1:
        out["ranks"] = int(child["world_size"])   # samples/s counts every rank's batch
    if child.get("compile_s"):   # torch.compile's seconds in the baseline (runner.oneoffs.compile_seconds)
        out["compile_s"] = child["compile_s"]
    if not times:
        return out
    out["step_time_ms"] = measure.step_ms(child)
    out["step_time_median_ms"] = measure.median_step_ms(child)
    if child.get("measure_window_ms"):
        out["window_s"] = child["measure_window_ms"] / 1e3
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4)
        out["step_time_iqr_ms"] = q[2] - q[0]
    out["step_time_min_ms"] = min(times)
    out["step_time_max_ms"] = max(times)
    if measure.samples_per_s(child):
        out["samples_per_s"] = measure.samples_per_s(child)
    if (rate := measure.tokens_per_s(child)) is not None:   # a sequence model's batches: real tokens, padding apart
        out["tokens_per_s"], out["padding_frac"] = rate, measure.padding_frac(child)
    waits = [w for w in child.get("data_wait_ms") or [] if w is not None]
    if waits:
        out["data_wait_ms"] = statistics.median(waits)
    return out


def analyze_trace_files(run_dir: Path, trace_files: list[str]) -> tuple[dict | None, object | None, str | None]:
    """Load the newest trace of a run and compute its metrics; (analysis, model, error)."""
    from advisor.metrics import analyze
    from advisor.trace import TraceError, load_trace

    if not trace_files:
        return None, None, "no trace was captured"
    path = run_dir / trace_files[-1]
    try:
        model = load_trace(path)
    except TraceError as exc:
        return None, None, f"trace unreadable: {exc}"
    return analyze(model), model, None


def rank_analyses(run_dir: Path, child: dict, analysis: dict | None) -> tuple[list, list, list[dict]]:
    """For a run of several ranks: the other ranks' trace models and analyses (the rules read
    them beside rank 0's: exposed communication, stragglers) and one row per rank: its timed
    step, data wait, and its profiled phases and communication per step."""
    from advisor.metrics import analyze
    from advisor.trace import TraceError, load_trace

    models, analyses, rows = [], [], []
    for r in child.get("ranks") or []:
        row = {"rank": r["rank"], "device": r.get("device"), "trace_files": r.get("trace_files") or []}
        if r.get("measure_window_ms") and measure.step_times(r):
            row["step_time_ms"] = measure.step_ms(r)   # the window over its steps, as the run's own
        waits = [w for w in r.get("data_wait_ms") or [] if w is not None]
        if waits:
            row["data_wait_ms"] = sum(waits) / len(waits)
        a = analysis if r["rank"] == 0 else None
        if r["rank"] != 0 and r.get("trace_files"):
            try:
                model = load_trace(run_dir / r["trace_files"][-1])
                a = analyze(model)
                models.append(model)
                analyses.append(a)
            except TraceError as exc:
                row["trace_error"] = str(exc)
        if a:
            row["breakdown_ms"] = {k: round(float(v), 3) for k, v in (a.get("breakdown") or {}).items()}
            comm = a.get("communication") or {}
            row["communication_ms"] = comm.get("ms_per_step")
            row["exposed_communication_ms"] = comm.get("exposed_ms_per_step")
        if r.get("missing"):
            row["missing"] = r["missing"]
        rows.append(row)
    return models, analyses, rows


def merge_child_results(analysis: dict | None, child: dict) -> None:
    """What the child measured outside the trace: peak memory when the trace has no allocator
    events, and the timed window's data waits (epoch starts seldom fall in profiled steps)."""
    if analysis is None:
        return
    times = measure.step_times(child)
    waits = [w for w in child.get("data_wait_ms") or [] if w is not None]
    window = child.get("measure_window_ms") or sum(times)
    if times and waits and window:
        analysis["measured"] = {"steps": len(times), "step_ms": window / len(times),
                                "data_wait_ms_per_step": sum(waits) / len(times),
                                "data_wait_frac": sum(waits) / window, "longest_data_wait_ms": max(waits)}
        if child.get("item_waits"):  # the host's waits in .item() on device tensors, unprofiled
            analysis["measured"]["item_wait_ms_per_step"] = float(child.get("item_wait_ms") or 0.0) / len(times)
        if child.get("window_compiles"):   # torch.compile's graphs made inside the window: recompiles
            analysis["measured"]["window_compiles"] = int(child["window_compiles"])
            analysis["measured"]["window_compiles_per_step"] = int(child["window_compiles"]) / len(times)
        if child.get("graph_breaks"):
            analysis["measured"]["graph_breaks"] = list(child["graph_breaks"])
        if (padding := measure.padding_frac(child)) is not None:
            analysis["measured"]["padding_frac"] = padding
        gc = child.get("gc") or {}
        if gc.get("collections") is not None:   # Python's collections in the window (runner/gctime.py)
            analysis["measured"].update(gc_ms_per_step=float(gc.get("ms") or 0.0) / len(times),
                                        gc_frac=float(gc.get("ms") or 0.0) / window,
                                        gc_collections=list(gc["collections"]),
                                        gc_longest_ms=float(gc.get("longest_ms") or 0.0))
    mem = analysis.setdefault("memory", {}) or {}
    analysis["memory"] = mem
    cm = child.get("memory") or {}
    if not mem.get("peak_allocated_bytes") and cm.get("max_allocated_bytes"):
        mem["peak_allocated_bytes"] = cm["max_allocated_bytes"]
        mem["peak_source"] = "torch.cuda.max_memory_allocated"
    if not mem.get("capacity_bytes") and cm.get("capacity_bytes"):
        mem["capacity_bytes"] = cm["capacity_bytes"]


def run_findings(model, analysis: dict | None, config: dict, environment: dict, rules_dirs: list[str],
                 extra_models: list | None = None, extra_analyses: list | None = None,
                 rules: list | None = None, thresholds=None) -> tuple[list[Finding], list]:
    """Run the rule catalogue (`rules` when loaded already, else the built-in one and
    `rules_dirs`); returns (findings, skipped). Missing engine → nothing."""
    if model is None or analysis is None:
        return [], []
    try:
        from advisor.engine import run_rules
    except ImportError:  # the rule engine is optional while it is being built
        return [], []
    return run_rules(model, analysis, config=config, environment=environment, extra_dirs=rules_dirs,
                     extra_models=extra_models, extra_analyses=extra_analyses, rules=rules, thresholds=thresholds)


def build_run_document(spec: dict, child: dict, analysis: dict | None, findings: list,
                       skipped: list, extra_reasons: list[str]) -> RunDocument:
    reasons = list(child.get("incomplete_reasons") or []) + extra_reasons
    status = "complete" if child.get("status") == "complete" and not extra_reasons else "incomplete"
    return {
        "schema": RUN_SCHEMA,
        "advisor_version": advisor.__version__,
        "created": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "run_dir": spec["run_dir"],
        "command": {"script": spec["script"], "argv": spec["argv"], "cwd": spec["cwd"]},
        "settings": {k: spec.get(k) for k in ("warmup_steps", "profile_steps", "measure_steps",
                                              "measure_min_s", "record_memory", "with_stack")},
        "status": status,
        "incomplete_reasons": reasons,
        "exit": child.get("exit"),
        "stage": child.get("stage"),
        "steps_seen": child.get("steps_seen"),
        "step_source": child.get("step_source"),
        "measurement": summarize_measurement(child),
        "losses": child.get("losses") or [],
        "config": child.get("config") or {},
        "executed_lines": child.get("executed_lines") or {},
        "applied": child.get("interventions_applied") or [],
        "environment": child.get("environment") or {},
        "memory": child.get("memory") or {},
        "notes": [*(child.get("notes") or []), *filter(None, [measure.step_source_text(child), measure.left_out_text(child)])],
        "traces": {spec["run_name"]: child.get("trace_files") or []},
        "analysis": analysis,
        "findings": findings,
        "skipped_rules": skipped,
        "trials": [],
    }


def json_summary(doc: dict) -> dict:
    """The machine-readable answer of `--json`: the headline figures first. `breakdown` is the
    profiled step's; `breakdown_scaled_to_measured` is it scaled to the measured (unprofiled)
    step, each phase × measured / profiled (None without a measured step), and
    `profiler_overhead` is profiled / measured (None without both)."""
    from advisor.report.overhead import profiler_overhead

    analysis = doc.get("analysis") or {}
    meas = doc.get("measurement") or {}
    ov = profiler_overhead(analysis, meas)
    return {
        "run_dir": doc.get("run_dir"),
        "status": doc.get("status"),
        "incomplete_reasons": doc.get("incomplete_reasons"),
        "step_time_ms": meas.get("step_time_ms", analysis.get("step_time_ms")),
        "profiled_step_time_ms": analysis.get("step_time_ms"),
        "samples_per_s": meas.get("samples_per_s"),
        "batch_size": meas.get("batch_size"),
        "breakdown": analysis.get("breakdown"),
        "breakdown_scaled_to_measured": ov["breakdown"] if ov["scaled"] else None,
        "profiler_overhead": ov["factor"],
        "kernel_time_by_class": analysis.get("kernel_time_by_class"),
        "gpu_busy_pct": analysis.get("gpu_busy_pct"),
        "findings": doc.get("findings"),
        "environment": doc.get("environment"),
    }


def environment_from_trace(model) -> dict:
    """What a trace says of its machine (for `inspect`, where no runner observed it)."""
    meta = getattr(model, "meta", {}) or {}
    props = meta.get("device_properties") or []
    env: dict = {"gpu_count": len(props)}
    if props:
        env["gpu_name"] = props[0].get("name")
        env["gpu_memory_bytes"] = props[0].get("totalGlobalMem")
        major, minor = props[0].get("computeMajor"), props[0].get("computeMinor")
        if major is not None:
            env["compute_capability"] = f"{major}.{minor}"
    for key, out in (("cuda_runtime_version", "cuda_runtime"), ("cuda_driver_version", "cuda_driver")):
        if meta.get(key) is not None:
            env[out] = meta[key]
    return env
