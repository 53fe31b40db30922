"""Host-side and GPU-side time per training step of a script, with run-time fixes applied
but without advisor's runner (no hooks, no profiler): which side sets the pace?

    python3 benchmarks/gpu_step_probe.py FIXES|- SCRIPT [script args...]

FIXES is `--apply` syntax (e.g. `amp,channels-last`) or `-` for none. A CUDA event is
recorded after every optimizer step; per step it prints the host's wall time between two
steps and the GPU's time between their events (GPU work plus any idle the host left). The
first 30 steps are left out (compilation, autotuning). WINDOWS="24,72" also prints, for
each window length, the mean step time of every whole window of that many consecutive steps
(non-overlapping): how much a figure timed over one window moves within one process.
"""

from __future__ import annotations

import os
import runpy
import statistics as st
import sys
import time

import torch

from advisor import fixes

SKIP = 30


def main() -> None:
    names, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if names != "-":
        fixes.apply_all(fixes.parse_specs(names))
    host: list[float] = []
    events: list = []

    def after_step(opt, a, k):
        host.append(time.perf_counter())
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        events.append(ev)

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(after_step)
    sys.argv = [script, *args]
    sys.path.insert(0, script.rsplit("/", 1)[0] if "/" in script else ".")
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
    torch.cuda.synchronize()
    h = [(b - a) * 1e3 for a, b in zip(host[SKIP:], host[SKIP + 1:])]
    g = [a.elapsed_time(b) for a, b in zip(events[SKIP:], events[SKIP + 1:])]
    q = sorted(g)
    print(f"PROBE {names}: {len(h)} steps; host mean {st.mean(h):.3f} median {st.median(h):.3f} ms; "
          f"GPU mean {st.mean(g):.3f} median {st.median(g):.3f} p10 {q[len(q) // 10]:.3f} ms", flush=True)
    for n in [int(x) for x in os.environ.get("WINDOWS", "").split(",") if x]:
        means = [st.mean(h[i:i + n]) for i in range(0, len(h) - n + 1, n)]
        if means:
            spread = (max(means) - min(means)) / st.mean(means) * 100
            print(f"PROBE windows of {n}: " + " ".join(f"{m:.2f}" for m in means)
                  + f" ms; spread {spread:.1f}%", flush=True)


if __name__ == "__main__":
    main()
