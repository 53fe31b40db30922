"""Trials: re-run the unmodified script with each proposed fix applied at run time, keep
what is faster beyond noise with healthy loss, and stack the winners.

The ladder is greedy, as a performance engineer works: candidates ranked by the rules'
estimated gain are tried one at a time on top of the fixes accepted so far; after each
accepted fix the new trace is analysed and the rules re-run, so costs that only show
once the first ones are gone (launch-bound after AMP, say) join the queue. Fixes that
change training dynamics (batch size) are measured apart, on top of the final stack.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from advisor import interventions, measure, pipeline

# Fixes a rule may name that advisor cannot apply at run time: shown as suggestions.
SUGGEST_ONLY = {"uint8-inputs", "defer-syncs", "expandable-segments", "ddp", "grad-scaler",
                "overlap-communication", "cuda-graphs", None}
APART = {"batch-size"}


@dataclass
class Candidate:
    name: str                       # intervention name
    params: dict = field(default_factory=dict)
    origin: str | None = None       # rule code that proposed it
    est_gain_ms: float | None = None
    group: str | None = None        # candidates of one group compete; the best is kept

    @property
    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()) if not k.startswith("_"))
        return f"{self.name}({extra})" if extra else self.name

    def as_spec(self) -> dict:
        return {"name": self.name, "params": dict(self.params)}


def expand(fix: dict, origin: str | None, gain: float | None, environment: dict) -> list[Candidate]:
    """One finding's fix → the concrete trials that test it."""
    name = fix.get("intervention")
    if name in SUGGEST_ONLY or fix.get("suggest_only") or name not in interventions.MODULES:
        return []
    params = {k: v for k, v in (fix.get("params") or {}).items() if v is not None}
    if name == "dataloader-workers":
        cpus = int(environment.get("cpu_count") or os.cpu_count() or 2)
        # A few values, not a sweep: each trial is a fresh process. Half the cores and all
        # of them (up to 8: beyond that workers mostly contend for the same memory bandwidth).
        values = sorted({max(2, min(8, cpus) // 2), max(2, min(8, cpus))})
        pin = bool(environment.get("gpu_count"))
        return [Candidate(name, {"num_workers": v, "pin_memory": pin}, origin, gain, group="dataloader-workers")
                for v in values]
    if name == "pin-memory":
        return [Candidate("pin-memory", {"pin_memory": True}, origin, gain)]
    if name == "batch-size":
        return [Candidate(name, {"factor": f}, origin, gain, group="batch-size") for f in (2, 4)]
    if name == "amp":
        return [Candidate(name, {"dtype": params.get("dtype", "bfloat16")}, origin, gain)]
    if name == "torch-compile":
        return [Candidate(name, {}, origin, gain)]
    return [Candidate(name, {}, origin, gain)]


def candidates_from_findings(findings: list[dict], environment: dict, only: set[str] | None) -> list[Candidate]:
    out: list[Candidate] = []
    for f in findings:
        fix = f.get("fix") or {}
        for c in expand(fix, f.get("code"), f.get("estimated_gain_ms"), environment):
            if only is None or c.name in only:
                out.append(c)
    if only:  # --fix names a fix no rule proposed: trial it anyway
        named = {c.name for c in out}
        for name in only - named:
            out.extend(expand({"intervention": name}, None, None, environment))
    return out


@dataclass
class TrialContext:
    script: str
    script_args: list[str]
    run_dir: Path
    opts: "pipeline.AnalyzeOptions"
    baseline: dict                  # the baseline's child result
    baseline_findings: list
    environment: dict
    budget_s: float = 900.0
    max_trials: int = 16
    trial_timeout: float = 900.0
    only: set[str] | None = None
    progress: object = None         # callable(str) for one-line progress
    stdout_to_stderr: bool = False  # --json: the script's output must not mix with advisor's
    started: float = field(default_factory=time.monotonic)


def _run(ctx: TrialContext, name: str, stack: list[Candidate]) -> tuple[dict, dict | None, object]:
    from advisor.runner.parent import run_child

    trial_dir = ctx.run_dir / "trials" / name
    trial_dir.mkdir(parents=True, exist_ok=True)
    spec = pipeline.make_spec(ctx.script, ctx.script_args, trial_dir, ctx.opts,
                              interventions=[c.as_spec() for c in stack], run_name=name)
    spec["tb_dir"] = str(ctx.run_dir / "tb")
    spec["sandbox_writes"] = True
    spec["seed"] = 0
    child = run_child(spec, timeout=ctx.trial_timeout, step_timeout=ctx.opts.step_timeout,
                      stdout_to_stderr=ctx.stdout_to_stderr)
    if child.get("interrupted"):  # Ctrl-C reached the trial: stop the ladder, keep the rest
        raise KeyboardInterrupt
    analysis, model, _err = pipeline.analyze_trace_files(ctx.run_dir, child.get("trace_files") or [])
    pipeline.merge_child_memory(analysis, child)
    return child, analysis, model


def _plus_one(gain: float | None) -> float | None:
    return None if gain is None else 1.0 + gain


def _describe(child: dict, analysis: dict | None, base: dict) -> dict:
    mem = child.get("memory") or {}
    return {
        "step_time_ms": measure.median_step_ms(child),
        "samples_per_s": measure.samples_per_s(child),
        "batch_size": child.get("batch_size"),
        "steps_measured": len(measure.step_times(child)),
        "elapsed_s": child.get("elapsed_s"),
        "first_step_ms": (child.get("warmup_step_times_ms") or [None])[0],
        "peak_memory_bytes": mem.get("max_allocated_bytes"),
        "speedup_vs_baseline": _plus_one(measure.throughput_gain(child, base)),
        "losses": child.get("losses") or [],
        "traces": child.get("trace_files") or [],
        "breakdown": (analysis or {}).get("breakdown"),
        "profiled_step_time_ms": (analysis or {}).get("step_time_ms"),
        "kernel_time_by_class": (analysis or {}).get("kernel_time_by_class"),
    }


def run_trials(ctx: TrialContext) -> dict:
    """Run the ladder; returns {"noise", "threshold", "trials": [...], "stack": [...], "apart": [...]}."""
    say = ctx.progress or (lambda s: None)
    trials: list[dict] = []
    result = {"noise": None, "threshold": None, "trials": trials, "stack": [], "apart": [], "interrupted": False}
    base = ctx.baseline
    try:
        say("repeating the baseline to measure run-to-run noise")
        repeat, _, _ = _run(ctx, "00-baseline-repeat", [])
        repeat_ok = repeat.get("status") == "complete"
        noise = measure.run_noise(base, repeat) if repeat_ok else 0.0
        # Trials run seeded (spec seed 0) and so does the repeat; the baseline ran exactly as
        # python would, unseeded. Losses are compared with the seeded twin when there is one.
        loss_ref = repeat if repeat_ok else base
        threshold = measure.acceptance_threshold(noise)
        result.update(noise=noise, threshold=threshold)
        trials.append({"name": "00-baseline-repeat", "fix": "baseline (repeat)", "status": "reference",
                       "reason": f"run-to-run noise {noise:.1%}; accept gains above {threshold:.1%}",
                       "interventions": [], **_describe(repeat, None, base)})

        queue = candidates_from_findings(ctx.baseline_findings, ctx.environment, ctx.only)
        stack: list[Candidate] = []
        ref, ref_config = base, base.get("config") or {}
        tried: set[str] = set()
        # Values of one setting (worker counts) compete: the best accepted one is kept once
        # the last of them has run. group -> (candidate, child, analysis, model, record)
        pending: dict[str, tuple] = {}
        n = 0

        def commit(cand, child, analysis, model):
            nonlocal ref, ref_config, queue
            stack.append(cand)
            result["stack"] = [c.as_spec() for c in stack]
            ref, ref_config = child, child.get("config") or ref_config
            queue = _requeue(queue, child, analysis, model, ctx, tried)

        while queue:
            cand = queue.pop(0)
            if cand.key in tried or (cand.group is None and cand.name in {c.name for c in stack}):
                continue
            tried.add(cand.key)
            if cand.name in APART:
                result["apart"].append(cand)
                continue
            if time.monotonic() - ctx.started > ctx.budget_s or n >= ctx.max_trials:
                trials.append({"name": cand.key, "fix": cand.name, "status": "not run",
                               "reason": "trial budget spent", "interventions": []})
                continue
            mod = interventions.get(cand.name)
            why = mod.not_applicable(ref_config, ctx.environment, cand.params)
            if why:
                trials.append({"name": cand.key, "fix": cand.name, "params": cand.params, "status": "skipped",
                               "reason": why, "origin": cand.origin, "interventions": []})
            else:
                n += 1
                values = [str(v) for v in cand.params.values() if not isinstance(v, bool)]
                name = f"{n:02d}-{cand.name}" + (f"-{'-'.join(values)}" if cand.group and values else "")
                say(f"trial {name}: {mod.describe(cand.params)}")
                child, analysis, model = _run(ctx, name, [*stack, cand])
                rec = {"name": name, "fix": cand.name, "params": cand.params, "origin": cand.origin,
                       "description": mod.describe(cand.params), "changes_numerics": mod.CHANGES_NUMERICS,
                       "interventions": [c.key for c in [*stack, cand]], **_describe(child, analysis, base)}
                rec["status"], rec["reason"] = _verdict(child, ref, loss_ref, threshold, mod.CHANGES_NUMERICS)
                rec["gain_vs_previous"] = measure.throughput_gain(child, ref)
                trials.append(rec)
                if rec["status"] == "accepted":
                    if cand.group is None:
                        commit(cand, child, analysis, model)
                    else:
                        best = pending.get(cand.group)
                        if best is None or rec["gain_vs_previous"] > best[4]["gain_vs_previous"]:
                            if best is not None:
                                best[4]["status"], best[4]["reason"] = "superseded", f"{name} was faster"
                            pending[cand.group] = (cand, child, analysis, model, rec)
                        else:
                            rec["status"], rec["reason"] = "superseded", f"{best[4]['name']} was faster"
            if cand.group and cand.group in pending and not any(c.group == cand.group for c in queue):
                winner = pending.pop(cand.group)
                commit(*winner[:4])
        result["apart"] = [_run_apart(ctx, c, stack, base, loss_ref, threshold, trials) for c in result["apart"]
                           if time.monotonic() - ctx.started <= ctx.budget_s]
    except KeyboardInterrupt:
        result["interrupted"] = True  # result["stack"] holds what was committed so far
    return result


def _requeue(queue, child, analysis, model, ctx, tried) -> list[Candidate]:
    """Re-run the rules on the new stack's trace; new fixes join the queue by gain."""
    if analysis is None or model is None:
        return queue
    findings, _ = pipeline.run_findings(model, analysis, child.get("config") or {},
                                        child.get("environment") or ctx.environment, ctx.opts.rules_dirs)
    fresh = [c for c in candidates_from_findings(findings, ctx.environment, ctx.only)
             if c.key not in tried and c.key not in {q.key for q in queue}]
    merged = queue + fresh
    return sorted(merged, key=lambda c: -(c.est_gain_ms or 0.0))


def _verdict(child: dict, ref: dict, loss_ref: dict, threshold: float, changes_numerics: bool) -> tuple[str, str]:
    if child.get("status") != "complete":
        return "failed", "; ".join(child.get("incomplete_reasons") or ["the trial did not finish"])
    bad = measure.numerics_verdict(child.get("losses") or [], loss_ref.get("losses") or [], changes_numerics)
    if bad:
        return "rejected", f"numerics: {bad}"
    gain = measure.throughput_gain(child, ref)
    if gain is None:
        return "failed", "no steps were measured"
    if gain < threshold:
        return "rejected", f"{gain:+.1%} vs the previous stack, under the {threshold:.1%} noise threshold"
    return "accepted", f"{gain:+.1%} vs the previous stack (threshold {threshold:.1%})"


def _run_apart(ctx, cand: Candidate, stack, base, loss_ref, threshold, trials) -> dict:
    mod = interventions.get(cand.name)
    why = mod.not_applicable(base.get("config") or {}, ctx.environment, cand.params)
    name = f"apart-{cand.name}-x{cand.params.get('factor')}"
    if why:
        rec = {"name": name, "fix": cand.name, "params": cand.params, "status": "skipped", "reason": why}
    else:
        child, analysis, _ = _run(ctx, name, [*stack, cand])
        rec = {"name": name, "fix": cand.name, "params": cand.params, "changes_numerics": True,
               "description": mod.describe(cand.params), "interventions": [c.key for c in [*stack, cand]],
               "apart": True, **_describe(child, analysis, base)}
        status, reason = _verdict(child, base, loss_ref, threshold, True)
        rec["status"] = "measured" if status == "accepted" else status
        rec["reason"] = reason + "; changes training dynamics: scale the learning rate with the batch"
    trials.append(rec)
    return rec
