"""What a run holds, typed: its findings, its trials, its roofline and its patch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.api._read import (
    FINDING_COLUMNS,
    TRIAL_COLUMNS,
    _dict,
    _float,
    _frame,
    _int,
    _list,
    _numbers,
    _one_of,
    _str,
)

# --- findings -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One finding of a rule (run.json ``findings[]``).

    code              the rule's code, e.g. "ADV103"
    name              the rule's name, e.g. "dataloader-wait"
    severity          "info", "warning" or "error"
    message           the finding in one sentence
    est_gain_ms       estimated ms a step would gain from the fix (run.json ``estimated_gain_ms``);
                      None when the rule cannot estimate it
    gain_is_upper_bound  whether est_gain_ms is a bound rather than an estimate
    fix_intervention  the fix advisor can trial (an advisor.interventions name); None: advice only
    fix_where         the script location the fix applies to ("file.py:LINE"), when known
    fix_code          the suggested code, when the rule gives one
    suggest_only      the fix is suggested but never trialled
    evidence          the figures the finding rests on, one line each
    fix               the whole fix record (intervention, params, code, where, ...)
    """

    code: str | None
    name: str | None
    severity: str | None
    message: str | None
    est_gain_ms: float | None
    gain_is_upper_bound: bool = False
    fix_intervention: str | None = None
    fix_where: str | None = None
    fix_code: str | None = field(default=None, repr=False)
    suggest_only: bool = False
    evidence: tuple[str, ...] = field(default=(), repr=False)
    fix: dict = field(default_factory=dict, repr=False, compare=False)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def trialable(self) -> bool:
        """Whether advisor can trial this finding's fix (it names an intervention, not advice only)."""
        return self.fix_intervention is not None and not self.suggest_only

    @classmethod
    def from_dict(cls, d: Mapping) -> Finding:
        d = _dict(d)
        fix = _dict(d.get("fix"))
        ev = d.get("evidence")
        # rules give evidence as a list of lines; the contract also allows a mapping
        evidence = (tuple(str(x) for x in ev) if isinstance(ev, (list, tuple))
                    else tuple(f"{k}: {v}" for k, v in ev.items()) if isinstance(ev, Mapping)
                    else (ev,) if isinstance(ev, str) else ())
        return cls(code=_str(d.get("code")), name=_str(d.get("name")), severity=_str(d.get("severity")),
                   message=_str(d.get("message")), est_gain_ms=_float(d.get("estimated_gain_ms")),
                   gain_is_upper_bound=bool(d.get("gain_is_upper_bound")),
                   fix_intervention=_str(fix.get("intervention")), fix_where=_str(fix.get("where")),
                   fix_code=_str(fix.get("code")), suggest_only=bool(fix.get("suggest_only")),
                   evidence=evidence, fix=fix, raw=d)

    def as_row(self) -> dict:
        return {c: getattr(self, c) for c in FINDING_COLUMNS}


class Findings(tuple[Finding, ...]):
    """The findings in advisor's order (largest estimated gain first, then severity), with filters
    and a table. A tuple: index it, iterate it, len() it; a slice is a Findings again."""

    def __new__(cls, items: Iterable[Finding] = ()):
        return super().__new__(cls, items)

    def __getitem__(self, i):
        got = super().__getitem__(i)
        return Findings(got) if isinstance(i, slice) else got

    def __repr__(self) -> str:
        return f"Findings({list(self)!r})"

    @classmethod
    def from_list(cls, items: Any) -> Findings:
        return cls(Finding.from_dict(d) for d in _list(items) if isinstance(d, Mapping))

    @property
    def codes(self) -> list[str | None]:
        """The findings' codes, in order."""
        return [f.code for f in self]

    def get(self, code: str) -> Finding | None:
        """The first finding with this code, or None."""
        return next((f for f in self if f.code == code), None)

    def filter(self, *, severity: str | Iterable[str] | None = None, code: str | Iterable[str] | None = None,
               min_gain_ms: float | None = None, trialable: bool | None = None) -> Findings:
        """The findings that match every criterion given: severity and code (one or several),
        an estimated gain of at least min_gain_ms (findings without an estimate are dropped then),
        whether advisor can trial the fix."""
        sev, codes = _one_of(severity), _one_of(code)
        return Findings(f for f in self
                        if (sev is None or f.severity in sev) and (codes is None or f.code in codes)
                        and (min_gain_ms is None or (f.est_gain_ms is not None and f.est_gain_ms >= min_gain_ms))
                        and (trialable is None or f.trialable == trialable))

    def to_frame(self):
        """A pandas DataFrame, one row a finding: code, name, severity, message, est_gain_ms,
        fix_intervention, fix_where. ImportError without pandas."""
        return _frame([f.as_row() for f in self], FINDING_COLUMNS)


