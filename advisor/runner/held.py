"""A trial process started ahead on a guess of the next trial (advisor.trials.lookahead), child side.

Its spec carries "hold", a FIFO, and "hold_at": "cuda", the script runs up to its first CUDA
use and waits there, nothing of it on the GPU yet; "warmup", it goes on into its warm-up steps
(CUDA, compile, CUDA graphs) and waits before the last two, its GPU queue drained. There it
waits for advisor to pass the spec it runs under (the same fixes; its trial's name and
directory) or to drop it. advisor stops (SIGSTOP) a process that does not wait yet while
another one times or profiles its steps; that one's window opens `quiet_s` after it says so,
for the GPU work queued before the stop to drain."""

from __future__ import annotations

import os
import time
from time import perf_counter

from advisor.runner._util import flush_std, read_json, wait_line

# What advisor writes instead of a spec's path to a process held at its first CUDA use that may
# now go on into its warm-up.
ADVANCE = "advance-to-warmup"


def hold(ctl) -> None:
    """Wait for the release: at the script's first CUDA initialization, or at the step boundary
    Controller.hold_step (set in the spec, or by an ADVANCE from the first hold)."""
    if ctl.forked:  # a DataLoader worker's copy of the hook
        return
    _drain_gpu()
    ctl.startup["held"] = time.time()
    ctl.progress("held", ctl.steps_seen)
    t = perf_counter()
    line = wait_line(ctl.spec["hold"])
    if line == ADVANCE and ctl.hold_step is None:
        # Held at its first CUDA use, told to go on into its warm-up (the GPU now has room for
        # it): it waits again before its last two warm-up steps (Controller.hold_step).
        ctl.hold_step = max(1, ctl.warmup - 2)
        ctl._t_warm += perf_counter() - t
        ctl.startup["advanced"] = time.time()
        return
    spec = read_json(line) if line else None
    if not isinstance(spec, dict):  # dropped (the guess was wrong), or advisor is gone
        flush_std()
        os._exit(0)
    relocate(ctl, spec)
    ctl._t_warm += perf_counter() - t  # the wait is not part of the first step
    ctl.startup["released"] = time.time()


def relocate(ctl, spec: dict) -> None:
    """Take the trial's name and directory: the parent renamed this process's directory to it
    before the release, so files already open stay valid; paths still to come follow it."""
    ctl.spec = spec
    ctl.run_dir = os.path.abspath(spec["run_dir"])
    ctl.run_name = spec.get("run_name") or ctl.run_name
    tb_root = os.path.abspath(spec.get("tb_dir") or os.path.join(ctl.run_dir, "tb"))
    ctl.tb_dir = os.path.join(tb_root, ctl.run_name)
    ctl.trace_base = os.path.dirname(tb_root)
    if ctl.sandbox is not None:
        ctl.sandbox.relocate(ctl.run_dir)


def _drain_gpu() -> None:
    """Nothing of this process left running on the GPU while it waits."""
    try:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass
