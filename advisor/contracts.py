"""The shapes that cross module boundaries, written down: the run document (run.json), a finding,
a trial's record. TypedDicts document them for readers and type checkers; ``check_run`` validates
a run document where it is written (rundir.write_run), so that a stage that breaks the contract
fails there, with the key named, instead of in a report or a notebook later. Every key but the
few a run always has is optional: runs are kept whatever stage they reached."""

from __future__ import annotations

from typing import Any, TypedDict

# status of a run; of a trial record
RUN_STATUSES = ("complete", "incomplete")
TRIAL_STATUSES = ("reference", "accepted", "rejected", "unsure", "failed", "skipped", "not run", "superseded",
                  "measured", "bound")
SEVERITIES = ("info", "warning", "error")


class Fix(TypedDict, total=False):
    intervention: str | None       # the fix advisor can trial (advisor.interventions.MODULES), None: advice only
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


class TrialRecord(TypedDict, total=False):
    name: str                      # its process and TensorBoard run name ("01-amp", "apart-...", "ceiling-...")
    fix: str
    status: str                    # TRIAL_STATUSES
    reason: str
    params: dict[str, Any]
    interventions: list[str]       # the stack it ran with, keys in order
    samples_per_s: float | None
    step_time_ms: float | None
    speedup_vs_baseline: float | None
    gain_vs_previous: float | None
    batch_size: int | None
    apart: bool                    # measured on top of the final stack, not part of it
    ceiling: bool                  # the data-free ceiling (a bound, never a fix)


class RunDocument(TypedDict, total=False):
    schema: int
    advisor_version: str
    created: str
    run_dir: str
    command: dict[str, Any]        # script, argv, cwd
    status: str                    # RUN_STATUSES
    incomplete_reasons: list[str]
    measurement: dict[str, Any]    # the timed window: step_time_ms, samples_per_s, batch_size, ...
    analysis: dict[str, Any] | None  # the profiled steps (advisor.metrics.analyze)
    config: dict[str, Any]         # what the runner observed, each entry {"value", "where"}
    environment: dict[str, Any]
    findings: list[Finding]
    trials: list[TrialRecord]
    patch: dict[str, Any]
    roofline: dict[str, Any]
    schedule: dict[str, Any]
    own_traces: dict[str, Any]
    ranks: list[dict[str, Any]]    # one row per rank of an --nproc-per-node run (pipeline.rank_analyses)


REQUIRED = {"schema": int, "status": str, "incomplete_reasons": list, "measurement": dict, "config": dict,
            "environment": dict, "findings": list, "trials": list}
TYPES = {"analysis": (dict, type(None)), "patch": dict, "roofline": dict, "schedule": dict, "own_traces": dict,
         "trial_summary": dict, "notes": list, "traces": dict, "ranks": list}


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
    return doc
