"""Noise-aware comparison of runs, and the numerics guard for trials."""

from __future__ import annotations

import math
import statistics

from advisor import roofline

MIN_GAIN = 0.03  # the floor: never accept a gain under 3%


def step_times(child: dict) -> list[float]:
    """The timed (unprofiled) step times of a child result, gaps left out."""
    return [t for t in child.get("step_times_ms") or [] if t is not None and t > 0]


def median_step_ms(child: dict) -> float | None:
    times = step_times(child)
    return statistics.median(times) if times else None


def step_ms(child: dict) -> float | None:
    """The step time that throughput rests on: the synchronized window over its steps.

    Runs recorded with a sync after every step (run.json files before "step_timing":
    "window") have no window: their median step stands in, as it did then.
    """
    times = step_times(child)
    window = child.get("measure_window_ms")
    if times and window:
        return float(window) / len(times)
    return median_step_ms(child)


def mean_step_ms(runs: list[dict]) -> float | None:
    """The mean step of several runs of one configuration (runs without steps left out)."""
    times = [t for t in (step_ms(r) for r in runs) if t]
    return statistics.fmean(times) if times else None


def warmup_cost_s(child: dict) -> float | None:
    """Seconds the untimed steps after the first took beyond the steady step: compilation,
    CUDA graph recording, cuDNN autotuning. The first step is left out (it also holds the
    script's own start-up: imports, data, model), and so is the step advisor counted FLOPs in
    (runner/flops.py: FlopCounterMode dispatches every op in Python; the baseline's alone). Each
    step's own time, as in lead_in_s: a stop advisor made during it and its main thread's wait
    for a core are taken out."""
    steady = step_ms(child)
    warm = child.get("warmup_step_times_ms") or []
    if steady is None or len(warm) < 2:
        return None
    at = child.get("startup") or {}
    ends, waits = child.get("warmup_step_ends"), child.get("warmup_step_cpu_wait")
    ends = ends if isinstance(ends, list) and len(ends) == len(warm) else None
    waits = waits if isinstance(waits, list) and len(waits) == len(warm) else None
    stops = _spans(at.get("stopped"))
    counted = (child.get("flops") or {}).get("step")   # 1-based: warm[counted - 1]
    cost = 0.0
    for i, t in enumerate(warm[1:], 1):
        if t is None or i + 1 == counted:
            continue
        own = t
        if ends is not None:
            own -= _covered(stops, ends[i - 1], ends[i]) * 1e3
        if waits is not None:
            own -= max(0.0, waits[i] - waits[i - 1]) * 1e3
        cost += max(0.0, own - steady)
    return cost / 1e3


def lead_in_s(child: dict) -> float | None:
    """Seconds of work from the script's first line to its steady step: the start-up to the end
    of its first step (set-up, data, model; a preload, a precompute, the workers' start), less
    one steady step, plus what the later warm-up steps took beyond it (compilation, CUDA graph
    recording, autotuning). None where the run noted no start-up.

    The same quantity in every process, however it started (runner/startup.py): from the
    script's first line (python and torch imported before it, cold or ahead alike), less the
    waits that are not the script's work, where the process noted them: its holds (a process
    started on a guess waits at its first CUDA use, or before its last warm-up steps), the
    stops advisor made (SIGSTOP: a process started ahead while another trial's steps are timed)
    and the time its main thread waited, runnable, for a core (a process started ahead runs
    niced beside the trial being timed; spares start beside each trial)."""
    at = child.get("startup") or {}
    script, first = at.get("script"), at.get("first_step")
    steady = step_ms(child)
    if not all(isinstance(x, (int, float)) for x in (script, first)) or steady is None:
        return None
    out = _covered(_spans(_holds(at), at.get("stopped")), script, first) + _cpu_wait(at, "script", "first_step")
    work = first - script - out
    return max(0.0, work - steady / 1e3 + samples_cache_s(child) + compile_cache_s(child)) \
        + (warmup_cost_s(child) or 0.0)


def _holds(at: dict) -> list:
    """The holds' [start, end]; a run recorded before they were noted has its one hold as
    held-released (a process held twice noted its second hold there alone)."""
    holds = at.get("holds")
    if isinstance(holds, list):
        return holds
    held, released = at.get("held"), at.get("released")
    if isinstance(held, (int, float)) and isinstance(released, (int, float)) and released >= held:
        return [[held, released]]
    return []


