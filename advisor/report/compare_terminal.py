"""`advisor compare BASE NEW` on the terminal (no --out, --fail-below or --json): the two runs'
headline numbers, the speedup, the step breakdown side by side, the findings that went away or
appeared and the configuration that differs; what the compare page shows first
(advisor.report.compare.compare_summary), in text."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from advisor.report.terminal import PHASE_LABELS, name_cell

MOST_SETTINGS = 12   # configuration rows shown; the page (--out) lists them all
VALUE_CHARS = 40     # a setting's value, cut beyond this


def _n(v, nd: int = 2, unit: str = "") -> str:
    return "–" if v is None else f"{v:,.{nd}f}{unit}"


def _change(va, vb, nd: int = 2) -> str:
    return "–" if va is None or vb is None else f"{vb - va:+,.{nd}f}"


def _gib(n) -> str:
    return f"{n / 2**30:.2f} GiB" if n else "–"


def _table(title: str, names: tuple[str, str], first: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False)
    table.add_column(first)
    for head in (*names, "change"):
        table.add_column(head, justify="right", no_wrap=True)
    return table


def headline_table(s: dict) -> Table:
    a, b, (ma, mb) = s["a"], s["b"], s["meas"]
    table = _table("throughput (the unprofiled window)", s["names"], "")
    sp = s["speedup"]
    table.add_row("samples/s", _n(a["samples_per_s"], 0), _n(b["samples_per_s"], 0), f"{sp:.2f}x" if sp else "–")
    table.add_row("step time", _n(a["step_time_ms"], unit=" ms"), _n(b["step_time_ms"], unit=" ms"),
                  _change(a["step_time_ms"], b["step_time_ms"]) + (" ms" if a["step_time_ms"] and b["step_time_ms"] else ""))
    table.add_row("step time IQR", _n(ma.get("step_time_iqr_ms"), unit=" ms"), _n(mb.get("step_time_iqr_ms"), unit=" ms"), "")
    table.add_row("batch", a["batch"] or "?", b["batch"] or "?", "")
    table.add_row("peak GPU memory", _gib(a["peak_memory_bytes"]), _gib(b["peak_memory_bytes"]), "")
    return table


def breakdown_table(s: dict) -> Table | None:
    a, b = s["a"], s["b"]
    ba, bb = a["breakdown"] or {}, b["breakdown"] or {}
    if not (ba or bb):
        return None
    table = _table("where a profiled step's time goes, ms", s["names"], "phase")
    for key in [*PHASE_LABELS, *(k for k in [*ba, *bb] if k not in PHASE_LABELS)]:
        if key in ba or key in bb:
            va, vb = _num(ba.get(key)), _num(bb.get(key))
            table.add_row(name_cell(PHASE_LABELS.get(key, key)), _n(va), _n(vb), _change(va, vb))
    pa, pb = a["profiled_step_time_ms"], b["profiled_step_time_ms"]
    table.add_row(name_cell("profiled step", "bold"), _n(pa), _n(pb), _change(pa, pb))
    return table


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def verdict_line(s: dict) -> str:
    na, nb = s["names"]
    sp = s["speedup"]
    if not sp:
        return "No throughput to compare (a run has no timed steps)."
    unit = "samples/s" if s["a"]["samples_per_s"] and s["b"]["samples_per_s"] else "steps/s"
    return f"{nb} runs at {sp:.2f}x the {unit} of {na}" + (" (slower)." if sp < 1 else ".")


def finding_lines(s: dict) -> list[str]:
    """The findings that went away and those that appeared, a line each; those in both, by code."""
    na, nb = s["names"]
    rows = s["findings"]
    if not rows:
        return ["findings: none in either run"]
    out = []
    for state, where in (("resolved", f"gone in {nb}"), ("new", f"new in {nb}")):
        for f in (r for r in rows if r["state"] == state):
            out.append(f"  {where}: {f['code']} {f.get('name') or ''}: {f.get('message') or ''}")
    both = [str(r["code"]) for r in rows if r["state"] == "remaining"]
    if both:
        out.append(f"  in both: {', '.join(both)}")
    resolved, new = (sum(r["state"] == k for r in rows) for k in ("resolved", "new"))
    return [f"findings: {resolved} gone, {new} new, {len(both)} in both", *out]


def setting_lines(s: dict) -> list[str]:
    """The observed settings that differ, `key: A → B` (a dict's differing entries one by one)."""
    pairs = []
    for r in s["config_rows"]:
        va, vb = r["a"], r["b"]
        if isinstance(va, dict) and isinstance(vb, dict):
            pairs += [(f"{r['key']}.{k}", va.get(k), vb.get(k)) for k in [*va, *(k for k in vb if k not in va)]
                      if va.get(k) != vb.get(k)]
        else:
            pairs.append((r["key"], va, vb))
    if not pairs:
        return ["configuration: no observed setting differs"]
    lines = [f"  {key}: {_value(va)} → {_value(vb)}" for key, va, vb in pairs[:MOST_SETTINGS]]
    if len(pairs) > MOST_SETTINGS:
        lines.append(f"  … and {len(pairs) - MOST_SETTINGS} more (--out FILE writes the page that lists them)")
    return ["configuration that differs:", *lines]


def _value(v) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"


def print_compare(s: dict, console: Console) -> None:
    """The comparison, plain text (a run's strings are never read as markup)."""
    for role, row, doc in zip(("base", "new "), s["rows"], s["docs"]):
        status = doc.get("status")
        note = "" if status == "complete" else f" [{status}: {'; '.join(map(str, doc.get('incomplete_reasons') or []))}]"
        when = f" ({doc['created']})" if doc.get("created") else ""
        console.print(Text(f"{role} {row['label']}{when}{note}"))
    console.print(headline_table(s))
    console.print(Text(verdict_line(s), style="bold"))
    for name, noise in s["noises"]:
        console.print(Text(f"run-to-run noise measured in {name}'s trials: {noise:.1%}; a smaller difference is "
                           "not evidence"))
    if not s["noises"]:
        console.print(Text("one measurement per run: a difference within the step-time IQRs may be noise"))
    if s["env_warn"]:
        console.print(Text(f"not like for like: the runs differ in {', '.join(s['env_warn'])}", style="yellow"))
    table = breakdown_table(s)
    if table is not None:
        console.print(table)
    for line in [*finding_lines(s), *setting_lines(s)]:
        console.print(Text(line))
