"""What the terminal shows: `advisor compare` with no option prints the comparison, `advisor inspect`
ends with its findings (or "no findings") and the rules it skipped, and tables fit a terminal of
80 columns, a name cut with an ellipsis rather than wrapped mid-word."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from advisor import rundir
from advisor.report.terminal import print_summary

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "tests" / "fixtures" / "runs"
TRACES = REPO / "tests" / "fixtures" / "traces"


def advisor(*args, columns: int = 80):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300)


# --- advisor compare A B: the comparison on the terminal ---------------------------------------

def test_compare_prints_both_runs_the_speedup_the_phases_and_the_findings_that_changed(tmp_path):
    """Real H200 runs of the slow CIFAR example and its tuned version."""
    slow, tuned = RUNS / "cifar_slow_h200", RUNS / "cifar_tuned_h200"
    r = advisor("compare", slow, tuned, "--names", "before,after")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    da, db = (json.loads((d / "run.json").read_text()) for d in (slow, tuned))
    sa, sb = da["measurement"]["samples_per_s"], db["measurement"]["samples_per_s"]
    row = next(line for line in lines if line.startswith("samples/s"))
    assert f"{sa:,.0f}" in row and f"{sb:,.0f}" in row and f"{sb / sa:.2f}x" in row
    assert f"after runs at {sb / sa:.2f}x the samples/s of before." in r.stdout
    # the phases side by side: each run's profiled ms and the change
    wait = next(line for line in lines if line.startswith("data wait"))
    wa, wb = da["analysis"]["breakdown"]["data_wait"], db["analysis"]["breakdown"]["data_wait"]
    assert wait.split()[2:] == [f"{wa:,.2f}", f"{wb:,.2f}", f"{wb - wa:+,.2f}"]
    # the findings that went away, a line each (one that stayed: by code)
    codes_a, codes_b = ({f["code"] for f in d["findings"]} for d in (da, db))
    for code in codes_a - codes_b:
        assert any(line.startswith(f"  gone in after: {code} ") for line in lines), code
    assert f"  in both: {', '.join(c for c in [f['code'] for f in da['findings']] if c in codes_b)}" in lines
    assert "  dataloader.num_workers: 0 → 8" in lines
    assert not list(tmp_path.iterdir()) and not r.stderr


def test_compare_says_what_makes_runs_not_like_for_like_and_an_incomplete_run(tmp_path):
    doc = json.loads((RUNS / "cifar_slow_h200" / "run.json").read_text())
    for name, change in (("a", {}), ("b", {"status": "incomplete", "incomplete_reasons": ["timed out after 5 s"],
                                           "environment": {**doc["environment"], "torch": "9.9"}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps({**doc, **change}))
    r = advisor("compare", tmp_path / "a", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "[incomplete: timed out after 5 s]" in text
    assert "not like for like: the runs differ in torch" in text
    assert "findings: 0 gone, 0 new" in text


# --- advisor inspect: findings a line each, or none, and the skipped rules ----------------------

def test_inspect_ends_with_its_findings_a_line_each_and_the_skipped_rules():
    trace = TRACES / "fp32_nchw.pt.trace.json.gz"
    data = json.loads(advisor("inspect", "--json", trace).stdout)
    r = advisor("inspect", trace)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    tail = text[text.index("findings ("):]
    assert tail.startswith(f"findings ({len(data['findings'])}, ranked by estimated gain):")
    starts = [line.split()[0] for line in tail.splitlines() if line.startswith("  ADV")]
    assert starts == [f["code"] for f in data["findings"]]   # each on a line of its own, ranked
    assert "(est. gain" in tail and "fix: amp)" in " ".join(tail.split())
    skipped = data["skipped_rules"]
    assert f"skipped rules: {len(skipped)}" in tail
    config = [s["code"] for s in skipped if s["reason"].startswith("no observed configuration")]
    assert f"  {len(config)}: no observed configuration (a trace inspected without its run) (" in tail
    assert " ".join(tail.split()).endswith("1: traces of several ranks are needed (ADV116)")


def _record_cpu_loop(out: Path) -> Path:
    """A real CPU trace of a small loop whose batches are made in place: nothing for a rule to
    find (no loader to wait for, no GPU, no communication)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(str(out), use_gzip=True)) as prof:
        for _ in range(4):
            x, y = torch.randn(64, 32), torch.randint(0, 2, (64,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return out


def test_inspect_says_no_findings_and_why_rules_were_skipped(tmp_path):
    r = advisor("inspect", _record_cpu_loop(tmp_path / "tb"))
    assert r.returncode == 0, r.stderr
    lines = [line.strip() for line in r.stdout.splitlines()]
    assert "no findings" in lines
    at = lines.index("no findings")
    assert lines[at + 1].startswith("skipped rules: ")
    assert any(line.startswith("13: the trace has no GPU activity (ADV101, ADV102") for line in lines[at:])


# --- narrow terminals: names cut with an ellipsis, never wrapped mid-word ------------------------

def test_the_trials_table_cuts_a_long_trial_name_in_80_columns():
    doc = rundir.read_json(RUNS / "ladder_terminal_h100" / "run.json")
    long = "07-dataloader-workers-16+pin-memory+persistent-workers-xyz"
    doc["trials"][-1]["name"] = long
    out = StringIO()
    print_summary(doc, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    t = doc["trials"][-1]
    row = next(line for line in lines if line.startswith(f"{t['speedup_vs_baseline']:.2f}x") and t["status"] in line)
    assert row.rstrip().endswith("…") and long[:15] in row   # one line, cut
    assert [line for line in lines if long[-12:] in line] == [next(x for x in lines if x.startswith(f"{long}: "))]
    assert any(line.startswith(f"{long}: {t['status']}, ") for line in lines)   # in full below the table


@pytest.mark.parametrize("columns", [80, 60])
def test_rules_table_cuts_names_rather_than_wrapping_them(columns):
    r = advisor("rules", columns=columns)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    assert len(rows) >= 19 and all(len(line) <= columns for line in rows)
    codes = [line.split("│")[1].strip() for line in rows]
    assert codes == sorted(codes) and all(c.startswith("ADV") and len(c) == 6 for c in codes)  # a row a rule
    if columns == 60:
        assert any("…" in line for line in rows)