def _spans(*lists) -> list[tuple[float, float]]:
    """The [start, end] pairs of the lists, merged where they overlap, in order."""
    pairs = sorted((float(s[0]), float(s[1])) for spans in lists for s in spans or []
                   if isinstance(s, (list, tuple)) and len(s) == 2
                   and all(isinstance(x, (int, float)) for x in s) and s[1] > s[0])
    out: list[tuple[float, float]] = []
    for a, b in pairs:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] inside the (merged) spans."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)


def _cpu_wait(at: dict, since: str, until: str) -> float:
    """Seconds the main thread waited for a core between two milestones (0 where not noted)."""
    waits = at.get("cpu_wait") or {}
    a, b = waits.get(since), waits.get(until)
    return max(0.0, b - a) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else 0.0


def samples_cache_s(child: dict) -> float:
    """What the run's start-up would have taken without the analyze's samples cache, beyond what
    it took (interventions.samples_cache): computing the samples where it loaded them, less the
    saving where it saved them. The user's run computes them and saves nothing."""
    out = 0.0
    for e in child.get("samples_cache") or []:
        if "loaded_s" in e:
            out += e.get("built_s", 0.0) - e["loaded_s"]
        else:
            out -= e.get("saved_s", 0.0)
    return out


def compile_cache_s(child: dict) -> float:
    """What torch.compile would have taken without the analyze's compile cache, beyond what it
    took: the stack's cold compile (trials.compile_book) less the load, where the process loaded
    every graph. The user's first run of fixes.patch compiles them. Both are the processes' own
    time (own_share), as the lead-in is."""
    cold, took = child.get("compile_cold_s"), child.get("compile_s")
    if isinstance(cold, (int, float)) and isinstance(took, (int, float)) and cold > took * own_share(child):
        return cold - took * own_share(child)
    return 0.0


def own_share(child: dict) -> float:
    """The share of the process's start-up, from its script's first line to its last untimed
    step (its holds and stops left out), that its main thread did not spend waiting for a core:
    what a figure torch or a library timed inside that start-up (a compile's seconds) is taken
    at, as its own time. 1 where the waits were not noted."""
    at = child.get("startup") or {}
    script, waits = at.get("script"), at.get("cpu_wait") or {}
    if not isinstance(script, (int, float)) or not isinstance(waits.get("script"), (int, float)):
        return 1.0
    ends, step_waits, first = child.get("warmup_step_ends") or [], child.get("warmup_step_cpu_wait") or [], at.get("first_step")
    if ends and len(step_waits) == len(ends) and isinstance(first, (int, float)) and abs(ends[0] - first) < 1.0:
        end, waited = ends[-1], step_waits[-1] - waits["script"]   # these steps are this process's
    elif isinstance(first, (int, float)) and isinstance(waits.get("first_step"), (int, float)):
        end, waited = first, waits["first_step"] - waits["script"]
    else:
        return 1.0
    span = end - script - _covered(_spans(_holds(at), at.get("stopped")), script, end)
    return min(1.0, max(0.0, 1.0 - max(0.0, waited) / span)) if span > 0 else 1.0


def one_off_s(child: dict, base: dict) -> float | None:
    """The run's one-off cost beyond the baseline's: its lead-in less the baseline's (a compile,
    a preload, an autotune, paid once per run)."""
    a, b = lead_in_s(child), lead_in_s(base)
    return None if a is None or b is None else a - b


def saved_per_step_s(child: dict, base: dict) -> float | None:
    """Seconds the run saves on the baseline's step: the baseline's step less the time this run
    takes for the same samples (its batch may differ)."""
    rate, base_rate, base_ms = samples_per_s(child), samples_per_s(base), step_ms(base)
    if not rate or not base_rate or not base_ms:
        return None
    return base_ms / 1e3 - (base_ms / 1e3) * base_rate / rate


def break_even_steps(one_off: float | None, saved: float | None) -> int | None:
    """Baseline steps after which a one-off cost is paid back by the per-step saving: 0 when
    there is no cost; None when it never is (no saving) or either is unknown."""
    if one_off is None or saved is None:
        return None
    if one_off <= 0:
        return 0
    return math.ceil(one_off / saved) if saved > 0 else None


def micro_batches(child: dict) -> int:
    """Batches one training step trains on (gradient accumulation: several). The batches a
    DataLoader gave the step; with none feeding the loop (the script samples its own
    batches, as nanoGPT's get_batch), the forward passes that a backward followed: the lesser
    of the step's grad-enabled outermost forwards and its backward calls (a siamese model's
    two forwards feed one loss; two losses backpropagated apart come from one batch). The
    median over the warm-up steps after the first (an evaluation pass now and then, or the
    first batch fetched before the loop, weigh nothing); 1 when not known."""
    rows = [r for r in child.get("step_counts") or [] if isinstance(r, (list, tuple)) and len(r) == 3]
    if not rows:
        return 1
    batches = statistics.median_low([r[0] for r in rows])
    if batches >= 1:
        return int(batches)
    return max(1, int(statistics.median_low([min(r[1], r[2]) for r in rows])))


def step_source_text(child: dict) -> str | None:
    """What ended the steps, in words, where it was not a torch.optim optimizer's step."""
    source = child.get("step_source")
    if source == "parameter-update":
        return ("steps counted by parameter updates: no torch.optim optimizer stepped, so a step ended "
                "where the parameters a backward pass produced gradients for had changed (several backward "
                "passes before one update are one step); where that is wrong, advisor.step() marks them")
    if source == "advisor.step":
        return "steps marked by advisor.step() in the script"
    return None


def left_out_text(child: dict) -> str | None:
    """What the window took out (runner/oneoffs.py), in words; None when nothing."""
    left = {k: v for k, v in (child.get("left_out_steps") or {}).items() if isinstance(v, int) and v > 0}
    if not left:
        return None
    what = {"evaluation": "evaluation pass{s} (.eval() to .train() on the model), taken out of {their} step{s}",
            "compile": "step{s} where torch.compile compiled a new graph, left out",
            "new batch size": "step{s} with a batch size not seen before (cudnn.benchmark searches again), left out"}
    parts = [f"{n} " + what.get(k, k + " step{s}, left out").format(s="s" if n > 1 else "", their="their" if n > 1 else "its")
             for k, n in sorted(left.items())]
    return f"one-off costs out of the timed window: {'; '.join(parts)} ({(child.get('left_out_ms') or 0.0) / 1e3:.2f} s)"


def data_wait_share(child: dict) -> float | None:
    """The share of the timed window the step waited for its batch; None where not measured."""
    waits = [w for w in child.get("data_wait_ms") or [] if w is not None]
    window = child.get("measure_window_ms") or sum(step_times(child))
    return sum(waits) / window if waits and window else None


def samples_per_s(child: dict, ms: float | None = None) -> float | None:
    """Samples a second: the step's batches (micro_batches) over its time, the window's unless
    ``ms`` is given (a trial's mean over its runs); a run of several ranks counts every rank's
    batch (the ranks step together: the run's global samples/s)."""
    ms = step_ms(child) if ms is None else ms
    batch = child.get("batch_size")
    ranks = max(1, int(child.get("world_size") or 1))
    return batch * micro_batches(child) * ranks * 1000.0 / ms if ms and batch else None


def tokens(child: dict) -> tuple[int, int] | None:
    """(real, all) tokens of the timed steps' batches, when every step's batches counted them
    (runner/tokens.py: a mapping batch with a CPU attention mask); None otherwise."""
    rows = child.get("tokens") or []
    if not rows or any(not isinstance(r, list) or len(r) != 2 for r in rows):
        return None
    return sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)


def tokens_per_s(child: dict) -> float | None:
    """Real tokens (padding left out) a second over the timed window, every rank's counted. A
    language model fed no attention mask (token windows, as nanoGPT's get_batch makes them):
    every position is a real token, as many a sample as its logits have (runner/logits.py)."""
    counted, window = tokens(child), child.get("measure_window_ms")
    if counted is not None and window:
        return counted[0] * max(1, int(child.get("world_size") or 1)) * 1000.0 / window
    if child.get("tokens"):
        return None   # some steps' batches counted, not all: no figure rather than a mixed one
    shape = (((child.get("config") or {}).get("logits") or {}).get("value") or {}).get("shape") or []
    rate = samples_per_s(child)
    return rate * shape[1] if len(shape) == 3 and rate else None


def padding_frac(child: dict) -> float | None:
    """The share of the timed steps' tokens that are padding."""
    counted = tokens(child)
    return 1.0 - counted[0] / counted[1] if counted and counted[1] else None


