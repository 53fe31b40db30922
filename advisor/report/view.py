"""What the HTML report shows, computed from a run document (run.json) as plain data.

Pure functions; every key of run.json is optional here (older runs, incomplete runs, `inspect`
results), so a missing value becomes None and the template prints "–". Nothing in this module
escapes anything: jinja2 autoescapes every string the templates print, and the page script only
ever uses textContent or draws on a canvas.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from advisor import failures
from advisor.report.overhead import of_doc, of_trial
from advisor.report.terminal import PHASE_LABELS, batch_text

PHASE_COLORS = {
    "data_wait": "#e45756", "h2d": "#f58518", "forward": "#4c78a8", "backward": "#72b7b2",
    "zero_grad": "#b279a2", "optimizer": "#54a24b", "other": "#9d755d", "gpu_idle": "#c7c7c7",
}
STATUS_TEXT = {"baseline": "baseline", "reference": "noise reference", "accepted": "accepted",
               "rejected": "rejected", "failed": "failed", "skipped": "skipped",
               "not run": "not run", "measured": "measured apart",
               "bound": "bound (data-free ceiling)"}
MAX_PATCH_CHARS = 200_000


def num(v):
    """A finite float or None (run.json writes NaN as null; strings and bools are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def phases_legend() -> list[dict]:
    return [{"key": k, "label": PHASE_LABELS[k], "color": PHASE_COLORS[k]} for k in PHASE_LABELS]


def trial_label(t: dict) -> str:
    """The fix a trial added, with its parameters: 'dataloader-workers(num_workers=4,...)'."""
    inter = t.get("interventions") or []
    return str(inter[-1]) if inter else str(t.get("fix") or t.get("name") or "?")


def baseline_row(doc: dict) -> dict:
    meas = doc.get("measurement") or {}
    analysis = doc.get("analysis") or {}
    mem = (doc.get("memory") or {}).get("max_allocated_bytes") or (analysis.get("memory") or {}).get("peak_allocated_bytes")
    return {"name": "baseline", "label": "baseline (your script as written)", "status": "baseline",
            "reason": "", "stack": [], "description": "", "apart": False,
            "batch_size": meas.get("batch_size"), "batch": batch_text(meas.get("batch_size"), meas.get("micro_batches")),
            "peak_memory_bytes": num(mem),
            "step_time_ms": num(meas.get("step_time_ms")), "samples_per_s": num(meas.get("samples_per_s")),
            "tokens_per_s": num(meas.get("tokens_per_s")), "padding_frac": num(meas.get("padding_frac")),
            "speedup": 1.0 if num(meas.get("samples_per_s")) or num(meas.get("step_time_ms")) else None,
            "gain": None, "breakdown": _dict(analysis.get("breakdown")), "warmup_cost_s": None,
            "one_off_s": None, "break_even_steps": None, "break_even": "–",
            "profiled_step_time_ms": num(analysis.get("step_time_ms")),
            "kernel_time_by_class": _dict(analysis.get("kernel_time_by_class")),
            "traces": [str(x) for x in (doc.get("traces") or {}).get("baseline") or []], "origin": None,
            "overhead": overhead_view(of_doc(doc))}


def _dict(v) -> dict | None:
    return v if isinstance(v, dict) and v else None


def break_even_text(t: dict, steps_per_epoch) -> str:
    """A trial's break-even: 'N steps' (and epochs where the loader's length is known), 'never'
    for a one-off cost that no step pays back, '–' where there is nothing to pay back."""
    steps, cost = num(t.get("break_even_steps")), num(t.get("one_off_s"))
    if t.get("one_off_within_noise") and steps == 0:   # advisor.costs: no one-off beyond the lead-in's noise
        return "– (one-off within noise)"
    if steps is None:
        return "never" if cost is not None and cost > 0 and t.get("status") != "baseline" else "–"
    text = f"{steps:,.0f} steps"
    if isinstance(steps_per_epoch, int) and steps_per_epoch > 0 and steps > 0:
        text += f" ({steps / steps_per_epoch:,.1f} epochs)"
    return text


def trial_row(t: dict, steps_per_epoch=None) -> dict:
    inter = [str(x) for x in t.get("interventions") or [] if x is not None] if isinstance(t.get("interventions"), list) else []
    return {"name": str(t.get("name") or ""), "label": trial_label(t), "status": str(t.get("status") or "?"),
            "reason": str(t.get("reason") or ""), "stack": inter[:-1], "description": str(t.get("description") or ""),
            "apart": bool(t.get("apart")), "batch_size": t.get("batch_size"),
            "batch": batch_text(t.get("batch_size"), t.get("micro_batches")),
            "peak_memory_bytes": num(t.get("peak_memory_bytes")), "step_time_ms": num(t.get("step_time_ms")),
            "samples_per_s": num(t.get("samples_per_s")), "speedup": num(t.get("speedup_vs_baseline")),
            "tokens_per_s": num(t.get("tokens_per_s")),
            "gain": num(t.get("gain_vs_previous")), "breakdown": _dict(t.get("breakdown")),
            "warmup_cost_s": num(t.get("warmup_cost_s")),
            "one_off_s": num(t.get("one_off_s")), "break_even_steps": num(t.get("break_even_steps")),
            "break_even": break_even_text(t, steps_per_epoch), "compile_s": num(t.get("compile_s")),
            "compile_cold_s": num(t.get("compile_cold_s")),
            "gpu": str(t["gpu"]) if t.get("gpu") is not None else None, "gpu_offset": num(t.get("gpu_offset")),
            "profiled_step_time_ms": num(t.get("profiled_step_time_ms")),
            "kernel_time_by_class": _dict(t.get("kernel_time_by_class")),
            "traces": [str(x) for x in t.get("traces") or []] if isinstance(t.get("traces"), list) else [],
            "origin": t.get("origin"), "fix": t.get("fix"), "rung_note": str(t.get("rung_note") or ""),
            "failure": failure_view(t.get("failure")),
            "overhead": overhead_view(of_trial(t))}


def failure_view(f) -> dict | None:
    """A failed trial's failure for the report: whose it was, in words (advisor.failures.line),
    and its traceback, innermost last; None where there is none."""
    if not isinstance(f, dict) or f.get("kind") not in failures.KINDS:
        return None
    return {"kind": f["kind"], "advisors": f["kind"] == "advisor", "text": failures.line(f),
            "message": str(f.get("message") or ""), "exception": str(f.get("exception") or ""),
            "traceback": [str(x) for x in f.get("traceback") or []]}


def overhead_view(ov: dict) -> dict:
    """A row's profiled step against its measured one (advisor.report.overhead), its numbers
    made finite-or-None: `breakdown` is scaled to the measured step where both exist."""
    return {**ov, "breakdown": {k: num(v) for k, v in (ov.get("breakdown") or {}).items()} or None}


def ladder(doc: dict) -> list[dict]:
    """Baseline first, then every trial in the order it ran (cumulative: each trial measured the
    accepted stack so far plus its own fix; 'apart' trials sit on the final stack)."""
    per_epoch = (doc.get("measurement") or {}).get("steps_per_epoch")
    return [baseline_row(doc)] + [trial_row(t, per_epoch) for t in doc.get("trials") or [] if isinstance(t, dict)]


def best_row(rows: list[dict]) -> dict | None:
    """The final accepted stack: the last accepted trial (it measured every fix kept before it)."""
    accepted = [r for r in rows if r["status"] == "accepted" and not r["apart"]]
    return accepted[-1] if accepted else None


def _ratio(a, b):
    a, b = num(a), num(b)
    return a / b if a is not None and b else None


def headline(doc: dict, rows: list[dict]) -> dict:
    base, best = rows[0], best_row(rows)
    summary = doc.get("trial_summary") or {}
    noise, threshold = num(summary.get("noise")), num(summary.get("threshold"))
    # judged for speed: a failed trial was not found slower, it is counted apart (failures.words)
    tried = [r for r in rows[1:] if r["status"] not in ("reference", "skipped", "not run", "failed") and not r["apart"]]
    bad = failures.words([t for t in doc.get("trials") or [] if isinstance(t, dict)])
    apart = [r for r in rows[1:] if r["apart"] and r["status"] == "measured"]
    under_noise = sorted((r for r in tried if r["status"] == "rejected" and "noise threshold" in r["reason"]
                          and (r["gain"] or 0) > 0), key=lambda r: -(r["gain"] or 0))
    repeat = next((r for r in rows if r["status"] == "reference"), None)
    after = best or base
    speedup = _ratio(after["samples_per_s"], base["samples_per_s"]) or _ratio(base["step_time_ms"], after["step_time_ms"])
    if best:
        verdict = (f"{len([r for r in rows if r['status'] == 'accepted' and not r['apart']])} fix(es) kept, "
                   f"each faster than the noise threshold: {' + '.join(best['stack'] + [best['label']])}")
    elif summary.get("unsettled"):
        verdict = str(summary["unsettled"])[:1].upper() + str(summary["unsettled"])[1:] + "."
    elif tried and threshold is not None and noise is not None:
        verdict = (f"No fix was proven: run-to-run noise was {noise:.1%}, so advisor accepts only gains above "
                   f"{threshold:.1%}; {len(tried)} trial(s) ran and none cleared it" + (f"; {bad}." if bad else "."))
    elif bad:
        verdict = f"No fix was kept: {bad}."
    elif doc.get("trials"):
        verdict = "No fix was kept."
    elif doc.get("applied"):
        # --apply without trials: the run measured the fixes the user named, and the patch (and
        # its verification) makes them part of the script: no "no fix kept" beside a verified patch
        verdict = (f"Measured with the fixes you applied (--apply {'; '.join(map(str, doc['applied']))}); no trials "
                   f"ran. fixes.patch writes them into your script" + (", verified as plain python below."
                                                                      if (doc.get("patch") or {}).get("verification")
                                                                      else "."))
    else:
        verdict = "Diagnosis only: no trials ran (the findings below list the fixes to try)."
    if best and bad:
        verdict += f" {bad[:1].upper()}{bad[1:]}."
    if doc.get("status") == "interrupted":
        verdict = interrupted_text(doc) + (f" {verdict}" if doc.get("trials") else "")
    return {"base": base, "best": best, "after": after, "speedup": speedup, "verdict": verdict,
            "noise": noise, "threshold": threshold, "repeat": repeat, "promising": under_noise[:3], "apart": apart,
            "unsettled": summary.get("unsettled"), "settled": summary.get("settled"),
            "stopped_early": summary.get("stopped_early"),
            "applied": bool(doc.get("applied")) and not best,
            "accepted": [r for r in rows if r["status"] == "accepted" and not r["apart"]],
            "mem_ratio": _ratio(after["peak_memory_bytes"], base["peak_memory_bytes"])}


INTERRUPTED_DURING = {"baseline": "while the baseline ran", "trials": "during the trials",
                      "verification": "while fixes.patch was verified"}


def interrupted_text(doc: dict) -> str:
    """The headline of a run Ctrl-C stopped: where, and that what had finished is shown."""
    during = INTERRUPTED_DURING.get(str(doc.get("interrupted_during")), "")
    return f"Interrupted (Ctrl-C){' ' + during if during else ''}: what had finished is shown."


# --- fixes.patch ---------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
_LINE_REF = re.compile(r"([\w./-]+):(\d+)")


def split_hunks(diff: str) -> list[dict]:
    """A unified diff as hunks: {"file", "start", "end" (old lines), "text" (with its file header)}."""
    hunks, header, cur, fname = [], "", None, ""
    for line in diff.splitlines(keepends=True):
        if line.startswith("--- "):
            header, cur = line, None
            continue
        if line.startswith("+++ "):
            header += line
            fname = line[4:].strip().removeprefix("b/")
            continue
        m = _HUNK.match(line)
        if m:
            start, count = int(m.group(1)), int(m.group(2) or 1)
            cur = {"file": fname, "start": start, "end": start + max(count, 1) - 1, "text": header + line}
            hunks.append(cur)
        elif cur is not None:
            cur["text"] += line
    return hunks


def hunks_for_note(hunks: list[dict], note: dict) -> str:
    """The hunks of the patch that edit the lines a fix's note names (where + edits)."""
    refs = []
    for text in [str(note.get("where") or "")] + [str(e) for e in note.get("edits") or []]:
        refs += [(Path(f).name, int(n)) for f, n in _LINE_REF.findall(text)]
    picked = [h for h in hunks if any(Path(h["file"]).name == f and h["start"] <= n <= h["end"] for f, n in refs)]
    return "".join(h["text"] for h in picked)


def patch_view(doc: dict, run_dir: Path | None) -> dict | None:
    p = doc.get("patch")
    if not isinstance(p, dict):
        return None
    text, missing = "", False
    if p.get("file") and run_dir is not None:
        try:
            if not in_run_dir(p["file"]):
                raise FileNotFoundError(p["file"])
            text = (run_dir / str(p["file"])).read_text(encoding="utf-8", errors="replace")[:MAX_PATCH_CHARS]
        except OSError:
            missing = True
    v = p.get("verification") if isinstance(p.get("verification"), dict) else None
    verification = None
    if v:
        from advisor.report.terminal import verification_line
        from advisor.report.verification import shortfalls

        # a check that did not take names what it expected and saw; "?" where run.json lacks it
        v = {**v, "checks": [{"fix": "?", "expected": "?", "observed": "?", **c} for c in v.get("checks") or []]}
        verification = {"line": verification_line(v), "ok": v.get("status") == "verified", "short": shortfalls(v),
                        "skipped": v.get("status") == "skipped",
                        "argv": v.get("argv"), "runs": v.get("runs"),
                        "argv_changes": [c for n in p.get("notes") or [] for c in n.get("argv_changes") or []],
                        "env_changes": [c for n in p.get("notes") or [] for c in n.get("env_changes") or []]}
    command = p.get("command")
    left = p.get("left_out") if isinstance(p.get("left_out"), dict) else {}
    e2e = p.get("end_to_end") if isinstance(p.get("end_to_end"), dict) else None
    return {"file": p.get("file"), "text": text, "missing": missing, "verification": verification,
            "left_out": [{"fix": str(k), "why": str(w)} for k, w in left.items()],
            "end_to_end": {k: e2e.get(k) for k in ("steps", "source", "baseline_s", "patched_s", "speedup")} if e2e else None,
            "command": shlex.join(str(a) for a in command) if isinstance(command, list) and command else None,
            "notes": [n for n in p.get("notes") or [] if isinstance(n, dict)], "hunks": split_hunks(text)}


def findings_view(doc: dict, rows: list[dict], patch: dict | None) -> list[dict]:
    """Findings in rank order, each with the trials that tested its fix and, for an accepted
    one, the part of fixes.patch that makes the change."""
    out = []
    for f in doc.get("findings") or []:
        if not isinstance(f, dict):
            continue
        fix = f.get("fix") if isinstance(f.get("fix"), dict) else {}
        inter = fix.get("intervention")
        trials = [r for r in rows[1:] if (r.get("origin") and r.get("origin") == f.get("code"))
                  or (inter and r.get("fix") == inter)]
        diff = ""
        if patch and any(r["status"] == "accepted" for r in trials):
            for note in patch["notes"]:
                if note.get("intervention") == inter and note.get("applied"):
                    diff = hunks_for_note(patch["hunks"], note) or patch["text"]
        out.append({"f": f, "fix": fix, "gain": num(f.get("estimated_gain_ms")), "trials": trials, "diff": diff})
    return out


# --- the rest of the page -------------------------------------------------------------------

def cudnn_text(v) -> str | None:
    """cuDNN's integer version as x.y.z (9.x: major*10000 + minor*100 + patch; 8.x: *1000)."""
    if not isinstance(v, int) or isinstance(v, bool):
        return None if v is None else str(v)
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def environment_rows(env: dict) -> list[tuple[str, object]]:
    known = [("GPU", env.get("gpu_name")), ("GPU count", env.get("gpu_count")),
             ("GPU memory", gib(env.get("gpu_memory_bytes"))), ("driver", env.get("driver") or env.get("cuda_driver")),
             ("torch", env.get("torch")), ("CUDA", env.get("cuda") or env.get("cuda_runtime")),
             ("cuDNN", cudnn_text(env.get("cudnn"))), ("python", env.get("python")),
             ("CPU cores", env.get("cpu_count")), ("platform", env.get("platform"))]
    shown = {"gpu_name", "gpu_count", "gpu_memory_bytes", "driver", "cuda_driver", "torch", "cuda",
             "cuda_runtime", "cudnn", "python", "cpu_count", "platform"}
    extra = [(k, v) for k, v in sorted(env.items()) if k not in shown]
    return [(k, "–" if v is None else v) for k, v in known + extra]


def gib(n) -> str | None:
    n = num(n)
    if n is None:
        return None
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.0f} MiB"


