"""The speed table from the run directories benchmarks/speed.sh wrote: per script, the whole
analyze's wall time with default options on one GPU and side by side on every GPU, and with
--budget 15 on one GPU; the kept stack each reached, as a fraction of --budget 15's; and
torch.compile's seconds in a first and a second analyze given one --cache DIR, and in the second,
the seconds its processes took to load graphs from the cache against the first's compile of
those graphs (the "compile once" figure: Dynamo still traces in every process).

    python3 benchmarks/speed_table.py DIR   # DIR holds one/, all/, full/, fullall/, cache-first/, cache-second/

"all" is held to "fullall" (--budget 15 with every GPU, on the same machine) where DIR has it,
else to "full".
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

MODES = ("one", "all", "full", "fullall")


def _load(path: Path) -> dict | None:
    try:
        return json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return None


def figures(doc: dict | None) -> dict:
    """wall_s, the kept stack's samples/s (the baseline's where nothing was kept), compile_s."""
    if doc is None:
        return {}
    ts = doc.get("trial_summary") or {}
    kept = [t for t in doc.get("trials") or [] if t.get("status") == "accepted" and not t.get("apart")]
    rate = kept[-1].get("samples_per_s") if kept else (doc.get("measurement") or {}).get("samples_per_s")
    why_one = str((ts.get("gpus") or {}).get("why_one") or "")
    # processes that loaded every graph of their stack from the compile cache: the load, and
    # the compile that made those graphs (trials.compile_book)
    loads = [t for t in [doc.get("measurement") or {}, *(doc.get("trials") or [])] if t.get("compile_cold_s")]
    return {"wall_s": ts.get("wall_s") or ts.get("analyze_wall_s"), "compile_s": ts.get("compile_s"),
            # a ladder cut short (speed.sh's timeout) reached no stack of its own
            "stack": None if ts.get("interrupted") else rate,
            "baseline": (doc.get("measurement") or {}).get("samples_per_s"),
            "loaded_s": sum(t["compile_s"] for t in loads), "cold_s": sum(t["compile_cold_s"] for t in loads),
            "stopped": doc.get("status") == "interrupted",   # the timeout stopped it: the wall is a floor
            "gpus": "DataParallel" if "DataParallel" in why_one else
            f"{len((ts.get('gpus') or {}).get('gpus') or []) or 1} GPUs"}


def table(root: Path) -> list[dict]:
    names = sorted({p.name for m in (*MODES, "cache-first") for p in (root / m).glob("*") if p.is_dir()})
    rows = []
    for name in names:
        r = {"name": name, **{m: figures(_load(root / m / name)) for m in (*MODES, "cache-first", "cache-second")}}
        for m, ref in (("one", "full"), ("all", "fullall" if r["fullall"] else "full")):
            full = r[ref].get("stack")
            r[m]["reached"] = r[m]["stack"] / full if full and r[m].get("stack") else None
            if r[m]["reached"] is not None and not comparable(r[m], r[ref]):
                r[m]["reached"] = "not comparable"
        # the first analyze given the --cache DIR: speed.sh's "one" run (an empty DIR), else cache-first
        first = r["cache-first"].get("compile_s") or r["one"].get("compile_s")
        second = r["cache-second"].get("compile_s")
        r["cache_ratio"] = second / first if first and second is not None else None
        # the same graphs, loaded by the second analyze against compiled by the first
        cold = r["cache-second"].get("cold_s")
        r["load_ratio"] = r["cache-second"]["loaded_s"] / cold if cold else None
        rows.append(r)
    return rows


# baselines further apart than this ran on hosts too unlike for their stacks to be compared
# (four analyzes sharing one host against one alone, say)
BASELINES_APART = 0.2


def comparable(run: dict, full: dict) -> bool:
    """Whether a run's kept stack can be held to the --budget 15 run's: their baselines agree."""
    a, b = run.get("baseline"), full.get("baseline")
    return bool(a and b) and max(a, b) / min(a, b) - 1.0 <= BASELINES_APART


def _s(x, stopped: bool = False) -> str:
    if not isinstance(x, (int, float)):
        return "–"
    return f"≥ {x:,.0f} s (timeout)" if stopped else f"{x:,.0f} s"


def _pct(x) -> str:
    if isinstance(x, str):
        return x
    return f"{x:.0%}" if isinstance(x, (int, float)) else "–"


def main(root: str) -> None:
    rows = table(Path(root))
    print("| script | 1 GPU default | reached | all GPUs default | reached | budget 15 | compile, 2nd with --cache "
          "| a loaded graph's compile |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        one, every, full, fullall = r["one"], r["all"], r["full"], r["fullall"]
        budget15 = _s(full.get("wall_s"), full.get("stopped"))
        if fullall:
            budget15 += f"; all GPUs {_s(fullall.get('wall_s'), fullall.get('stopped'))}"
        print(f"| {r['name']} | {_s(one.get('wall_s'), one.get('stopped'))} | {_pct(one.get('reached'))} | "
              f"{_s(every.get('wall_s'), every.get('stopped'))} ({every.get('gpus', '–')}) | "
              f"{_pct(every.get('reached'))} | {budget15} | {_pct(r['cache_ratio'])} | {_pct(r['load_ratio'])} |")
    for m in ("one", "all"):
        walls = [r[m]["wall_s"] for r in rows if r[m].get("wall_s")]
        if walls:   # a run the timeout stopped counts its wall so far: the median is then a floor
            floor = " at least" if any(r[m].get("stopped") for r in rows) else ""
            print(f"\nmedian whole analyze, {m}:{floor} {statistics.median(walls):,.0f} s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/speed")
