"""The shapes that cross module boundaries, written down: the run document (run.json), a finding,
a trial's record, the patch's notes, its verification and checks. The functions that build and
read them are annotated with these TypedDicts (engine.run_rules, the trials' records,
patch.make_patch, verify.verify, pipeline.Analyze, report.verification); ``check_run`` validates
a run document where it is written (rundir.write_run), so that a stage that breaks the contract
fails there, with the key named, instead of in a report or a notebook later. Every key but the
few a run always has is optional: runs are kept whatever stage they reached."""

from __future__ import annotations

from typing import Any, TypedDict

# status of a run ("interrupted": Ctrl-C, what had finished kept); of a trial record
RUN_STATUSES = ("complete", "incomplete", "interrupted")
INTERRUPTED_DURING = ("baseline", "trials", "verification")  # what a Ctrl-C cut short
TRIAL_STATUSES = ("reference", "accepted", "rejected", "unsure", "failed", "skipped", "not run", "superseded",
                  "measured", "bound")
SEVERITIES = ("info", "warning", "error")
FAILURE_KINDS = ("script", "advisor", "environment")   # a failed process's failure.kind (advisor.failures)


class Fix(TypedDict, total=False):
    intervention: str | None       # the fix advisor can trial (advisor.fixes), None: advice only
    params: dict[str, Any]
    suggest_only: bool


class Finding(TypedDict, total=False):
    code: str                      # ADV1xx
    name: str
    severity: str                  # SEVERITIES
    message: str
    evidence: dict[str, Any]
    estimated_gain_ms: float | None
    fix: Fix


class Failure(TypedDict, total=False):
    """Why a process after the baseline failed (advisor.failures; runner/tracebacks.py reads it
    from the traceback in the child): a trial's, the repeat's, the ceiling's, the verification's."""
    kind: str                      # FAILURE_KINDS: the script's own error, advisor's (its bug), the environment's
    exception: str | None          # the exception's type ("FileNotFoundError"), None: no exception (a signal, a limit)
    message: str                   # the exception's message, or what stopped the process
    where: str                     # "path:LINE" of the frame it is placed at: the script's innermost for
                                   # "script", advisor's own line for "advisor"
    line: str                      # that line's source
    script_where: str              # "advisor": the script's code advisor's line called (a model's own .to())
    script_line: str
    traceback: list[str]           # "path:LINE: source", innermost last, advisor's pass-through wrappers left out
    when: str                      # "before the first step", "at step 12"
    under: list[str]               # "script" at a line the baseline ran: the trial's fixes it failed under


class TrialRecord(TypedDict, total=False):
    name: str                      # its process and TensorBoard run name ("01-amp", "apart-...", "ceiling-...")
    fix: str
    status: str                    # TRIAL_STATUSES
    reason: str
    failure: Failure               # status "failed": why, named (advisor.failures)
    params: dict[str, Any]
    interventions: list[str]       # the stack it ran with, keys in order
    samples_per_s: float | None
    tokens_per_s: float | None     # real tokens a second (a sequence model's masked batches)
    step_time_ms: float | None
    speedup_vs_baseline: float | None
    gain_vs_previous: float | None
    batch_size: int | None
    apart: bool                    # measured on top of the final stack, not part of it
    ceiling: bool                  # the data-free ceiling (a bound, never a fix)
    origin: str                    # what proposed it (a finding's code, a fallback, --fix)
    description: str
    changes_numerics: bool
    members: list[str]             # a bundle's fixes
    rung_note: str                 # why the ladder tried it this way (a pair, a rider on compile)
    overrides: str                 # measured apart: the user's reproducibility choice it would override
    threshold: float
    scaling: dict[str, Any]        # a ddp trial against one process
    # measure.trial_figures
    steps_measured: int
    losses: list[float]
    traces: list[str]
    breakdown: dict[str, float]
    kernel_time_by_class: dict[str, float]
    profiled_step_time_ms: float | None
    peak_memory_bytes: int | None
    compute_dtype: str | None
    micro_batches: int | None
    batch_fault: str | None
    first_step_ms: float | None
    startup_s: float | None
    warmup_cost_s: float | None
    compile_s: float | None        # seconds torch.compile spent in the process (runner.oneoffs.compile_seconds)
    compile_cold_s: float | None   # where it loaded its graphs from the shared cache: their compile (trials.compile_book)
    compile_cache: dict | None     # {"hits", "misses"}: graphs loaded from the cache and compiled
    samples_cache: list[dict] | None  # the dataset's samples it loaded or saved (interventions.samples_cache)
    gpu: str | None                # its GPU where trials run side by side (trials.gpus)
    gpu_offset: float | None       # its step times were divided by this: that GPU's offset from the first
    one_off_s: float | None        # its lead-in beyond the baseline's: paid once per run (measure.one_off_s)
    saved_per_step_s: float | None  # what it saves on a baseline step's samples
    break_even_steps: int | None   # baseline steps to pay back one_off_s (None: never; 0: within the noise)
    one_off_noise_s: float | None  # the lead-in's noise it is judged against (advisor.costs)
    one_off_within_noise: bool     # |one_off_s| within that noise: nothing to pay back
    above_ceiling: str             # its rate passed the data-free ceiling beyond the noise: one of the two is wrong
    above: list[str]               # a ceiling's: the records measured above it (its status "measured" then)
    elapsed_s: float | None
    left_out_steps: list[int]
    started_held: bool
    started_warm: bool