def hold_batch(child: dict, base: dict, batch_changes: bool) -> str | None:
    """A run whose samples per step (batch x micro-batches) read differently from the
    baseline's while no fix of its own changes the batch has a detection fault, not a new
    batch: its step is judged at the baseline's batch (else a preload trial that read a
    transform's input, batch 1, has its faster step rejected as far slower). The child is
    changed in place, what was detected kept under "detected_batch"; returns the fault in
    words, None when there is none. A compiled model that hides its batch from the hooks
    (None) takes the baseline's silently: nothing was detected wrong."""
    b, t = base.get("batch_size"), child.get("batch_size")
    if batch_changes or not b:
        return None
    bm, tm = micro_batches(base), micro_batches(child)
    if t == b and tm == bm:
        return None
    child["detected_batch"] = {"batch_size": t, "source": child.get("batch_size_source"), "micro_batches": tm}
    child["batch_size"], child["step_counts"] = b, base.get("step_counts") or []
    if t is None:
        return None
    seen = f"{t} ({child.get('batch_size_source') or 'unknown source'})" + (f" x {tm} micro-batches" if tm != 1 else "")
    want = f"{b}" + (f" x {bm}" if bm != 1 else "")
    fault = (f"batch detected as {seen}, not the baseline's {want}, with no fix changing it: a detection "
             f"fault, judged on step time at the baseline's batch")
    child["batch_fault"] = fault
    return fault


def acceptance_threshold(noise: float, n_ref: int = 1, n_trial: int = 1) -> float:
    """max(3%, twice the noise of the comparison). ``noise`` is the run-to-run noise of one
    run against one run; comparing the means of n_ref and n_trial runs shrinks it by
    sqrt((1/n_ref + 1/n_trial) / 2), which is 1 for one run each."""
    return max(MIN_GAIN, 2.0 * noise * math.sqrt((1.0 / max(1, n_ref) + 1.0 / max(1, n_trial)) / 2.0))


def _log_rate(child: dict, per_sample: bool) -> float | None:
    rate = samples_per_s(child) if per_sample else None
    if rate is None:
        ms = step_ms(child)
        rate = 1000.0 / ms if ms else None
    return math.log(rate) if rate else None


def pooled_gain(trial_runs: list[dict], ref_runs: list[dict]) -> float | None:
    """Throughput gain of the trial's runs over the reference's: the ratio of their geometric
    mean rates (samples/s where every run knows its batch, else steps/s)."""
    per_sample = all(samples_per_s(r) for r in [*trial_runs, *ref_runs])
    lt = [v for v in (_log_rate(r, per_sample) for r in trial_runs) if v is not None]
    lr = [v for v in (_log_rate(r, per_sample) for r in ref_runs) if v is not None]
    if not lt or not lr:
        return None
    return math.exp(statistics.fmean(lt) - statistics.fmean(lr)) - 1.0


def pooled_noise(groups: list[list[dict]]) -> float | None:
    """Run-to-run noise (relative difference between two runs of one configuration) pooled
    over every configuration measured more than once: sqrt(2) x the pooled standard
    deviation of log throughput. With one pair of runs it is their relative difference."""
    ss, dof = 0.0, 0
    for runs in groups:
        logs = [v for v in (_log_rate(r, False) for r in runs) if v is not None]
        if len(logs) < 2:
            continue
        m = statistics.fmean(logs)
        ss += sum((x - m) ** 2 for x in logs)
        dof += len(logs) - 1
    if not dof:
        return None
    return math.exp(math.sqrt(2.0 * ss / dof)) - 1.0


def throughput_gain(trial: dict, reference: dict) -> float | None:
    """Relative samples/s gain of trial over reference (batch-size aware); None if unknown."""
    return pooled_gain([trial], [reference])


