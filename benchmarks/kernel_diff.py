"""Kernel time per profiled step of two traces, side by side, by kernel name.

    python3 benchmarks/kernel_diff.py A.pt.trace.json.gz B.pt.trace.json.gz [--top 25]

Which kernels make one run's GPU work per step longer than the other's (a diagnosis aid).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

from step_anatomy import STEP, load


def per_step(path: str) -> tuple[dict[str, float], int, float]:
    ev = [e for e in load(path) if e.get("ph") == "X" and "dur" in e]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and STEP.match(str(e.get("name")))]
    n = max(1, len(steps))
    lo = min(s["ts"] for s in steps) if steps else 0
    out: dict[str, float] = defaultdict(float)
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["ts"] >= lo:
            out[re.sub(r"\d+", "#", e["name"])[:90]] += e["dur"] / 1e3 / n
    return out, n, sum(out.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--top", type=int, default=25)
    x = ap.parse_args()
    a, na, ta = per_step(x.a)
    b, nb, tb = per_step(x.b)
    print(f"GPU time per step: A {ta:.3f} ms over {na} steps, B {tb:.3f} ms over {nb} steps")
    names = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))
    for k in names[:x.top]:
        print(f"  A {a.get(k, 0):7.3f}  B {b.get(k, 0):7.3f}  {k}")


if __name__ == "__main__":
    main()
