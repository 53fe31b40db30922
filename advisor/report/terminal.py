"""Terminal summaries (rich) of a run document or an inspected trace."""

from __future__ import annotations

import textwrap

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from advisor.report.overhead import profiler_overhead

PHASE_LABELS = {
    "data_wait": "data wait", "h2d": "host→device copy", "forward": "forward", "backward": "backward",
    "zero_grad": "zero_grad", "optimizer": "optimizer", "other": "other", "gpu_idle": "GPU idle",
}


def name_cell(value, style: str = "") -> Text:
    """A name in a table (a phase, a trial, a fix, a device): on one line, ending in an ellipsis
    where the terminal is too narrow, never wrapped mid-word. Set on the cell, not the column:
    rich shrinks only the columns that may wrap to fit a table, and a no_wrap column would make
    it cut every column (the figures too) instead. Plain text: never read as markup."""
    return Text(str(value), style=style, no_wrap=True, overflow="ellipsis")


def _fmt(v, unit: str = "", nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}{unit}"
    return f"{v}{unit}"


def breakdown_table(analysis: dict, title: str | None = None, measurement: dict | None = None) -> Table:
    """Each phase's ms and share of the step. With a measured (unprofiled) step, the ms are
    scaled to it (phase × measured / profiled: the profiler slows steps, on a CPU several
    times) beside the profiled ms; the shares are the profiled step's. Without one (`inspect`
    reads a trace alone) the profiled step as it was."""
    ov = profiler_overhead(analysis, measurement)
    total = ov["profiled_ms"] or 0.0
    raw = ov["profiled_breakdown"] or {}
    if not ov["scaled"]:
        table = Table("phase", "ms / step", "share", title=title or "where a profiled step's time goes")
        for phase, ms in raw.items():
            share = (ms / total * 100.0) if total and ms is not None else 0.0
            table.add_row(name_cell(PHASE_LABELS.get(phase, phase)), _fmt(_float(ms), nd=2), f"{share:.1f}%")
        table.add_row(name_cell("step", "bold"), _fmt(float(total), nd=2), "100%")
        return table
    table = Table("phase", "ms / step", "share", "profiled ms",
                  title=title or "where a measured step's time goes")
    for phase, ms in raw.items():
        share = (ms / total * 100.0) if total and ms is not None else 0.0
        table.add_row(name_cell(PHASE_LABELS.get(phase, phase)), _fmt(_float(ov["breakdown"].get(phase)), nd=2),
                      f"{share:.1f}%", _fmt(_float(ms), nd=2))
    table.add_row(name_cell("step", "bold"), _fmt(float(ov["measured_ms"]), nd=2), "100%", _fmt(float(total), nd=2))
    return table


def _float(v):
    return None if v is None else float(v)


def overhead_lines(analysis: dict, measurement: dict | None, width: int = 80) -> list[str]:
    """The profiler's overhead in words, wrapped to `width` columns (plain text, markup
    escaped); none where nothing was measured."""
    sentence = profiler_overhead(analysis, measurement)["sentence"]
    return [escape(line) for line in textwrap.wrap(sentence, width=width)] if sentence else []


def kernel_table(analysis: dict) -> Table | None:
    frac = analysis.get("kernel_time_by_class") or {}
    if not any(frac.values()):
        return None
    table = Table("kernel class", "share of GPU kernel time", title="GPU kernel time by class")
    for cls, f in sorted(frac.items(), key=lambda kv: -kv[1]):
        if f > 0:
            table.add_row(name_cell(cls), f"{f * 100:.1f}%")
    return table


def findings_table(findings: list) -> Table | None:
    if not findings:
        return None
    table = Table("code", "severity", "finding", "est. gain", "fix", title="findings (ranked by estimated gain)")
    for f in findings:
        gain = f.get("estimated_gain_ms")
        fix = (f.get("fix") or {}).get("intervention") or ""
        table.add_row(name_cell(f.get("code", "")), name_cell(f.get("severity", "")), escape(f.get("message", "")),
                      _fmt(gain, " ms", 2) if gain is not None else "–", name_cell(fix))
    return table


