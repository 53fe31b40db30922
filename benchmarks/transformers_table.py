"""The transformer table from the run directories benchmarks/transformers.sh wrote: per
workload, the baseline, advisor's kept stack and fixes.patch verified as plain python, in real
tokens a second (padding left out), the rules that fired, and the fixes measured apart.

    python3 benchmarks/transformers_table.py DIR    # DIR holds analyze/<name>/ and apart/<name>/
"""

from __future__ import annotations

import sys
from pathlib import Path

from corpus_table import _load, _rate  # benchmarks/ is the script's own directory: sys.path[0]


def kept(doc: dict) -> tuple[str, float | None]:
    """The kept fixes, and the tokens/s of the last trial that was kept (the stack's rate)."""
    accepted = [t for t in doc.get("trials") or [] if t.get("status") == "accepted"]
    names = ", ".join(s.get("name", "?") for s in (doc.get("trial_summary") or {}).get("stack") or []) or "none"
    return names, (accepted[-1].get("tokens_per_s") if accepted else None)


def apart(doc: dict | None) -> str:
    if not doc:
        return "–"
    base = (doc.get("measurement") or {}).get("tokens_per_s")
    out = []
    for t in doc.get("trials") or []:
        if t.get("apart") or str(t.get("name", "")).startswith("apart-"):
            rate = t.get("tokens_per_s")
            ratio = f" {rate / base:.2f}x" if rate and base else ""
            out.append(f"{t['name'].removeprefix('apart-')}: {t.get('status')}{ratio}")
    return "; ".join(out) or "–"


def table(root: Path) -> str:
    rows = ["| workload | GPU | baseline tokens/s | rules | kept stack | stack tokens/s | verified tokens/s (status) "
            "| measured apart |", "|" + " --- |" * 8]
    for run in sorted((root / "analyze").glob("*")):
        doc = _load(run)
        if doc is None:
            rows.append(f"| {run.name} | – | no run.json | | | | | |")
            continue
        base = (doc.get("measurement") or {}).get("tokens_per_s")
        names, stack = kept(doc)
        v = (doc.get("patch") or {}).get("verification") or {}
        rules = ", ".join(sorted({f["code"] for f in doc.get("findings") or []})) or "none"
        gpu = (doc.get("environment") or {}).get("gpu_name") or "?"
        rows.append(f"| {run.name} | {gpu} | {_rate(base)} | {rules} | {names} | {_rate(stack)} | "
                    f"{_rate(v.get('tokens_per_s'))} ({v.get('status', '–')}) | {apart(_load(root / 'apart' / run.name))} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/transformers")))
