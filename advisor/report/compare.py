"""Two runs side by side (`advisor compare RUN_A RUN_B`): e.g. before and after applying fixes.patch.

Each run is summarized by its baseline measurement (the script as it was written at that time);
the page shows B against A: throughput, step time, memory, the step breakdown and one step's
timeline on a shared time axis, kernel classes, findings that went away / stayed / appeared, and
the configuration and environment that differ.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from advisor.report import view
from advisor.report.charts import bars as _bars, nums as _nums, timeline as _timeline


def _title(doc: dict) -> str:
    return " ".join(str(a) for a in (doc.get("command") or {}).get("argv") or []) or "run"


def _findings_diff(doc_a: dict, doc_b: dict) -> list[dict]:
    fa = {f.get("code"): f for f in doc_a.get("findings") or [] if isinstance(f, dict)}
    fb = {f.get("code"): f for f in doc_b.get("findings") or [] if isinstance(f, dict)}
    out = []
    for code in list(fa) + [c for c in fb if c not in fa]:
        a, b = fa.get(code), fb.get(code)
        state = "resolved" if b is None else "new" if a is None else "remaining"
        f = b if b is not None else a   # an empty finding ({}) is still the one found
        out.append({"code": code, "name": f.get("name"), "state": state, "message": f.get("message"),
                    "gain_a": view.num((a or {}).get("estimated_gain_ms")),
                    "gain_b": view.num((b or {}).get("estimated_gain_ms"))})
    order = {"resolved": 0, "remaining": 1, "new": 2}
    return sorted(out, key=lambda r: order[r["state"]])


def _config_diff(doc_a: dict, doc_b: dict) -> tuple[list[dict], int]:
    ca, cb = doc_a.get("config") or {}, doc_b.get("config") or {}
    rows, same = [], 0
    for key in sorted(set(ca) | set(cb)):
        va = ca.get(key, {}).get("value") if isinstance(ca.get(key), dict) else ca.get(key)
        vb = cb.get(key, {}).get("value") if isinstance(cb.get(key), dict) else cb.get(key)
        if va == vb:
            same += 1
            continue
        rows.append({"key": key, "a": va, "b": vb,
                     "where_b": (cb.get(key) or {}).get("where") if isinstance(cb.get(key), dict) else None})
    return rows, same


def _env_diff(doc_a: dict, doc_b: dict) -> list[dict]:
    ea = dict(view.environment_rows(doc_a.get("environment") or {}))
    eb = dict(view.environment_rows(doc_b.get("environment") or {}))
    return [{"key": k, "a": ea.get(k, "–"), "b": eb.get(k, "–"), "differs": ea.get(k) != eb.get(k)}
            for k in list(ea) + [k for k in eb if k not in ea]]


def _spec_name(name: str) -> str:
    """A run name usable in tensorboard --logdir_spec (no ':' or ',')."""
    return re.sub(r"[^\w.-]+", "_", name) or "run"


def compare_summary(doc_a: dict, doc_b: dict, names: tuple[str, str] = ("A", "B")) -> dict:
    """What both the page and the terminal (`advisor compare` without --out) show, read from the
    two run.json documents alone (no trace is opened): each run's headline row, the speedup,
    the noise measured, the findings resolved, remaining and new, the configuration that
    differs and what makes the runs not like for like."""
    rows = []
    for doc, name in ((doc_a, names[0]), (doc_b, names[1])):
        r = view.baseline_row(doc)
        rows.append({**r, "name": name, "label": f"{name}: {_title(doc)}"})
    a, b = rows
    speedup = view._ratio(b["samples_per_s"], a["samples_per_s"]) or view._ratio(a["step_time_ms"], b["step_time_ms"])
    b["speedup"] = speedup
    noises = [(n, view.num((d.get("trial_summary") or {}).get("noise"))) for d, n in ((doc_a, names[0]), (doc_b, names[1]))]
    noises = [(n, v) for n, v in noises if v is not None]
    config_rows, config_same = _config_diff(doc_a, doc_b)
    env_rows = _env_diff(doc_a, doc_b)
    warn = [r["key"] for r in env_rows if r["differs"] and r["key"] in ("GPU", "torch", "CUDA", "driver", "cuDNN")]
    if a["batch"] != b["batch"]:
        warn.append("batch size")
    return {"docs": (doc_a, doc_b), "names": names, "rows": rows, "a": a, "b": b, "speedup": speedup,
            "noises": noises, "findings": _findings_diff(doc_a, doc_b), "config_rows": config_rows,
            "config_same": config_same, "env_rows": env_rows, "env_warn": warn,
            "meas": ((doc_a.get("measurement") or {}), (doc_b.get("measurement") or {})),
            "memory": (view.memory_view(doc_a, None), view.memory_view(doc_b, None))}


def compare_context(doc_a: dict, doc_b: dict, dir_a: Path | None, dir_b: Path | None,
                    names: tuple[str, str] = ("A", "B"), out_dir: Path | None = None) -> tuple[dict, dict]:
    summary = compare_summary(doc_a, doc_b, names)
    rows, a, b = summary["rows"], summary["a"], summary["b"]
    timelines = [t for t in (_timeline(dir_a, a["traces"], names[0]), _timeline(dir_b, b["traces"], names[1])) if t]
    reports = []
    for d, n in ((dir_a, names[0]), (dir_b, names[1])):
        if d is not None and (d / "index.html").is_file():
            here = out_dir or Path.cwd()
            reports.append({"name": n, "href": os.path.relpath((d / "index.html").resolve(), here.resolve())})
    tb_dirs = [(n, view.display_path(d / "tb")) for d, n in ((dir_a, names[0]), (dir_b, names[1])) if d is not None]
    tb_command = "tensorboard --logdir_spec " + ",".join(f"{_spec_name(n)}:{p}" for n, p in tb_dirs)
    ctx = {**summary, "timelines": timelines, "reports": reports, "tb_command": tb_command,
           "traces": [{"run": r["name"], "path": str(d / t) if d is not None else t}
                      for r, d in ((a, dir_a), (b, dir_b)) for t in r["traces"]]}
    data = {"kind": "compare", "rows": _bars(rows), "noise": None, "threshold": None, "best": names[1],
            "timelines": timelines,
            "kernel_series": [{"label": r["label"], "shares": _nums(d.get("analysis", {}).get("kernel_time_by_class")
                                                                  if isinstance(d.get("analysis"), dict) else None),
                               "ms": _nums((d.get("analysis") or {}).get("kernel_time_ms_by_class"))}
                              for r, d in ((a, doc_a), (b, doc_b))]}
    return ctx, data
