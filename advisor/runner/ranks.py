"""Several processes of one script: ``advisor analyze --nproc-per-node N``.

The parent launches the child as ``torchrun --nproc-per-node N`` would (``python -m
torch.distributed.run --standalone``): N copies of bootstrap.py, each under its own runner.
Rank 0 writes the run's child.json and progress.jsonl, as a single process does; rank r > 0
writes its own under ``ranks/rank<r>/``. Every rank's trace goes into the same TensorBoard run
directory (tb/<run-name>/, one file per worker), where the PyTorch Profiler plugin's
distributed view reads them side by side.

The ranks must leave the script at the same step: a rank that stops while the others wait in a
collective would hang them. So each rank keeps the same schedule, counted in steps: its timed
window is the steps asked, with no minimum time and no one-off step left out (both depend on
the rank's own clock).
"""

from __future__ import annotations

import os

from advisor.runner._util import read_json


def rank_dir(run_dir: str, rank: int) -> str:
    """Where rank ``rank`` writes its child.json and progress.jsonl."""
    return run_dir if rank == 0 else os.path.join(run_dir, "ranks", f"rank{rank}")


def nproc(spec: dict) -> int:
    return max(1, int(spec.get("nproc_per_node") or 1))


def launch_args(spec: dict, bootstrap: str, spec_path: str) -> list[str]:
    """The child's command line after the interpreter."""
    n = nproc(spec)
    if n == 1:
        return [bootstrap, spec_path]
    return ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", bootstrap, spec_path]


def collect(spec: dict, rank0: dict) -> list[dict]:
    """Every rank's record, rank 0's from its child.json as read; a rank that wrote none is
    listed with its reason."""
    out = []
    for r in range(nproc(spec)):
        doc = rank0 if r == 0 else read_json(os.path.join(rank_dir(spec["run_dir"], r), "child.json"))
        if not isinstance(doc, dict):
            out.append({"rank": r, "missing": "this rank wrote no child.json"})
            continue
        out.append({"rank": r, "step_times_ms": doc.get("step_times_ms") or [],
                    "measure_window_ms": doc.get("measure_window_ms"), "data_wait_ms": doc.get("data_wait_ms") or [],
                    "batch_size": doc.get("batch_size"), "trace_files": doc.get("trace_files") or [],
                    "stage": doc.get("stage"), "exit": doc.get("exit") or {},
                    "device": ((doc.get("config") or {}).get("parameters") or {}).get("value", {}).get("device")})
    return out