# --- trials -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trial:
    """One trial process of a run (run.json ``trials[]``): a fix measured on top of the kept ones.

    name                 its process name ("01-amp", "apart-batch-size-x2", "ceiling-data-free", ...)
    fix                  the fix (or fixes, joined by "+") it trials
    status               "reference", "accepted", "rejected", "unsure", "failed", "skipped",
                         "not run", "superseded", "measured" (apart from the stack) or "bound" (the ceiling)
    reason               why it got that status
    samples_per_s        its measured throughput
    step_time_ms         its measured (unprofiled) step
    speedup_vs_baseline  samples_per_s over the baseline's
    gain_vs_previous     its gain over the stack it was trialled on (0.25: 25% faster)
    batch_size           its batch size (fixes such as batch-size change it)
    params               the fix's parameters
    interventions        the stack it ran with, in order
    apart                measured on top of the final stack, not part of it
    ceiling              the data-free ceiling: a bound, never a fix
    profiled_step_time_ms, breakdown   its profiled step and phases (ms), when it was profiled
    """

    name: str | None
    fix: str | None
    status: str | None
    reason: str | None
    samples_per_s: float | None
    step_time_ms: float | None
    speedup_vs_baseline: float | None
    batch_size: int | None
    gain_vs_previous: float | None = None
    params: dict = field(default_factory=dict, compare=False)
    interventions: tuple[str, ...] = field(default=(), repr=False)
    apart: bool = False
    ceiling: bool = False
    profiled_step_time_ms: float | None = None
    breakdown: dict[str, float | None] | None = field(default=None, repr=False)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping) -> Trial:
        d = _dict(d)
        return cls(name=_str(d.get("name")), fix=_str(d.get("fix")), status=_str(d.get("status")),
                   reason=_str(d.get("reason")), samples_per_s=_float(d.get("samples_per_s")),
                   step_time_ms=_float(d.get("step_time_ms")), speedup_vs_baseline=_float(d.get("speedup_vs_baseline")),
                   batch_size=_int(d.get("batch_size")), gain_vs_previous=_float(d.get("gain_vs_previous")),
                   params=_dict(d.get("params")), interventions=tuple(str(x) for x in _list(d.get("interventions"))),
                   apart=bool(d.get("apart")), ceiling=bool(d.get("ceiling")),
                   profiled_step_time_ms=_float(d.get("profiled_step_time_ms")),
                   breakdown=_numbers(d.get("breakdown")), raw=d)

    def as_row(self) -> dict:
        return {c: getattr(self, c) for c in TRIAL_COLUMNS}


class Trials(tuple[Trial, ...]):
    """The trials in the order they ran, with lookups and a table. A tuple, like Findings."""

    def __new__(cls, items: Iterable[Trial] = ()):
        return super().__new__(cls, items)

    def __getitem__(self, i):
        got = super().__getitem__(i)
        return Trials(got) if isinstance(i, slice) else got

    def __repr__(self) -> str:
        return f"Trials({list(self)!r})"

    @classmethod
    def from_list(cls, items: Any) -> Trials:
        return cls(Trial.from_dict(d) for d in _list(items) if isinstance(d, Mapping))

    @property
    def names(self) -> list[str | None]:
        """The trials' names, in order."""
        return [t.name for t in self]

    @property
    def kept(self) -> Trials:
        """The accepted trials of the stack (not those measured apart from it), in order: the last
        one is the kept stack."""
        return Trials(t for t in self if t.status == "accepted" and not t.apart)

    def get(self, name: str) -> Trial | None:
        """The trial of this name, or None."""
        return next((t for t in self if t.name == name), None)

    def filter(self, *, status: str | Iterable[str] | None = None, apart: bool | None = None) -> Trials:
        """The trials with this status (one or several) and, when given, apart from the stack or not."""
        st = _one_of(status)
        return Trials(t for t in self if (st is None or t.status in st) and (apart is None or t.apart == apart))

    def to_frame(self):
        """A pandas DataFrame, one row a trial: name, fix, status, samples_per_s, step_time_ms,
        speedup_vs_baseline, gain_vs_previous, batch_size, apart, ceiling, reason. ImportError
        without pandas."""
        return _frame([t.as_row() for t in self], TRIAL_COLUMNS)