class PatchNote(TypedDict, total=False):
    """One fix's place in fixes.patch (advisor.patch.make_patch)."""
    intervention: str
    applied: bool
    where: str                     # "path:LINE" of the edit
    edits: list[str]
    reason: str                    # why it was not placed (applied False)
    warning: str
    superseded_by: str             # a later fix replaced its arguments at the same call
    required_by: str               # placed because that fix's edit needs it
    why: str
    launch: str                    # the command that runs the patched script (ddp: torchrun ...)
    argv_changes: list[dict[str, Any]]   # a flag the user passes, changed on the command line
    env_changes: list[dict[str, Any]]    # an environment variable the run had set: {"name", "from", "to"}
    sources: dict[str, list[str]]  # each value it changes: the chain from the call to where it is set
                                   # ("trainer.py:11", "main.py:9", "argv:--numworkers"; "my.yaml:adv.workers")
    followed: dict[str, str]       # each value followed "run time" (the live stack's chain, config.<key>.provenance)
    switch: dict[str, Any]         # the script's own switch that makes the fix (advisor.patch.switches)


class VerificationCheck(TypedDict, total=False):
    """Did one kept fix's edit take effect in the patched run (advisor.verify.checks)."""
    fix: str
    took_effect: bool | None       # None: the run cannot show it
    expected: str
    observed: str
    where: str | None
    placed: bool
    reason: str | None


class Verification(TypedDict, total=False):
    """patch.verification: fixes.patch run as plain python (advisor.verify.verify)."""
    status: str                    # "verified" | "partial" | "short" | "failed" | "not applied" | "skipped"
    error: str
    failure: Failure               # status "failed": why the patched run failed, named
    reason: str
    tree: str
    argv: list[str]                # the script's arguments it ran with
    command: list[str]             # as the user runs it: patch.command
    runs: int
    samples_per_s: float
    tokens_per_s: float            # real tokens a second, where the runs counted them (measure.tokens_per_s)
    step_time_ms: float
    speedup_vs_baseline: float | None
    of_stack: float | None
    stack_samples_per_s: float | None
    stack_estimated: str           # the stack less a left-out fix: no run timed it (payback.patched_record)
    within_noise: float            # verified under 90% of the stack, inside this run-to-run band
    stack_runs: int                # 2: the stack was timed again, the patched run falling short of it
    timed_once: str                # why no second run was made where one fell short (--budget)
    checks: list[VerificationCheck]
    loss_finite: bool


class PatchDocument(TypedDict, total=False):
    file: str | None               # "fixes.patch", None when no edit was placed
    command: list[str]             # the exact command to run with the patch applied (verify.recommended_command)
    root: str                      # the directory the diff's paths are relative to (verify.patch_root)
    notes: list[PatchNote]
    left_out: dict[str, str]       # kept fixes the patch leaves out: {fix: why} (payback.unpaid)
    payback: list[dict[str, Any]]  # each kept fix's own one-off, saving, break-even, noise and verdict (payback.shares)
    end_to_end: dict[str, Any]     # the whole run projected before and after (payback.end_to_end)
    verification: Verification