def batch_text(batch, micro=None) -> str:
    """A step's batch: "256", or "32x4" where the step accumulates gradients over 4 batches."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
        return ""
    return f"{batch}x{micro}" if isinstance(micro, int) and not isinstance(micro, bool) and micro > 1 else str(batch)


def trials_table(doc: dict) -> Table | None:
    """The tutorials' ladder: baseline, then each trial (by name: the fix it added) with its
    verdict and cumulative speedup, its name last so that the figures keep their columns in a
    log's 80. The verdicts' reasons follow the table (trial_reasons): inside it, a reason
    wrapped a word a line."""
    trials = doc.get("trials") or []
    if not trials:
        return None
    meas = doc.get("measurement") or {}
    table = Table("speedup", "ms/step", "samples/s", "batch", "GiB", "warm-up", "verdict", "trial",
                  title="trials (each in a fresh process; the fix applied at run time)", box=box.SIMPLE_HEAD,
                  padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    for col in table.columns[:-1]:
        col.no_wrap = True
    mem = (doc.get("memory") or {}).get("max_allocated_bytes")
    table.add_row("1.00x", _fmt(meas.get("step_time_ms"), nd=2), _fmt(meas.get("samples_per_s"), nd=0),
                  batch_text(meas.get("batch_size"), meas.get("micro_batches")) or "?", _gib(mem, unit=False), "", "",
                  name_cell("baseline"))
    for t in trials:
        sp = t.get("speedup_vs_baseline")
        table.add_row(f"{sp:.2f}x" if sp else "", _fmt(t.get("step_time_ms"), nd=2), _fmt(t.get("samples_per_s"), nd=0),
                      batch_text(t.get("batch_size"), t.get("micro_batches")), _gib(t.get("peak_memory_bytes"), unit=False),
                      _fmt(t.get("warmup_cost_s"), " s"), escape(str(t.get("status") or "?")),
                      name_cell(t.get("name") or t.get("fix") or "?"))  # in full in the reasons below
    return table


def trial_reasons(doc: dict) -> list[str]:
    """Each trial's verdict in words, a line each (markup escaped); its stack is the kept
    fixes before it plus what its name adds (the HTML report lists it whole)."""
    return [f"[b]{escape(str(t.get('name') or '?'))}[/]: {escape(str(t.get('status') or '?'))}, "
            f"{escape(str(t.get('reason') or ''))}" + _failure_words(t) for t in doc.get("trials") or []]


def _failure_words(t: dict) -> str:
    """A failed trial's failure, named (advisor.failures.line): the script's line it failed at,
    or advisor's bug, in red."""
    f = t.get("failure")
    if t.get("status") != "failed" or not isinstance(f, dict) or not f.get("kind"):
        return ""
    from advisor.failures import line

    return f" [{'bold red' if f.get('kind') == 'advisor' else 'yellow'}]({escape(line(f))})[/]"


def _gib(n, unit: bool = True) -> str:
    return (f"{n / 2**30:.2f} GiB" if unit else f"{n / 2**30:.2f}") if n else "–"


