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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.api._read import (
    BREAKDOWN_COLUMNS,
    KERNEL_COLUMNS,
    PathLike,
    _breakdown_rows,
    _dict,
    _float,
    _frame,
    _int,
    _kernel_rows,
    _list,
    _numbers,
    _str,
)
from advisor.api.records import Finding, Findings, Patch, Roofline, Trial, Trials
from advisor.report.overhead import profiler_overhead

__all__ = ["load_run", "inspect", "Run", "Inspection", "Finding", "Findings", "Trial", "Trials",
           "Roofline", "Patch"]

# --- a saved run --------------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class Run:
    """A run saved by ``advisor analyze`` (its run.json), read with :func:`load_run`.

    run_dir                  the directory run.json was read from
    status                   "complete", "incomplete" or "interrupted" (Ctrl-C; None when the document has none)
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
    from advisor import results
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
    env = results.environment_from_trace(models[0])
    findings, skipped = results.run_findings(models[0], analyses[0], config, env, [str(d) for d in rules_dirs],
                                              extra_models=models[1:], extra_analyses=analyses[1:],
                                              thresholds=limits)
    a = analyses[0]
    return Inspection(trace=path, other_ranks=tuple(others), environment=env, step_time_ms=_float(a.get("step_time_ms")),
                      steps_in_trace=_int(a.get("steps_in_trace")), breakdown=_numbers(a.get("breakdown")),
                      kernel_time_by_class=_numbers(a.get("kernel_time_by_class")),
                      kernel_time_ms_by_class=_numbers(a.get("kernel_time_ms_by_class")),
                      gpu_busy_pct=_float(a.get("gpu_busy_pct")), findings=Findings.from_list(findings),
                      skipped_rules=tuple(_dict(s) for s in skipped), analysis=a)