class RunDocument(TypedDict, total=False):
    schema: int
    advisor_version: str
    created: str
    run_dir: str
    command: dict[str, Any]        # script, argv, cwd
    status: str                    # RUN_STATUSES
    incomplete_reasons: list[str]
    interrupted_during: str        # INTERRUPTED_DURING, with status "interrupted": the baseline, or after it
    sandbox: dict[str, Any]        # kind ("overlay" | "python"), why, processes: {name: {redirected, absorbed, unredirected}}
    measurement: dict[str, Any]    # the timed window: step_time_ms, samples_per_s, batch_size, ...
    analysis: dict[str, Any] | None  # the profiled steps (advisor.metrics.analyze)
    config: dict[str, Any]         # what the runner observed, each entry {"value", "where"}
    environment: dict[str, Any]
    findings: list[Finding]
    trials: list[TrialRecord]
    patch: PatchDocument
    roofline: dict[str, Any]
    schedule: dict[str, Any]
    own_traces: dict[str, Any]
    run_length: dict[str, Any]     # {"steps", "source"}: the user's run, where known (advisor.payback)
    ranks: list[dict[str, Any]]    # one row per rank of an --nproc-per-node run (results.rank_analyses)


REQUIRED = {"schema": int, "status": str, "incomplete_reasons": list, "measurement": dict, "config": dict,
            "environment": dict, "findings": list, "trials": list}
TYPES = {"analysis": (dict, type(None)), "patch": dict, "roofline": dict, "schedule": dict, "own_traces": dict,
         "trial_summary": dict, "notes": list, "traces": dict, "ranks": list, "interrupted_during": str,
         "sandbox": dict, "run_length": dict}


class ContractError(ValueError):
    """A run document that breaks its contract: a bug of the stage that wrote it."""


def check_run(doc: dict) -> dict:
    """The document itself when it keeps the contract; ContractError naming the first key that
    does not."""
    if not isinstance(doc, dict):
        raise ContractError(f"run document: a {type(doc).__name__}, not an object")
    for key, kind in REQUIRED.items():
        if not isinstance(doc.get(key), kind):
            raise ContractError(f"run document: {key!r} must be {kind.__name__}, is {type(doc.get(key)).__name__}")
    for key, kinds in TYPES.items():
        if key in doc and not isinstance(doc[key], kinds):
            raise ContractError(f"run document: {key!r} is a {type(doc[key]).__name__}")
    if doc["status"] not in RUN_STATUSES:
        raise ContractError(f"run document: status {doc['status']!r} is not one of {RUN_STATUSES}")
    if "interrupted_during" in doc and doc["interrupted_during"] not in INTERRUPTED_DURING:
        raise ContractError(f"run document: interrupted_during {doc['interrupted_during']!r}")
    for i, f in enumerate(doc["findings"]):
        if not isinstance(f, dict) or not isinstance(f.get("code"), str):
            raise ContractError(f"run document: findings[{i}] has no code")
        if f.get("severity") not in SEVERITIES:
            raise ContractError(f"run document: findings[{i}] ({f['code']}) severity {f.get('severity')!r}")
    for i, t in enumerate(doc["trials"]):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise ContractError(f"run document: trials[{i}] has no name")
        if t.get("status") not in TRIAL_STATUSES:
            raise ContractError(f"run document: trials[{i}] ({t['name']}) status {t.get('status')!r}")
        failure = t.get("failure")
        if failure is not None and (not isinstance(failure, dict) or failure.get("kind") not in FAILURE_KINDS):
            raise ContractError(f"run document: trials[{i}] ({t['name']}) failure {failure!r} names no kind "
                                f"of {FAILURE_KINDS}")
    return doc


# --- a run document read back -------------------------------------------------------------------
# run.json read from disk (`advisor report`, `compare`, `inspect` of a run directory) is untrusted
# input: ``read_run`` keeps every value whose shape is the one below and drops one of another type
# (None stays: it means absent), so that the renderers and the rules can rely on a dict being a
# dict and a number a finite number. Keys not named here pass through; nothing reads them.

class MapOf:
    """An object with any keys, every value of one shape (a value of another is dropped)."""

    def __init__(self, shape):
        self.shape = shape


NUM = "number"     # an int or a finite float, never a bool
ANY = "any"        # any JSON value (only printed, or compared)
SCALAR = (str, int, float, bool)
_DROP = object()