def memory_view(doc: dict, best: dict | None) -> dict:
    mem = doc.get("memory") or {}
    amem = (doc.get("analysis") or {}).get("memory") or {}
    peak = num(mem.get("max_allocated_bytes")) or num(amem.get("peak_allocated_bytes"))
    cap = num(mem.get("capacity_bytes")) or num(amem.get("capacity_bytes"))
    return {"peak": peak, "reserved": num(mem.get("max_reserved_bytes")) or num(amem.get("peak_reserved_bytes")),
            "capacity": cap, "used_pct": (peak / cap * 100.0) if peak and cap else None,
            "best_peak": best["peak_memory_bytes"] if best else None,
            "source": amem.get("peak_source") or amem.get("source")}


def kernel_rows(analysis: dict) -> list[dict]:
    frac = analysis.get("kernel_time_by_class") or {}
    ms = analysis.get("kernel_time_ms_by_class") or {}
    rows = [{"cls": k, "share": num(v) or 0.0, "ms": num(ms.get(k))} for k, v in frac.items()]
    return sorted((r for r in rows if r["share"] > 0), key=lambda r: -r["share"])


def display_path(p: Path) -> str:
    """A path as the user would type it: relative to the current directory when below it."""
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p.resolve())


def in_run_dir(name) -> bool:
    """Whether a file name from run.json is a plain relative path to a file of the run itself (no
    scheme, not absolute, no .., no NUL): the only files a report reads or links."""
    t = str(name)
    return bool(t) and ":" not in t and "\0" not in t and not t.startswith(("/", "\\")) and ".." not in Path(t).parts


def traces_view(rows: list[dict], run_dir: Path | None) -> dict:
    items = []
    for r in rows:
        for t in r["traces"]:
            # Linked only when it is a plain relative path to a file of this run (no scheme, no ..).
            exists = in_run_dir(t) and run_dir is not None and (run_dir / t).is_file()
            items.append({"run": r["name"], "label": r["label"], "path": str(t), "exists": exists})
    tb = display_path(run_dir / "tb") if run_dir is not None else "RUN/tb"
    return {"items": items, "tb_dir": tb, "tb_command": f"tensorboard --logdir {tb}"}