# --- roofline and patch -------------------------------------------------------------------------

@dataclass(frozen=True)
class Roofline:
    """How far from the GPU's peak (run.json ``roofline``): model FLOPs utilization (MFU, 0..1)
    and achieved TFLOP/s of the baseline, the kept stack and the data-free ceiling.

    baseline_mfu, stack_mfu, ceiling_mfu            None where that run or its FLOP count is missing
    baseline_tflops, stack_tflops, ceiling_tflops   achieved TFLOP/s
    stack_trial             the trial that is the kept stack
    ceiling_kept_fraction   the stack's (else the baseline's) samples/s as a fraction of the ceiling's
    flops_per_sample, flops_per_step   the model's FLOPs, counted on one warm-up step
    gpu_name                the GPU the peaks are of
    why_not                 why FLOPs were not counted, when they were not
    """

    baseline_mfu: float | None
    stack_mfu: float | None
    ceiling_mfu: float | None
    baseline_tflops: float | None = None
    stack_tflops: float | None = None
    ceiling_tflops: float | None = None
    stack_trial: str | None = None
    ceiling_kept_fraction: float | None = None
    flops_per_sample: float | None = None
    flops_per_step: float | None = None
    gpu_name: str | None = None
    why_not: str | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Any) -> Roofline | None:
        if not isinstance(d, Mapping) or not d:
            return None
        d = dict(d)
        base, stack, ceil = _dict(d.get("baseline")), _dict(d.get("stack")), _dict(d.get("ceiling"))
        return cls(baseline_mfu=_float(base.get("mfu")), stack_mfu=_float(stack.get("mfu")),
                   ceiling_mfu=_float(ceil.get("mfu")), baseline_tflops=_float(base.get("achieved_tflops")),
                   stack_tflops=_float(stack.get("achieved_tflops")), ceiling_tflops=_float(ceil.get("achieved_tflops")),
                   stack_trial=_str(stack.get("trial")), ceiling_kept_fraction=_float(ceil.get("kept_fraction")),
                   flops_per_sample=_float(d.get("flops_per_sample")), flops_per_step=_float(d.get("flops_per_step")),
                   gpu_name=_str(d.get("gpu_name")), why_not=_str(d.get("why_not")), raw=d)


@dataclass(frozen=True)
class Patch:
    """The kept fixes as a patch to the script (run.json ``patch``) and its verification: the
    patched script run as plain python and timed.

    file                  the patch (fixes.patch in the run directory), None when nothing was patched
    verification_status   the verification's verdict ("verified"; "partial": an edit did not take
                          effect; "short": under 90% of the stack it reproduces; "not applied",
                          "failed"), None when not verified
    samples_per_s, step_time_ms, speedup_vs_baseline   the patched script's measurement
    of_stack              its samples/s as a fraction of the kept stack's
    checks                per fix: whether it took effect in the patched script, where
    notes                 per fix: whether and where it was applied, the edits
    error                 why verification could not run, when it could not
    """

    file: Path | None
    verification_status: str | None = None
    samples_per_s: float | None = None
    step_time_ms: float | None = None
    speedup_vs_baseline: float | None = None
    of_stack: float | None = None
    checks: tuple[dict, ...] = field(default=(), repr=False)
    notes: tuple[dict, ...] = field(default=(), repr=False)
    error: str | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Any, run_dir: Path) -> Patch | None:
        if not isinstance(d, Mapping) or not d:
            return None
        d = dict(d)
        v = _dict(d.get("verification"))
        name = _str(d.get("file"))
        return cls(file=run_dir / name if name else None, verification_status=_str(v.get("status")),
                   samples_per_s=_float(v.get("samples_per_s")), step_time_ms=_float(v.get("step_time_ms")),
                   speedup_vs_baseline=_float(v.get("speedup_vs_baseline")), of_stack=_float(v.get("of_stack")),
                   checks=tuple(_dict(c) for c in _list(v.get("checks"))),
                   notes=tuple(_dict(n) for n in _list(d.get("notes"))), error=_str(v.get("error")), raw=d)