def conform(value, shape):
    """``value`` in ``shape`` (a type, NUM, ANY, a tuple of types, ``[shape]``, ``{key: shape}``
    or MapOf), containers rebuilt with what does not conform left out; _DROP when ``value``
    itself does not conform. None conforms to every shape."""
    if value is None or shape is ANY:
        return value
    if shape is NUM:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and value not in (float("inf"), float("-inf"))
        return value if ok else _DROP
    if shape is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _DROP
    if isinstance(shape, (type, tuple)):
        return value if isinstance(value, shape) else _DROP
    if isinstance(shape, list):
        if not isinstance(value, list):
            return _DROP
        items = (conform(v, shape[0]) for v in value)
        return [v for v in items if v is not _DROP and v is not None]
    if isinstance(shape, MapOf):
        if not isinstance(value, dict):
            return _DROP
        items = ((k, conform(v, shape.shape)) for k, v in value.items())
        return {k: v for k, v in items if v is not _DROP}
    if not isinstance(value, dict):
        return _DROP
    out = {}
    for k, v in value.items():
        v = conform(v, shape[k]) if k in shape else v
        if v is not _DROP:
            out[k] = v
    return out


_NUMS = MapOf(NUM)
_ROOF_ROW = {"samples_per_s": NUM, "achieved_tflops": NUM, "dtype": SCALAR, "peak_tflops": NUM, "mfu": NUM,
             "dtype_mfu": NUM, "yardstick_tflops": NUM,
             "status": SCALAR, "reason": SCALAR}
_FAILURE = {"kind": SCALAR, "exception": SCALAR, "message": SCALAR, "where": SCALAR, "line": SCALAR,
            "script_where": SCALAR, "script_line": SCALAR, "traceback": [SCALAR], "when": SCALAR}
_TRIAL = {"name": SCALAR, "failure": _FAILURE, "fix": SCALAR, "status": SCALAR, "reason": SCALAR, "description": SCALAR, "origin": SCALAR,
          "rung_note": SCALAR, "interventions": [ANY], "traces": [ANY], "apart": ANY, "ceiling": ANY,
          "batch_size": int, "micro_batches": int, "breakdown": _NUMS, "kernel_time_by_class": _NUMS,
          **{k: NUM for k in ("samples_per_s", "step_time_ms", "speedup_vs_baseline", "gain_vs_previous",
                              "peak_memory_bytes", "warmup_cost_s", "compile_s", "compile_cold_s", "gpu_offset",
                              "profiled_step_time_ms")}, "gpu": SCALAR}
_FINDING = {"code": SCALAR, "name": SCALAR, "severity": SCALAR, "message": SCALAR, "evidence": [ANY],
            "estimated_gain_ms": NUM,
            "fix": {"intervention": SCALAR, "where": SCALAR, "code": SCALAR, "params": dict}}
_NOTE = {"intervention": SCALAR, "where": SCALAR, "edits": [ANY], "reason": SCALAR, "required_by": SCALAR,
         "why": SCALAR, "warning": SCALAR, "argv_changes": [{"flag": SCALAR, "to": SCALAR, "from": SCALAR}],
         "env_changes": [{"name": SCALAR, "to": SCALAR, "from": SCALAR}]}
