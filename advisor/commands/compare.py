"""`advisor compare`: two saved runs side by side (on the terminal, or the HTML page with --out),
and the CI gate (`--fail-below`): exit 3 when the new run's samples/s fall under that fraction of
the base's."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import orjson

from advisor import rundir
from advisor.commands import EXIT_GATE_FAILED, fail as _fail, say


def _rate_text(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _ratio_text(ratio: float, threshold: float, passed: bool) -> str:
    """The ratio to two decimals, or more where two would show it on the wrong side of the threshold."""
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if (float(text) >= threshold) if passed else (float(text) < threshold):
            return text
    return f"{ratio:.6f}"


def _measured(doc: dict, label: str, arg: str) -> tuple[dict | None, str | None]:
    """A run's measurement, or the one-line reason it cannot be compared."""
    status = doc.get("status")
    # Ctrl-C after the baseline (its trials, the patch's check) leaves the baseline measured in full
    after_baseline = status == "interrupted" and doc.get("interrupted_during") in ("trials", "verification")
    if status != "complete" and not after_baseline:
        reasons = "; ".join(str(r) for r in doc.get("incomplete_reasons") or [])
        return None, (f"{label} {arg} is not a complete run (status {status!r}"
                      + (f": {reasons}" if reasons else "") + "): it cannot be compared")
    meas = doc.get("measurement")
    meas = meas if isinstance(meas, dict) else {}
    sps, step = _positive(meas.get("samples_per_s")), _positive(meas.get("step_time_ms"))
    if sps is None and step is None:
        return None, f"{label} {arg} has no measurement (neither samples/s nor step time): it cannot be compared"
    return {"samples_per_s": sps, "step_time_ms": step}, None


def _positive(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _gate(ns: argparse.Namespace, docs: list[dict], dirs: list[Path]) -> tuple[dict | None, str | None]:
    """Both runs' throughput, their ratio and the --fail-below verdict (None without a threshold)."""
    meas = []
    for doc, label, arg in zip(docs, ("BASE", "NEW"), (ns.run_a, ns.run_b)):
        m, why = _measured(doc, label, arg)
        if why:
            return None, why
        meas.append(m)
    base, new = meas
    note = None
    if base["samples_per_s"] is not None and new["samples_per_s"] is not None:
        unit, rates = "samples/s", (base["samples_per_s"], new["samples_per_s"])
    else:
        missing = [label for label, m in (("BASE", base), ("NEW", new)) if m["samples_per_s"] is None]
        lacking = [label for label, m in (("BASE", base), ("NEW", new)) if m["step_time_ms"] is None]
        if lacking:
            return None, (f"{' and '.join(missing)} has no samples/s and {' and '.join(lacking)} no step time: "
                          "the runs cannot be compared")
        unit, rates = "steps/s", (1000.0 / base["step_time_ms"], 1000.0 / new["step_time_ms"])
        note = f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} no samples/s (batch size unknown): comparing steps/s"
    ratio = rates[1] / rates[0]
    threshold = ns.fail_below
    # A relative tolerance so that NEW exactly at threshold x BASE passes despite rounding.
    passed = None if threshold is None else ratio >= threshold * (1 - 1e-9)
    result = {"base": {"run_dir": str(dirs[0]), "samples_per_s": base["samples_per_s"],
                       "step_time_ms": base["step_time_ms"]},
              "new": {"run_dir": str(dirs[1]), "samples_per_s": new["samples_per_s"],
                      "step_time_ms": new["step_time_ms"]},
              "ratio": ratio, "threshold": threshold, "unit": unit, "passed": passed}
    if note:
        result["note"] = note
    if threshold is None:
        line = f"compare: NEW {_rate_text(rates[1])} {unit} is {ratio:.2f}x BASE {_rate_text(rates[0])}"
    else:
        side = "at or above" if passed else "below"
        line = (f"gate: NEW {_rate_text(rates[1])} {unit} is {_ratio_text(ratio, threshold, passed)}x "
                f"BASE {_rate_text(rates[0])} ({side} {threshold:g}): {'pass' if passed else 'FAIL'}")
    if note:
        line += f" [{note}]"
    result["line"] = line
    return result, None


def cmd_compare(ns: argparse.Namespace) -> int:
    docs, dirs = [], []
    for run in (ns.run_a, ns.run_b):
        try:
            path = rundir.find_run_json(run)
            docs.append(rundir.read_run(path))  # untrusted: in the shapes the page and the gate read
        except (OSError, ValueError) as exc:
            return _fail(str(exc))
        if not isinstance(docs[-1], dict):
            return _fail(f"{path} is not a run.json written by `advisor analyze`")
        dirs.append(path.parent)
    if ns.names:
        names = [n.strip() for n in ns.names.split(",")]
        if len(names) != 2 or not all(names):
            return _fail("--names takes two labels: --names before,after", 2)
    else:
        names = [d.resolve().name for d in dirs]
        if names[0] == names[1]:
            names = ["A", "B"]
    if ns.out is None and ns.fail_below is None and not ns.json:
        # asked for nothing in particular: the comparison itself, on the terminal
        from rich.console import Console

        from advisor.report.compare import compare_summary
        from advisor.report.compare_terminal import print_compare

        print_compare(compare_summary(docs[0], docs[1], (names[0], names[1])), Console(highlight=False))
        return 0
    gate = None
    if ns.fail_below is not None or ns.json:
        gate, why = _gate(ns, docs, dirs)
        if why:
            return _fail(why)
    if ns.out is not None:
        from advisor.report.html import write_compare

        out = Path(ns.out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_compare(docs[0], docs[1], dirs[0], dirs[1], out, names=(names[0], names[1]))
        except OSError as exc:
            return _fail(str(exc))
        say(f"wrote {out}")
    if gate is None:
        return 0
    line = gate.pop("line")
    if ns.json:
        print(line, file=sys.stderr)
        sys.stdout.write(orjson.dumps(gate, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(line)
    return 0 if gate["passed"] is not False else EXIT_GATE_FAILED
