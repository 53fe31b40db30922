"""The Python API, for notebooks: a saved run or a trace as typed, read-only results.

    import advisor
    run = advisor.load_run("reports/my-run")       # what `advisor analyze` saved (run.json)
    run.breakdown_frame()                           # phase, ms_profiled, ms_scaled, share
    run.to_frame()                                  # the trials table
    run.findings.filter(severity="error")
    ins = advisor.inspect("trace.pt.trace.json.gz")  # what `advisor inspect` computes, as an object

Both are built from plain data the rest of advisor already produces (run.json; the trace model,
its metrics and the rule catalogue), so the figures are the ones the terminal and the HTML report
show. Every key of a run document is optional here: runs are kept whatever stage they reached and
older runs lack newer keys, so a missing or malformed key reads as None or empty, never as an error.

Nothing heavy is imported at module level (the trace loader and numpy only when a trace is
inspected, pandas only by the ``*_frame()`` / ``to_frame()`` methods), so ``import advisor`` stays
cheap in a notebook that only reads runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.report.overhead import profiler_overhead

__all__ = ["load_run", "inspect", "Run", "Inspection", "Finding", "Findings", "Trial", "Trials",
           "Roofline", "Patch"]

PathLike = str | os.PathLike

BREAKDOWN_COLUMNS = ("phase", "ms_profiled", "ms_scaled", "share")
FINDING_COLUMNS = ("code", "name", "severity", "message", "est_gain_ms", "fix_intervention", "fix_where")
TRIAL_COLUMNS = ("name", "fix", "status", "samples_per_s", "step_time_ms", "speedup_vs_baseline",
                 "gain_vs_previous", "batch_size", "apart", "ceiling", "reason")
KERNEL_COLUMNS = ("kernel_class", "share", "ms_per_step")


# --- tolerant readers: a missing or mistyped key is absent, never an error ---------------------

def _dict(v: Any) -> dict:
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else []


def _float(v: Any) -> float | None:
    # bool is an int to Python but never a measurement; numpy scalars pass through float()
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _float(v)
    return int(f) if f is not None and f == int(f) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _numbers(v: Any) -> dict[str, float | None] | None:
    """A {name: number} mapping with its values as floats (None where not a number); None when empty."""
    if not isinstance(v, Mapping) or not v:
        return None
    return {str(k): _float(x) for k, x in v.items()}


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("this needs pandas: pip install pandas") from None
    return pandas


# columns that hold numbers: float, absent values NaN (a column of None alone would be object dtype)
NUMERIC = {"ms_profiled", "ms_scaled", "share", "ms_per_step", "est_gain_ms", "samples_per_s", "step_time_ms",
           "speedup_vs_baseline", "gain_vs_previous"}


def _frame(rows: list[dict], columns: Sequence[str]):
    df = _pandas().DataFrame(rows, columns=list(columns))
    for c in columns:
        if c in NUMERIC:
            df[c] = df[c].astype(float)
    return df


def _breakdown_rows(profiled: dict | None, scaled: dict | None) -> list[dict]:
    """One row a phase; the share is of the profiled step (scaling keeps the shares)."""
    if not profiled:
        return []
    total = sum(v for v in profiled.values() if v is not None)
    scaled = scaled or {}
    return [{"phase": phase, "ms_profiled": ms, "ms_scaled": scaled.get(phase),
             "share": ms / total if ms is not None and total > 0 else None}
            for phase, ms in profiled.items()]


def _kernel_rows(shares: dict | None, ms: dict | None) -> list[dict]:
    shares, ms = shares or {}, ms or {}
    return [{"kernel_class": c, "share": shares.get(c), "ms_per_step": ms.get(c)} for c in {**shares, **ms}]


def _one_of(value: str | Iterable[str] | None) -> set[str] | None:
    if value is None:
        return None
    return {value} if isinstance(value, str) else set(value)


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
    verification_status   the verification's verdict (e.g. "short": slower than the stack it
                          reproduces; "not applied", "failed"), None when not verified
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


# --- a saved run --------------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class Run:
    """A run saved by ``advisor analyze`` (its run.json), read with :func:`load_run`.

    run_dir                  the directory run.json was read from
    status                   "complete" or "incomplete" (None when the document has none)
    incomplete_reasons       why an incomplete run stopped short, one line each
    script, created          the script analysed and when
    environment              the machine: python, torch, cuda, gpu_name, gpu_count, cpu_count, ...
    step_time_ms             the measured step: unprofiled, synchronized steps (mean of the timed window)
    samples_per_s            the measured throughput
    batch_size               samples a step
    profiled_step_time_ms    the profiled step (the profiler slows it)
    breakdown                phase -> ms of the profiled step (data_wait, h2d, forward, backward,
                             zero_grad, optimizer, other, gpu_idle); sums to profiled_step_time_ms
    breakdown_scaled         each phase x measured / profiled: the same shares, summing to the measured
                             step; None without both step times
    profiler_overhead        profiled / measured step (2.0: the profiler doubled the step); None
                             without both
    kernel_time_by_class     kernel class -> share of GPU op time (0..1)
    kernel_time_ms_by_class  kernel class -> ms per step
    gpu_busy_pct             % of the profiled step some GPU op ran
    findings                 the rules' findings (Findings)
    trials                   the trials, in the order they ran (Trials)
    roofline                 MFU of baseline, stack and ceiling (Roofline), None when not computed
    patch                    fixes.patch and its verification (Patch), None when none was written
    doc                      the whole run document, for anything else
    """

    run_dir: Path
    status: str | None
    incomplete_reasons: tuple[str, ...]
    script: str | None
    created: str | None
    environment: dict
    step_time_ms: float | None
    samples_per_s: float | None
    batch_size: int | None
    profiled_step_time_ms: float | None
    breakdown: dict[str, float | None] | None
    breakdown_scaled: dict[str, float | None] | None
    profiler_overhead: float | None
    kernel_time_by_class: dict[str, float | None] | None
    kernel_time_ms_by_class: dict[str, float | None] | None
    gpu_busy_pct: float | None
    findings: Findings
    trials: Trials
    roofline: Roofline | None
    patch: Patch | None
    doc: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        # the headline only: a notebook cell that ends in a run shows this, the fields hold the rest
        return (f"Run(run_dir={str(self.run_dir)!r}, status={self.status!r}, step_time_ms={self.step_time_ms!r}, "
                f"samples_per_s={self.samples_per_s!r}, batch_size={self.batch_size!r}, "
                f"profiler_overhead={self.profiler_overhead!r}, findings={self.findings.codes!r}, "
                f"trials={self.trials.names!r})")

    @property
    def complete(self) -> bool:
        """Whether the run reached every stage (status "complete")."""
        return self.status == "complete"

    @classmethod
    def from_document(cls, doc: Mapping, run_dir: PathLike) -> Run:
        """A Run from a run document already in memory; every key optional."""
        doc = _dict(doc)
        analysis, meas = _dict(doc.get("analysis")), _dict(doc.get("measurement"))
        ov = profiler_overhead(analysis, meas)   # the terminal's and the report's scaling, reused
        return cls(run_dir=Path(run_dir), status=_str(doc.get("status")),
                   incomplete_reasons=tuple(str(r) for r in _list(doc.get("incomplete_reasons"))),
                   script=_str(_dict(doc.get("command")).get("script")), created=_str(doc.get("created")),
                   environment=_dict(doc.get("environment")),
                   step_time_ms=_float(meas.get("step_time_ms")), samples_per_s=_float(meas.get("samples_per_s")),
                   batch_size=_int(meas.get("batch_size")), profiled_step_time_ms=_float(analysis.get("step_time_ms")),
                   breakdown=_numbers(analysis.get("breakdown")),
                   breakdown_scaled=_numbers(ov["breakdown"]) if ov["scaled"] else None,
                   profiler_overhead=_float(ov["factor"]),
                   kernel_time_by_class=_numbers(analysis.get("kernel_time_by_class")),
                   kernel_time_ms_by_class=_numbers(analysis.get("kernel_time_ms_by_class")),
                   gpu_busy_pct=_float(analysis.get("gpu_busy_pct")),
                   findings=Findings.from_list(doc.get("findings")), trials=Trials.from_list(doc.get("trials")),
                   roofline=Roofline.from_dict(doc.get("roofline")),
                   patch=Patch.from_dict(doc.get("patch"), Path(run_dir)), doc=doc)

    def to_frame(self):
        """The trials table (Trials.to_frame). ImportError without pandas."""
        return self.trials.to_frame()

    def findings_frame(self):
        """The findings table (Findings.to_frame). ImportError without pandas."""
        return self.findings.to_frame()

    def breakdown_frame(self):
        """One row a phase: phase, ms_profiled, ms_scaled (None without a measured step), share (of
        the profiled step; the scaled one has the same). ImportError without pandas."""
        return _frame(_breakdown_rows(self.breakdown, self.breakdown_scaled), BREAKDOWN_COLUMNS)

    def kernel_classes_frame(self):
        """One row a kernel class: kernel_class, share (of GPU op time), ms_per_step. ImportError
        without pandas."""
        return _frame(_kernel_rows(self.kernel_time_by_class, self.kernel_time_ms_by_class), KERNEL_COLUMNS)


def _read_document(path: Path) -> dict:
    from advisor import rundir

    try:
        doc = rundir.read_json(path)
    except ValueError as exc:  # orjson's decode error is a ValueError
        raise ValueError(f"{path}: not a JSON run document ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a run document (a JSON {type(doc).__name__}, not an object)")
    return doc


def load_run(run_dir: PathLike) -> Run:
    """The run ``advisor analyze`` saved in run_dir (the directory, or its run.json).

    FileNotFoundError when the path does not exist or holds no run.json; ValueError when run.json
    is not a JSON object. Keys missing from the document (older or incomplete runs) read as None
    or empty.
    """
    p = Path(run_dir)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    found = p / "run.json" if p.is_dir() else p
    if not found.is_file():
        raise FileNotFoundError(f"no run.json in {p}: pass a run directory written by `advisor analyze`")
    return Run.from_document(_read_document(found), found.parent)


# --- an inspected trace -------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class Inspection:
    """What ``advisor inspect`` finds in a trace, read with :func:`inspect`. Nothing was measured
    without the profiler here, so every time is the profiled step's.

    trace                    the trace file analysed
    other_ranks              the traces of the job's other ranks its rules compared it with
    environment              what the trace says of its machine: gpu_name, gpu_count, gpu_memory_bytes,
                             compute_capability, cuda_runtime, cuda_driver
    step_time_ms             the profiled step (median over the trace's steps)
    steps_in_trace           the steps the trace holds
    breakdown                phase -> ms of the profiled step; sums to step_time_ms
    kernel_time_by_class     kernel class -> share of GPU op time (0..1)
    kernel_time_ms_by_class  kernel class -> ms per step
    gpu_busy_pct             % of the step some GPU op ran; None without GPU activity
    findings                 the rules' findings (Findings)
    skipped_rules            rules that could not run on a trace alone, each {code, name, reason}
    analysis                 every metric (advisor.metrics.analyze), for anything else
    """

    trace: Path
    other_ranks: tuple[Path, ...]
    environment: dict
    step_time_ms: float | None
    steps_in_trace: int | None
    breakdown: dict[str, float | None] | None
    kernel_time_by_class: dict[str, float | None] | None
    kernel_time_ms_by_class: dict[str, float | None] | None
    gpu_busy_pct: float | None
    findings: Findings
    skipped_rules: tuple[dict, ...] = field(default=(), repr=False)
    analysis: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"Inspection(trace={str(self.trace)!r}, step_time_ms={self.step_time_ms!r}, "
                f"gpu_busy_pct={self.gpu_busy_pct!r}, findings={self.findings.codes!r})")

    @property
    def trace_paths(self) -> tuple[Path, ...]:
        """Every trace analysed together: this one first, then the other ranks'."""
        return (self.trace, *self.other_ranks)

    def breakdown_frame(self):
        """One row a phase: phase, ms_profiled, ms_scaled (None: there is no measured step to scale
        to), share. ImportError without pandas."""
        return _frame(_breakdown_rows(self.breakdown, None), BREAKDOWN_COLUMNS)

    def findings_frame(self):
        """The findings table (Findings.to_frame). ImportError without pandas."""
        return self.findings.to_frame()

    def kernel_classes_frame(self):
        """One row a kernel class: kernel_class, share, ms_per_step. ImportError without pandas."""
        return _frame(_kernel_rows(self.kernel_time_by_class, self.kernel_time_ms_by_class), KERNEL_COLUMNS)

    def to_frame(self):
        """The breakdown table (breakdown_frame): a trace has no trials. ImportError without pandas."""
        return self.breakdown_frame()


def _trace_of(target: PathLike) -> tuple[Path, dict]:
    """The trace a path stands for, and the observed config that goes with it: a file is itself; a
    run directory (or its run.json) is its baseline's trace, with the config its run observed (the
    config rules run then, as with the command line); any other directory is its newest trace."""
    from advisor.trace import TraceError, find_trace_files

    p = Path(target)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    if p.is_file() and p.name == "run.json":
        p = p.parent
    config: dict = {}
    if p.is_dir() and (p / "run.json").is_file():
        doc = _read_document(p / "run.json")
        config = _dict(doc.get("config"))
        # run.json names its own run's traces; the directory also holds every trial's
        named = [p / f for files in _dict(doc.get("traces")).values() for f in _list(files) if isinstance(f, str)]
        named = [f for f in named if f.is_file()]
        if named:
            return named[-1], config
    try:
        return find_trace_files(p)[-1], config
    except TraceError as exc:
        raise FileNotFoundError(str(exc)) from None


def _thresholds(thresholds):
    from advisor.thresholds import Thresholds

    if isinstance(thresholds, Thresholds):
        return thresholds
    # as on the command line: ADVISOR_THRESHOLDS, then the overrides; ValueError names an unknown one
    items = [f"{k}={v}" for k, v in _dict(thresholds).items()]
    return Thresholds.from_environment(items)


def inspect(trace_or_dir: PathLike, *, other_ranks: Sequence[PathLike] = (), rules_dirs: Sequence[PathLike] = (),
            thresholds: Mapping[str, float] | Any = None) -> Inspection:
    """Analyse an existing Kineto trace as ``advisor inspect`` does: breakdown, kernel classes,
    findings.

    trace_or_dir  a trace (.pt.trace.json or .json.gz); a run directory of ``advisor analyze`` (its
                  baseline trace, with the config the run observed, so the config rules run too);
                  or any other directory (its newest trace, a TensorBoard log dir for instance)
    other_ranks   traces of the other ranks of the same distributed job: the cross-rank rules
                  (stragglers, exposed communication) compare this rank with them
    rules_dirs    extra rule directories, as ``--rules``
    thresholds    rule threshold overrides {name: value} (advisor.thresholds.Thresholds fields),
                  or a Thresholds; ADVISOR_THRESHOLDS applies as on the command line

    FileNotFoundError when a path does not exist or a directory holds no trace; ValueError when a
    trace cannot be read, the traces are not distinct ranks of one job, or a threshold is unknown.
    """
    from advisor import pipeline
    from advisor.metrics import analyze
    from advisor.trace import TraceError, load_trace

    path, config = _trace_of(trace_or_dir)
    others = [_trace_of(o)[0] for o in other_ranks]
    limits = _thresholds(thresholds)
    try:
        models = [load_trace(f) for f in (path, *others)]
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    if others:
        ranks = [(m.meta.get("distributed_info") or {}).get("rank") for m in models]
        if None in ranks or len(set(ranks)) != len(ranks):
            raise ValueError(f"other_ranks: the traces are not distinct ranks of one distributed job (ranks {ranks})")
    analyses = [analyze(m) for m in models]
    env = pipeline.environment_from_trace(models[0])
    findings, skipped = pipeline.run_findings(models[0], analyses[0], config, env, [str(d) for d in rules_dirs],
                                              extra_models=models[1:], extra_analyses=analyses[1:],
                                              thresholds=limits)
    a = analyses[0]
    return Inspection(trace=path, other_ranks=tuple(others), environment=env, step_time_ms=_float(a.get("step_time_ms")),
                      steps_in_trace=_int(a.get("steps_in_trace")), breakdown=_numbers(a.get("breakdown")),
                      kernel_time_by_class=_numbers(a.get("kernel_time_by_class")),
                      kernel_time_ms_by_class=_numbers(a.get("kernel_time_ms_by_class")),
                      gpu_busy_pct=_float(a.get("gpu_busy_pct")), findings=Findings.from_list(findings),
                      skipped_rules=tuple(_dict(s) for s in skipped), analysis=a)