def print_summary(doc: dict, console: Console) -> None:
    meas = doc.get("measurement") or {}
    env = doc.get("environment") or {}
    analysis = doc.get("analysis") or {}
    head = Table.grid(padding=(0, 2))
    head.add_row("device", escape(str(env.get("gpu_name") or "CPU")))
    head.add_row("step time", f"{_fmt(meas.get('step_time_ms'), ' ms', 2)} (a window of {meas.get('steps_measured', 0)} unprofiled steps)")
    batch = batch_text(meas.get("batch_size"), meas.get("micro_batches")) or "?"
    if meas.get("ranks"):
        batch += f" on each of {meas['ranks']} ranks"
    head.add_row("throughput", f"{_fmt(meas.get('samples_per_s'), ' samples/s')} (batch {batch})")
    if meas.get("tokens_per_s") is not None:   # a sequence model's batches (measure.tokens_per_s)
        pad = meas.get("padding_frac")
        head.add_row("tokens", f"{_fmt(meas['tokens_per_s'], ' real tokens/s')} "
                               + (f"({pad:.0%} of the batches' tokens padding)" if pad is not None
                                  else "(no attention mask: every position a token)"))
    if doc.get("applied"):
        head.add_row("applied (--apply)", escape("; ".join(doc["applied"])))
    if analysis.get("gpu_busy_pct") is not None:
        head.add_row("GPU busy", f"{analysis['gpu_busy_pct']:.1f}%")
    head.add_row("status", doc.get("status", "?") + ("" if doc.get("status") == "complete"
                                                     else f": {escape('; '.join(doc.get('incomplete_reasons') or []))}"))
    console.print(head)
    _print_analysis(console, analysis, doc.get("findings") or [], meas)
    _print_ranks(console, doc)
    tt = trials_table(doc)
    if tt is not None:
        console.print(tt)
        for line in trial_reasons(doc):
            console.print(line, highlight=False)
    summary = doc.get("trial_summary") or {}
    for key, style in (("settled", "yellow"), ("unsettled", "bold yellow"), ("stopped_early", "dim")):
        if summary.get(key):
            console.print(f"[{style}]{escape(str(summary[key]))}[/]")
    if (summary.get("lead_in") or {}).get("note"):   # the repeat's start-up beyond its noise (advisor.costs)
        console.print(f"[yellow]{escape(str(summary['lead_in']['note']))}[/]")
    from advisor.headroom import lines as headroom_lines
    for line in headroom_lines(doc.get("roofline")):
        console.print(escape(line), highlight=False)
    patch = doc.get("patch") or {}
    if patch.get("file"):
        console.print(f"accepted fixes as a patch: {escape(str(doc.get('run_dir')))}/fixes.patch (git apply)")
    for launch in (n["launch"] for n in patch.get("notes") or [] if n.get("applied") and n.get("launch")):
        console.print(f"launch the patched script with: {escape(launch)}")
    for change in (c for n in patch.get("notes") or [] for c in n.get("argv_changes") or []):
        word = change["flag"] if change.get("to") is None else \
            f"{change['flag']} {change['to']}" if str(change["flag"]).startswith("-") else f"{change['flag']}={change['to']}"
        gave = "not on your command line" if change.get("from") is None else f"the command line gave {change['from']}"
        console.print(f"run it with {escape(word)} ({escape(gave)})")
    for change in (c for n in patch.get("notes") or [] for c in n.get("env_changes") or []):
        console.print(f"run it with {escape(change['name'])}={escape(str(change['to']))} "
                      f"(the environment had {escape(str(change['from']))})")
    for fix, why in (patch.get("left_out") or {}).items():
        console.print(f"left out of fixes.patch: {escape(str(fix))}: {escape(str(why))}")
    e2e = patch.get("end_to_end")
    if isinstance(e2e, dict):
        console.print(f"the whole run ({e2e.get('steps')} steps: {escape(str(e2e.get('source')))}): "
                      f"{e2e.get('baseline_s')} s as written, {e2e.get('patched_s')} s patched, one-off costs included")
    if isinstance(patch.get("verification"), dict):
        from advisor.report.verification import shortfalls
        v = patch["verification"]
        style = "green" if v.get("status") == "verified" else "yellow"
        console.print(f"[{style}]{escape(verification_line(v))}[/]")
        for line in shortfalls(v):
            console.print(f"[yellow]  ✘ {escape(line)}[/]")
    for note in doc.get("notes") or []:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for line in own_traces_lines(doc):
        console.print(escape(line))
    line = sandbox_line(doc.get("sandbox"))
    if line:
        console.print(escape(line), highlight=False)
    from advisor.report.outcome import outcome_lines
    console.rule("summary", style="dim")
    for line in outcome_lines(doc):   # the command stays one line, to copy; the rest wraps
        console.print(escape(line), highlight=False, soft_wrap=line.startswith("run: "))
    console.print(f"report: {escape(str(doc.get('run_dir')))}/index.html")


def sandbox_line(sb) -> str | None:
    """Which sandbox the processes after the baseline ran in, and what it kept from the user's
    files (docs/safety.md)."""
    if not isinstance(sb, dict) or not isinstance(sb.get("processes"), dict):
        return None
    procs = [p for p in sb["processes"].values() if isinstance(p, dict)]
    turned = sum(len(p.get("redirected") or []) for p in procs)
    absorbed = sum(len(p.get("absorbed") or []) for p in procs)
    escaped = sorted({f for p in procs for f in p.get("unredirected") or []})
    kind = ("a copy-on-write view of the filesystem" if sb.get("kind") == "overlay"
            else f"advisor's Python hooks alone ({sb.get('why') or 'no copy-on-write view here'})")
    past = (f"; {len(escaped)} of your files changed past the hooks (native code or a subprocess): "
            + ", ".join(escaped[:3]) + (", ..." if len(escaped) > 3 else "")) if escaped else ""
    return (f"your files: {len(procs)} processes after the baseline ran in {kind}; {turned} of their changes "
            f"were redirected or left undone" + (f", {absorbed} absorbed by the view" if sb.get("kind") == "overlay" else "")
            + past + " (run.json sandbox)")