def numerics_verdict(trial_losses: list, base_losses: list, changes_numerics: bool) -> str | None:
    """None when training looks healthy, else a one-line reason to reject.

    Same seeds in both runs, so the first losses should track the baseline: a safe fix
    within 10% (reduction order, worker RNG), a numerics-changing one (AMP, TF32, batch)
    within 35%, over the mean of the steps both runs saw. NaN/inf always rejects, and so
    does a loss that ends far above where it started (divergence).
    """
    t = [float(x) for x in trial_losses if x is not None]
    if not t:
        return None  # no loss observed (no backward on a tensor): nothing to compare
    bad = [i for i, x in enumerate(t) if not math.isfinite(x)]
    if bad:
        return f"loss became {t[bad[0]]} at step {bad[0] + 1}"
    b = [float(x) for x in base_losses if x is not None and math.isfinite(float(x))]
    n = min(len(t), len(b))
    if n >= 3:
        mt, mb = statistics.fmean(t[:n]), statistics.fmean(b[:n])
        tol = 0.35 if changes_numerics else 0.10
        if abs(mt - mb) > tol * max(abs(mb), 1e-6) and mt > mb:
            return f"mean loss over the first {n} steps {mt:.4g} vs baseline {mb:.4g} (tolerance {tol:.0%})"
    k = max(1, len(t) // 4)
    start, end = statistics.fmean(t[:k]), statistics.fmean(t[-k:])
    if len(t) >= 8 and end > 2.0 * max(start, 1e-6) and (not b or end > 2.0 * max(statistics.fmean(b[-k:]), 1e-6)):
        return f"loss diverged: {start:.4g} → {end:.4g}"
    return None


def plus_one(gain: float | None) -> float | None:
    return None if gain is None else 1.0 + gain


def trial_figures(child: dict, analysis: dict | None, base: dict) -> dict:
    """A trial record's figures: its timing, memory and cost, and its trace's breakdown."""
    mem = child.get("memory") or {}
    return {
        "step_time_ms": step_ms(child),
        "samples_per_s": samples_per_s(child),
        "tokens_per_s": tokens_per_s(child),
        "batch_size": child.get("batch_size"),
        "batch_fault": child.get("batch_fault"),
        "compute_dtype": roofline.compute_dtype(child.get("config")),  # the peak its MFU is read against
        "micro_batches": micro_batches(child),
        "left_out_steps": child.get("left_out_steps") or {},
        "steps_measured": len(step_times(child)),
        "elapsed_s": child.get("elapsed_s"),
        "started_warm": child.get("started_warm"),  # its process was started ahead (python, torch)
        "started_held": child.get("started_held"),  # ... on a guess of this trial, held at its CUDA use
        "startup_s": startup_s(child),
        "first_step_ms": (child.get("warmup_step_times_ms") or [None])[0],
        "warmup_cost_s": warmup_cost_s(child),
        "compile_s": child.get("compile_s"),   # torch.compile's own time in it (a cached graph: its load)
        "compile_cold_s": child.get("compile_cold_s"),   # ... loaded: what compiling it took (one_off_s counts this)
        "compile_cache": child.get("compile_cache"),     # graphs it loaded from the shared cache and compiled
        "samples_cache": child.get("samples_cache") or None,  # samples it loaded or saved (its one_off_s counts their computing)
        "gpu": child.get("gpu"),               # its GPU, where trials run side by side (trials.gpus)
        "gpu_offset": child.get("gpu_offset"),  # its step times were divided by this (that GPU's offset)
        # paid once per run, beyond the baseline's, and the baseline steps it takes to pay back
        "one_off_s": _round(one_off := one_off_s(child, base)),
        "saved_per_step_s": _round(saved := saved_per_step_s(child, base), 6),
        "break_even_steps": break_even_steps(one_off, saved),
        "peak_memory_bytes": mem.get("max_allocated_bytes"),
        "speedup_vs_baseline": plus_one(throughput_gain(child, base)),
        "losses": child.get("losses") or [],
        "traces": child.get("trace_files") or [],
        "breakdown": (analysis or {}).get("breakdown"),
        "profiled_step_time_ms": (analysis or {}).get("step_time_ms"),
        "kernel_time_by_class": (analysis or {}).get("kernel_time_by_class"),
    }


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def kept_trial(trials: list[dict]) -> dict | None:
    """The kept stack's record: the last trial accepted on the ladder (apart trials and the
    ceiling are measured beside it, never kept)."""
    kept = [t for t in trials if t.get("status") == "accepted" and not t.get("apart")]
    return kept[-1] if kept else None


STARTUP_MILESTONES = ("install", "script", "held", "released", "cuda_init", "cuda_ready", "first_step")


def startup_s(child: dict) -> dict:
    """Seconds from the process's spawn (or, started ahead, its go) to each start-up milestone
    the child noted: install (python and torch imported), script (its first line),
    cuda_init/cuda_ready (its first CUDA use), first_step (the end of its first step). A
    process started on a guess (advisor.trials.lookahead) counts from its release: what it did
    before, up to its hold at the first CUDA use, is negative."""
    at = child.get("startup") or {}
    t0 = at.get("spawned")
    if not isinstance(t0, (int, float)):
        return {}
    return {k: round(at[k] - t0, 3) for k in STARTUP_MILESTONES if isinstance(at.get(k), (int, float))}
