"""The corpus table from the run directories benchmarks/corpus.sh wrote: per script, the
baseline, advisor's in-run stack, fixes.patch verified as plain python (its status: verified,
partial, short), and the upstream's own fast settings, in samples/s, with the whole analyze's
wall time; the kept fixes with their one-off costs and break-even, what the patch left out, the
whole run projected end to end where its length is known, and the command to run.

    python3 benchmarks/corpus_table.py DIR      # DIR holds <name>/ (analyze) and <name>-fast/ runs
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return None


def _rate(x) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) and x else "–"


def row(name: str, doc: dict, fast: dict | None) -> dict:
    base = (doc.get("measurement") or {}).get("samples_per_s")
    patch = doc.get("patch") or {}
    v = patch.get("verification") or {}
    records = [t for t in doc.get("trials") or [] if t.get("status") == "accepted" and not t.get("apart")]
    kept = [t["name"] for t in records]
    failed = [c["fix"] for c in v.get("checks") or [] if c.get("took_effect") is False]
    fast_rate = (fast.get("measurement") or {}).get("samples_per_s") if fast else None
    return {"name": name, "baseline": base, "stack": v.get("stack_samples_per_s"),
            "verified": v.get("samples_per_s"), "of_stack": v.get("of_stack"), "status": v.get("status"),
            "upstream_fast": fast_rate, "wall_s": (ts := doc.get("trial_summary") or {}).get("wall_s") or ts.get("analyze_wall_s"),
            "kept": kept, "not_taken": failed, "argv": v.get("argv"),
            "one_off_s": [t.get("one_off_s") for t in records], "break_even_steps": [t.get("break_even_steps") for t in records],
            "left_out": patch.get("left_out") or {}, "end_to_end": patch.get("end_to_end"),
            "command": shlex.join(patch["command"]) if patch.get("command") else None,
            "gpu": (doc.get("environment") or {}).get("gpu_name")}


def _kept(r: dict) -> str:
    """Each kept fix with its one-off cost and break-even (baseline steps)."""
    out = []
    for name, cost, even in zip(r["kept"], r["one_off_s"], r["break_even_steps"]):
        cost_text = f"{cost:+.1f} s" if isinstance(cost, (int, float)) else "?"
        even_text = "never" if even is None and isinstance(cost, (int, float)) and cost > 0 else \
            (f"{even:,} steps" if isinstance(even, int) else "–")
        out.append(f"{name} ({cost_text}, even {even_text})")
    out += [f"~~{k}~~ left out" for k in r["left_out"]]
    return ", ".join(out) or "–"


def _e2e(r: dict) -> str:
    e = r["end_to_end"]
    return f"{e['baseline_s']} → {e['patched_s']} s ({e['steps']} steps)" if e else "–"


def main(root: str) -> None:
    rows = []
    for d in sorted(Path(root).iterdir()):
        if not d.is_dir() or d.name.endswith("-fast"):
            continue
        doc = _load(d)
        if doc is None:
            continue
        rows.append(row(d.name, doc, _load(d.with_name(d.name + "-fast"))))
    print("| script | baseline | in-run stack | verified plain python | of stack | status | upstream fast | analyze wall "
          "| kept (one-off, break-even) | whole run | command |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- | --- |")
    for r in rows:
        frac = f"{r['of_stack'] * 100:.0f}%" if r["of_stack"] else "–"
        extra = f" (not taken: {', '.join(r['not_taken'])})" if r["not_taken"] else ""
        command = f"`{r['command']}`" if r["command"] else "–"
        print(f"| {r['name']} | {_rate(r['baseline'])} | {_rate(r['stack'])} | {_rate(r['verified'])} | {frac}"
              f"{extra} | {r['status'] or '–'} | {_rate(r['upstream_fast'])} | {r['wall_s'] or '–'} s | {_kept(r)} "
              f"| {_e2e(r)} | {command} |")
    Path(root, "corpus.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
