"""Where does run-to-run noise come from on a GPU machine? Runs the examples as plain python
(no advisor), several times back to back, and a pure-CPU probe between them, then prints one
table. The examples print their own samples/s over the steps after their warmup.

    python3 benchmarks/noise_probe.py --repeats 3 --steps 150 [--compile-variants] [--json OUT]

CPU probe: the slow example's per-sample __getitem__ work (uint8 → float, normalize, one
3×32×32 image at a time), timed in 10 blocks of 2,000 samples in a fresh process, with torch's
default thread count and with one thread: if the host CPU drifts, this drifts with it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

CPU_PROBE = r"""
import sys, time, torch
if sys.argv[1] == "1":
    torch.set_num_threads(1)
imgs = torch.randint(0, 255, (2000, 3, 32, 32), dtype=torch.uint8)
mean = torch.tensor((0.49, 0.48, 0.45)).view(3, 1, 1); std = torch.tensor((0.25, 0.24, 0.26)).view(3, 1, 1)
out = []
for block in range(10):
    t = time.perf_counter()
    for i in range(2000):
        x = (imgs[i].to(torch.float32) / 255.0 - mean) / std
    out.append((time.perf_counter() - t) / 2000 * 1e6)
print("US_PER_SAMPLE", " ".join(f"{v:.2f}" for v in out))
"""

DONE = re.compile(r"done: .*? ([\d.]+) samples/s \(([\d.]+) ms/step over (\d+) steps\)")


def cpu_probe(threads: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", CPU_PROBE, threads], capture_output=True, text=True).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("US_PER_SAMPLE")), "")
    return [float(v) for v in line.split()[1:]]


def plain_run(script: str, args: list[str]) -> dict:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t
    m = DONE.search(p.stdout)
    if not m:
        return {"script": script, "args": args, "error": (p.stderr or p.stdout)[-400:], "wall_s": wall}
    return {"script": script, "args": args, "samples_per_s": float(m.group(1)), "step_ms": float(m.group(2)),
            "steps": int(m.group(3)), "wall_s": round(wall, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--compile-variants", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows, probes = [], []
    steps = ["--steps", str(a.steps), "--log-every", "1000"]
    plan = []
    for _ in range(a.repeats):
        plan.append(("examples/cifar_resnet.py", steps))
        plan.append(("examples/cifar_resnet_tuned.py", steps))
    if a.compile_variants:
        for mode in ("default", "reduce-overhead"):
            plan.append(("examples/cifar_resnet_tuned.py", [*steps, "--compile", mode]))
            plan.append(("examples/cifar_resnet_tuned.py", [*steps, "--compile", mode]))
    for i, (script, args) in enumerate(plan):
        if i % 2 == 0:
            probes.append({"default": cpu_probe("0"), "one_thread": cpu_probe("1"), "at_run": i})
            p = probes[-1]
            print(f"cpu probe before run {i}: default {statistics.median(p['default']):.2f} us/sample "
                  f"(blocks {min(p['default']):.2f}-{max(p['default']):.2f}), 1 thread "
                  f"{statistics.median(p['one_thread']):.2f}", flush=True)
        row = plain_run(script, args)
        rows.append(row)
        print(f"{script} {' '.join(args[4:])}: " + (f"{row['step_ms']:.2f} ms/step, {row['samples_per_s']:.0f} samples/s, "
              f"wall {row['wall_s']} s" if "step_ms" in row else f"ERROR {row['error']}"), flush=True)
    print("\nsummary (plain python, no advisor):")
    groups: dict[str, list[float]] = {}
    for row in rows:
        if "step_ms" in row:
            groups.setdefault(f"{row['script']} {' '.join(row['args'][4:])}".strip(), []).append(row["step_ms"])
    for k, v in groups.items():
        spread = (max(v) - min(v)) / min(v) if len(v) > 1 else 0.0
        print(f"  {k:55s} runs {len(v)}  ms/step {' '.join(f'{x:.2f}' for x in v)}  max/min-1 {spread:.1%}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": rows, "cpu_probes": probes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
