"""The corpus table from the run directories benchmarks/corpus.sh wrote: per script, the
baseline, advisor's in-run stack, fixes.patch verified as plain python, and the upstream's
own fast settings, in samples/s, with the whole analyze's wall time.

    python3 benchmarks/corpus_table.py DIR      # DIR holds <name>/ (analyze) and <name>-fast/ runs
"""

from __future__ import annotations

import json
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
    kept = [t["name"] for t in doc.get("trials") or [] if t.get("status") == "accepted" and not t.get("apart")]
    failed = [c["fix"] for c in v.get("checks") or [] if c.get("took_effect") is False]
    fast_rate = (fast.get("measurement") or {}).get("samples_per_s") if fast else None
    return {"name": name, "baseline": base, "stack": v.get("stack_samples_per_s"),
            "verified": v.get("samples_per_s"), "of_stack": v.get("of_stack"), "status": v.get("status"),
            "upstream_fast": fast_rate, "wall_s": (doc.get("trial_summary") or {}).get("analyze_wall_s"),
            "kept": kept, "not_taken": failed, "argv": v.get("argv"),
            "gpu": (doc.get("environment") or {}).get("gpu_name")}


def main(root: str) -> None:
    rows = []
    for d in sorted(Path(root).iterdir()):
        if not d.is_dir() or d.name.endswith("-fast"):
            continue
        doc = _load(d)
        if doc is None:
            continue
        rows.append(row(d.name, doc, _load(d.with_name(d.name + "-fast"))))
    print("| script | baseline | in-run stack | verified plain python | of stack | upstream fast | analyze wall | kept |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        frac = f"{r['of_stack'] * 100:.0f}%" if r["of_stack"] else "–"
        extra = f" (not taken: {', '.join(r['not_taken'])})" if r["not_taken"] else ""
        print(f"| {r['name']} | {_rate(r['baseline'])} | {_rate(r['stack'])} | {_rate(r['verified'])} | {frac}"
              f"{extra} | {_rate(r['upstream_fast'])} | {r['wall_s'] or '–'} s | {', '.join(r['kept']) or '–'} |")
    Path(root, "corpus.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
