"""Where the slowest profiled steps spend their host time, against the median step.

    python3 benchmarks/step_anatomy.py TRACE.pt.trace.json[.gz] [--top 20]

For each ProfilerStep (the step annotation on the main thread): its wall time; then, for the
slowest steps and the median one, the events of the main thread with the most self time
(cpu ops, Python functions with --with-stack, CUDA runtime calls), and the runtime calls
over 0.5 ms. A diagnosis aid for one-off stalls (an epoch start, a recompile), not part of
advisor's pipeline, which reads traces through advisor.trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict

STEP = re.compile(r"^ProfilerStep#\d+$")
HOST_CATS = {"cpu_op", "python_function", "cuda_runtime", "user_annotation", "cuda_driver"}


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def self_times(events: list[dict]) -> dict[str, float]:
    """Self time per name over events of one thread (children nest by time containment)."""
    total: dict[str, float] = defaultdict(float)
    stack: list[tuple[float, str]] = []   # (end, name) of the open ancestors
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1][0] <= e["ts"]:
            stack.pop()
        if stack:
            total[stack[-1][1]] -= e["dur"]
        total[e["name"]] += e["dur"]
        stack.append((e["ts"] + e["dur"], e["name"]))
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--slowest", type=int, default=2)
    a = ap.parse_args()
    ev = [e for e in load(a.trace) if e.get("ph") == "X" and "dur" in e]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and STEP.match(str(e.get("name")))]
    if not steps:
        raise SystemExit("no ProfilerStep annotations in this trace")
    tid = steps[0]["tid"]
    steps.sort(key=lambda e: e["ts"])
    print("steps (ms):", " ".join(f"{s['dur'] / 1e3:.1f}" for s in steps))
    host = [e for e in ev if e.get("tid") == tid and e.get("cat") in HOST_CATS
            and not STEP.match(str(e.get("name")))]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_dur = sorted(steps, key=lambda e: e["dur"])
    picks = by_dur[-a.slowest:][::-1] + [by_dur[len(by_dur) // 2]]
    for s in picks:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in host if lo <= e["ts"] < hi]
        busy = sum(min(hi, g["ts"] + g["dur"]) - max(lo, g["ts"]) for g in gpu if g["ts"] < hi and g["ts"] + g["dur"] > lo)
        print(f"\n== {s['name']}: {s['dur'] / 1e3:.2f} ms, GPU busy {busy / 1e3:.2f} ms (kernels+copies, overlaps summed)")
        for name, t in sorted(self_times(inside).items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {t / 1e3:8.3f} ms self  {name[:150]}")
        slow = [e for e in inside if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["dur"] > 500]
        for e in sorted(slow, key=lambda e: -e["dur"])[:10]:
            print(f"  runtime {e['dur'] / 1e3:8.3f} ms  {e['name']} at +{(e['ts'] - lo) / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