_CHECK = {"fix": SCALAR, "where": SCALAR, "reason": SCALAR, "expected": ANY, "observed": ANY}
READ_SHAPES = {
    "schema": int, "advisor_version": SCALAR, "created": SCALAR, "run_dir": SCALAR, "status": SCALAR,
    "incomplete_reasons": [ANY], "notes": [ANY], "applied": [ANY], "skipped_rules": [ANY],
    "command": {"argv": [ANY], "script": SCALAR, "cwd": SCALAR},
    "measurement": {"step_time_ms": NUM, "samples_per_s": NUM, "tokens_per_s": NUM, "padding_frac": NUM,
                    "step_time_iqr_ms": NUM, "steps_measured": NUM, "compile_s": NUM,
                    "batch_size": int, "micro_batches": int},
    "analysis": {"breakdown": _NUMS, "kernel_time_by_class": _NUMS, "kernel_time_ms_by_class": _NUMS,
                 "step_time_ms": NUM, "steps_in_trace": NUM,
                 "top_kernels": [{"name": str, "cls": SCALAR, "ms": NUM, "count": NUM}],
                 "memory": {"peak_allocated_bytes": NUM, "peak_reserved_bytes": NUM, "capacity_bytes": NUM,
                            "peak_source": SCALAR, "source": SCALAR}},
    "memory": {"max_allocated_bytes": NUM, "max_reserved_bytes": NUM, "capacity_bytes": NUM},
    "config": MapOf(ANY),
    "environment": dict,
    "findings": [_FINDING],
    "trials": [_TRIAL],
    "trial_summary": {"noise": NUM, "threshold": NUM, "wall_s": NUM, "expected_s": NUM, "compile_s": NUM,
                      "phases_s": {"baseline": NUM, "trials": NUM, "patch": NUM},
                      "gpus": {"gpus": [{"gpu": SCALAR, "offset": NUM}], "processes": [ANY],
                               "stopped_for_windows": NUM}},
    "traces": MapOf([ANY]),
    "patch": {"file": SCALAR, "root": SCALAR, "notes": [_NOTE],
              "verification": {"status": SCALAR, "error": SCALAR, "failure": _FAILURE, "speedup_vs_baseline": NUM, "of_stack": NUM,
                               "samples_per_s": NUM, "tokens_per_s": NUM, "runs": NUM, "argv": ANY,
                               "checks": [_CHECK]}},
    "roofline": {"flops_per_step": NUM, "flops_per_sample": NUM, "bf16_peak_tflops": NUM, "why_not": SCALAR,
                 "baseline": _ROOF_ROW, "stack": _ROOF_ROW, "ceiling": _ROOF_ROW,
                 "transformer": {"params": NUM, "tokens_per_step": NUM, "flops_per_step": NUM, "counted_ratio": NUM,
                                 "real_token_mfu": NUM}},
    "schedule": {"text": SCALAR},
    "own_traces": {"traces": [ANY], "steps": SCALAR, "reason": SCALAR},
    "sandbox": {"kind": SCALAR, "why": SCALAR, "processes": MapOf(dict)},
    "ranks": [{"rank": SCALAR, "device": SCALAR, "breakdown_ms": _NUMS, "missing": SCALAR, "trace_error": SCALAR,
               **{k: NUM for k in ("step_time_ms", "data_wait_ms", "communication_ms", "exposed_communication_ms")}}],
}

# The observed config (run.json `config`) as the rules read it: {key: {"value", "where"}}, each
# value in the shape its rule expects.
_CONFIG_VALUES = {
    "autocast": {"dtype": SCALAR, "enabled": ANY},
    "input": {"dtype": SCALAR, "shape": [ANY], "memory_format": SCALAR},
    "dataloader": {"batch_size": int, "num_workers": int, "pin_memory": ANY, "persistent_workers": ANY,
                   "prefetch_factor": int, "dataset_type": SCALAR, "transforms": SCALAR,
                   "dali": {"images": ANY, "kind": SCALAR, "files": int, "cost": _NUMS, "source": SCALAR,
                            "mapping": [ANY]}},
    "h2d_copy": {"non_blocking": ANY},
    "zero_grad": {"set_to_none": ANY},
    "optimizer": {"class": SCALAR, "fused": ANY, "foreach": ANY},
    "item_calls": {"sites": dict},
    "data_parallel": {"class": SCALAR},
    "grad_scaler": {"enabled": ANY},
}


def read_config(config) -> dict:
    """run.json `config` in the shapes the rules read (an entry that is not an object is dropped)."""
    config = conform(config, MapOf(dict)) or {}
    return {k: conform(v, {"where": SCALAR, "value": _CONFIG_VALUES.get(k, ANY)}) for k, v in config.items()}


def read_run(doc) -> dict:
    """A run document read back from disk, in the shapes its readers rely on (READ_SHAPES);
    ValueError when it is not a JSON object at all."""
    if not isinstance(doc, dict):
        raise ValueError(f"not a run document (a JSON {json_kind(doc)}, not an object)")
    return conform(doc, READ_SHAPES)


def json_kind(v) -> str:
    """What a parsed JSON value is, in JSON's words."""
    return ("null" if v is None else "boolean" if isinstance(v, bool) else "number" if isinstance(v, (int, float))
            else "string" if isinstance(v, str) else "array" if isinstance(v, list) else "object")
