"""`advisor inspect`, `report`, `rules` and `rule`: what needs no script run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
from rich.console import Console

from advisor import results, rundir
from advisor.commands import fail as _fail, say


def cmd_inspect(ns: argparse.Namespace) -> int:
    from advisor.metrics import analyze
    from advisor.trace import TraceError, load_traces

    models = []
    for target in ns.traces:
        try:
            models.extend(load_traces(target))
        except TraceError as exc:
            return _fail(str(exc))
    try:
        config = _run_config(ns.traces) if len(ns.traces) == 1 else {}
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    ranked = _ranks(models)
    analyses = [analyze(m) for m in models]  # once each: every rank's rules also see the others'
    rows = []
    for i, (model, analysis) in enumerate(zip(models, analyses)):
        env = results.environment_from_trace(model)
        others = [j for j in range(len(models)) if j != i] if ranked else []
        findings, skipped = results.run_findings(model, analysis, config, env, ns.rules,
                                                  extra_models=[models[j] for j in others],
                                                  extra_analyses=[analyses[j] for j in others],
                                                  thresholds=ns.thresholds)
        rows.append({"trace": str(model.meta.get("trace_path")), "environment": env,
                        "analysis": analysis, "findings": findings, "skipped_rules": skipped})
    if ns.json:
        sys.stdout.buffer.write(orjson.dumps(rows if len(rows) > 1 else _inspect_json(rows[0]),
                                             option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    else:
        from advisor.report.terminal import print_inspect
        for res in rows:
            print_inspect(res, Console())
    return 0


def _ranks(models: list) -> bool:
    """Whether the models are distinct ranks of one distributed job."""
    ranks = [(m.meta.get("distributed_info") or {}).get("rank") for m in models]
    return len(models) > 1 and None not in ranks and len(set(ranks)) == len(ranks)


def _run_config(targets: list[str]) -> dict:
    """Inspecting an advisor run directory: its observed config makes the config rules run."""
    from advisor.contracts import read_config

    p = Path(targets[0])
    if p.is_dir() and (p / "run.json").is_file():
        return read_config(rundir.read_run(p / "run.json").get("config"))
    return {}


def _inspect_json(res: dict) -> dict:
    a = res["analysis"]
    return {"trace": res["trace"], "step_time_ms": a.get("step_time_ms"), "breakdown": a.get("breakdown"),
            "kernel_time_by_class": a.get("kernel_time_by_class"), **res}


def cmd_report(ns: argparse.Namespace) -> int:
    from advisor.report import SavedRun, write_html

    try:
        run = SavedRun.load(ns.run)
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    try:
        write_html(run.run_dir, run.doc)
    except OSError as exc:
        return _fail(f"cannot write {run.run_dir / 'index.html'}: {exc.strerror or exc}")
    say(f"wrote {run.run_dir / 'index.html'}")
    return 0


def cmd_rules(ns: argparse.Namespace) -> int:
    from rich.table import Table

    from advisor.engine import load_rules
    from advisor.report.terminal import name_cell

    table = Table("code", "name", "severity", "fix", title="advisor rules")
    for rule in load_rules():
        table.add_row(rule.code, name_cell(rule.name), rule.severity, name_cell(rule.fix or ""))
    Console().print(table)
    return 0


def cmd_rule(ns: argparse.Namespace) -> int:
    from advisor.engine import load_rules

    for rule in load_rules():
        if rule.code.upper() == ns.code.upper() or rule.name == ns.code:
            print(f"{rule.code} {rule.name}\n\n{rule.doc}")
            return 0
    return _fail(f"no rule {ns.code!r}; `advisor rules` lists them", 2)