def verification_line(v: dict) -> str:
    """patch.verification in one line (report.verification.summary_line), or why it was skipped."""
    if v.get("status") == "skipped":
        return f"fixes.patch not verified: {v.get('reason') or 'skipped'}"
    from advisor.report.verification import summary_line

    return summary_line(v)


def own_traces_lines(doc: dict) -> list[str]:
    """What the script's own profiler wrote (advisor.schedule.own_profiler_run), in words."""
    own = doc.get("own_traces")
    if not isinstance(own, dict):
        return []
    if own.get("traces"):
        return [f"your profiler's trace: {t}" for t in own["traces"]] + \
            [f"(written where the script asked, in a run of their own: {own.get('steps')} steps)"]
    return [f"your profiler wrote no trace in advisor's run for it: {own.get('reason') or 'unknown'}"]


def print_inspect(res: dict, console: Console) -> None:
    """An inspected trace: its breakdown and kernel classes, then its findings a line each (or
    "no findings") and the rules that could not run on it, by reason."""
    console.print(f"[b]{escape(res['trace'])}[/]")
    env = res.get("environment") or {}
    if env.get("gpu_name"):
        console.print(f"device: {escape(str(env['gpu_name']))}")
    _print_analysis(console, res.get("analysis") or {}, [])
    for line in [*finding_lines(res.get("findings") or []), *skipped_lines(res.get("skipped_rules") or [])]:
        console.print(Text(line))


def finding_lines(findings: list) -> list[str]:
    """Each finding in one line: code, severity, message, estimated gain and fix."""
    if not findings:
        return ["no findings"]
    out = [f"findings ({len(findings)}, ranked by estimated gain):"]
    for f in findings:
        gain, fix = f.get("estimated_gain_ms"), (f.get("fix") or {}).get("intervention")
        extra = "; ".join(filter(None, [f"est. gain {_fmt(gain, ' ms', 2)}" if gain is not None else "",
                                        f"fix: {fix}" if fix else ""]))
        out.append(f"  {f.get('code', '?')} {f.get('severity', '')}: {f.get('message', '')}"
                   + (f" ({extra})" if extra else ""))
    return out


def skipped_lines(skipped: list) -> list[str]:
    """The rules that did not run, how many for each reason (a trace alone has no observed
    configuration, a CPU trace no GPU activity), with their codes."""
    if not skipped:
        return ["skipped rules: none"]
    by: dict[str, list[str]] = {}
    for r in skipped:
        by.setdefault(str(r.get("reason") or "no reason given"), []).append(str(r.get("code") or "?"))
    return [f"skipped rules: {len(skipped)}",
            *(f"  {len(codes)}: {reason} ({', '.join(codes)})" for reason, codes in by.items())]


def _print_analysis(console: Console, analysis: dict, findings: list, measurement: dict | None = None) -> None:
    """The breakdown, kernel classes and findings: what analyze and inspect both show (analyze
    with its measured step: the breakdown scaled to it, and the profiler's overhead said;
    inspect gives its findings in lines of their own)."""
    if analysis:
        console.print(breakdown_table(analysis, measurement=measurement))
        for line in overhead_lines(analysis, measurement, width=min(80, console.width)):
            console.print(line, highlight=False)
    for table in [kernel_table(analysis) if analysis else None, findings_table(findings)]:
        if table is not None:
            console.print(table)


def _print_ranks(console: Console, doc: dict) -> None:
    """Each rank's step, phases and communication (advisor.report.ranks), ms per step."""
    from advisor.report.ranks import COLUMNS, table

    rows = table(doc)
    if not rows:
        return
    t = Table(title="each rank, ms per step: step and data wait timed; forward, backward, optimizer and "
                    "communication (exposed: no compute beside it) profiled", title_style="")
    for head in ("rank", "device", *(c for c, _ in COLUMNS)):
        t.add_column(head, justify="left" if head in ("rank", "device") else "right")
    for r in rows:
        t.add_row(str(r["rank"]), name_cell(r["device"] or "?"),
                  *("–" if v is None else f"{v:.2f}" for v in r["cells"]))
    console.print(t)
