"""Print the ladder's figures from a run directory written by `advisor analyze`:
the run-to-run noise of the baseline (target <= 3%), the per-trial and total wall time of the
trials (target for the whole analyze on the GPU example: <= 3 min), and the ladder.

    python3 benchmarks/trials_figures.py reports/examples/cifar_resnet-h100

With several run directories, one line each against the control timed on the same machine
(the `cifar_resnet_tuned` run beside each, as benchmarks/gpu_examples.sh leaves them):

    python3 benchmarks/trials_figures.py /tmp/out/*/trials
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from advisor.measure import STARTUP_MILESTONES  # noqa: E402


def main(run: str) -> int:
    doc = json.loads((Path(run) / "run.json").read_text())
    s = doc.get("trial_summary") or {}
    base = doc.get("measurement") or {}
    print(f"run: {run}")
    print(f"device: {doc['environment'].get('gpu_name') or 'CPU'}; baseline {base.get('step_time_ms', 0):.2f} ms/step "
          f"(window of {base.get('steps_measured')} steps), {base.get('samples_per_s', 0):,.0f} samples/s")
    if s.get("noise") is not None:
        print(f"run-to-run noise (pooled over every configuration timed twice or more): {s['noise']:.1%}  "
              f"-> one run vs one accepted above {s['threshold']:.1%}")
    rows = doc.get("trials") or []
    for t in rows:
        wall = t.get("elapsed_s")
        sp = t.get("speedup_vs_baseline")
        runs = f"{t['runs']}v{t['reference_runs']}" if t.get("runs") else "   "
        warm = t.get("warmup_cost_s")
        ahead = "held" if t.get("started_held") else "warm" if t.get("started_warm") else "cold" if wall else ""
        print(f"  {t['name']:32s} {ahead:4s} {t.get('status', ''):9s} {runs:5s} "
              f"{(t.get('step_time_ms') or 0):7.2f} ms  {(sp or 0):5.2f}x  "
              f"{'%6.1f s' % wall if wall else '      ?'}  warm-up {'%5.1f s' % warm if warm is not None else '    ?'}  "
              f"{(t.get('reason') or '')[:70]}")
    if s.get("analyze_wall_s"):
        print(f"whole analyze (baseline + trials): {s['analyze_wall_s']:.0f} s")
    if s.get("processes"):
        print(f"processes (baseline, repeat, trials, confirmation re-runs): {s['processes']}")
    walls = [t["elapsed_s"] for t in rows if t.get("elapsed_s")]
    if walls:
        print(f"trial processes: {len(walls)}, wall {sum(walls):.0f} s in all, median {statistics.median(walls):.1f} s each")
    if s.get("lookahead"):
        la = s["lookahead"]
        print(f"lookahead: {la.get('count')} guesses a trial; {la.get('guessed')} started, {la.get('used')} were the next trial")
        ran = [t["name"] for t in rows if t.get("elapsed_s")]
        for entry in la.get("log") or []:  # what was guessed while each process ran; * = ran next
            nxt = ran[ran.index(entry["process"]) + 1] if entry["process"] in ran[:-1] else None
            print(f"  while {entry['process']}: " + ", ".join(
                f"{'*' if g == nxt else ''}{g}{' (warm-up)' if g in entry.get('warm_up', []) else ''}"
                f"{' (warm-up once its window was over)' if g in entry.get('warm_up_later', []) else ''}"
                f"{' (on its way)' if g in entry.get('on_its_way', []) else ''}"
                for g in entry["guesses"]) + (f"; ended before their turn: {', '.join(entry['lost'])}"
                                              if entry.get("lost") else ""))
    for kind, pick in (("started on a guess", True), ("started fresh", False)):
        starts = [t["startup_s"] for t in rows if t.get("startup_s") and bool(t.get("started_held")) == pick]
        if starts:  # where each process's first seconds go (seconds from its spawn, its go or its release)
            keys = [k for k in STARTUP_MILESTONES if any(k in x for x in starts)]
            print(f"start-up of {len(starts)} trial processes {kind}, median s from spawn/release: " + ", ".join(
                f"{k} {statistics.median([x[k] for x in starts if k in x]):.1f}" for k in keys))
    return 0


def table(runs: list[str]) -> int:
    """Ladder vs control, one line a run directory; the share of the targets met."""
    print("| run | baseline noise | ladder | control | of control | whole analyze | processes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    met = {"control": 0, "wall": 0, "noise": 0}
    for run in runs:
        doc = json.loads((Path(run) / "run.json").read_text())
        control = json.loads((Path(run).parent / "cifar_resnet_tuned" / "run.json").read_text())["measurement"]
        s = doc.get("trial_summary") or {}
        kept = [t for t in doc.get("trials") or [] if t.get("status") == "accepted"]
        last = kept[-1] if kept else {"step_time_ms": doc["measurement"]["step_time_ms"],
                                      "samples_per_s": doc["measurement"]["samples_per_s"]}
        share = last["samples_per_s"] / control["samples_per_s"]
        repeat = next((t for t in doc.get("trials") or [] if t.get("status") == "reference"), {})
        pair = sorted([repeat.get("step_time_ms") or 0, doc["measurement"]["step_time_ms"]])
        noise = pair[1] / pair[0] - 1 if pair[0] else None  # the ladder's measure of a pair (pooled_noise)
        wall = s.get("analyze_wall_s") or 0
        met["control"] += share >= 0.9
        met["wall"] += wall <= 180
        met["noise"] += noise is not None and noise <= 0.03
        print(f"| {Path(run).parent.name} | {'%.1f%%' % (100 * noise) if noise is not None else '?'} | "
              f"{last['step_time_ms']:.2f} ms | {control['step_time_ms']:.2f} ms | {share:.0%} | {wall:.0f} s | "
              f"{s.get('processes', '?')} |")
    n = len(runs)
    print(f"\n>= 90% of the control: {met['control']} of {n}; whole analyze <= 3 min: {met['wall']} of {n}; "
          f"baseline pair within 3%: {met['noise']} of {n}")
    return 0


if __name__ == "__main__":
    sys.exit(table(sys.argv[1:]) if len(sys.argv) > 2 else main(sys.argv[1]))
