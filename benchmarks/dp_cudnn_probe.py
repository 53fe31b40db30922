"""A script's step time as plain python, with cudnn.benchmark as the script sets it or held to one
value whatever the script sets: does cuDNN's autotuning repeat every step under nn.DataParallel
(whose replicas run their forward in threads it starts anew at each call, where cuDNN keeps its
benchmarked plans per thread)?

    CUDA_VISIBLE_DEVICES=0,1,2,3 python3 benchmarks/dp_cudnn_probe.py --benchmark off -- SCRIPT ARGS...

--benchmark script|on|off. The optimizer's steps are timed (wall time between two steps, the
first --warmup left out); after --steps it prints one JSON line (on a line of its own) and ends
the process.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import sys
import time

import torch


def hold_benchmark(value: bool) -> None:
    """cudnn.benchmark fixed to value: the script's own assignment is ignored."""
    torch.backends.cudnn.benchmark = value
    cls = type(sys.modules["torch.backends.cudnn"])
    cls.benchmark = property(lambda self: value, lambda self, v: None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmark", choices=("script", "on", "off"), default="script")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if a.benchmark != "script":
        hold_benchmark(a.benchmark == "on")
    stamps: list[float] = []

    def after_step(opt, args, kwargs):
        stamps.append(time.perf_counter())
        if len(stamps) > a.warmup + a.steps:
            gaps = [(b - c) * 1e3 for c, b in zip(stamps[a.warmup:], stamps[a.warmup + 1:])]
            # on a line of its own: a script's progress bar may have left the cursor mid-line
            print("\n" + json.dumps({"benchmark": a.benchmark, "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                              "gpus": torch.cuda.device_count(), "step_ms_median": round(statistics.median(gaps), 2),
                              "step_ms": [round(g, 1) for g in gaps], "script": argv[0]}), flush=True)
            os._exit(0)

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(after_step)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
