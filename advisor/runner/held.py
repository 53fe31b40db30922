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
    StepClock.hold_step (set in the spec, or by an ADVANCE from the first hold)."""
    if ctl.forked:  # a DataLoader worker's copy of the hook
        return
    _drain_gpu()
    ctl.startup.mark("held")
    ctl.progress("held", ctl.clock.steps_seen)
    t, started = perf_counter(), time.time()
    line = wait_line(ctl.spec["hold"])
    if line == ADVANCE and ctl.clock.hold_step is None:
        # Held at its first CUDA use, told to go on into its warm-up (the GPU now has room for
        # it): it waits again before its last two warm-up steps (StepClock.hold_step). Each
        # wait is noted, the lead-in leaves both out (measure.lead_in_s).
        ctl.clock.hold_before_last_warmup_steps()
        ctl.startup.hold(started, time.time(), t)
        ctl.startup.mark("advanced")
        return
    spec = read_json(line) if line else None
    if not isinstance(spec, dict):  # dropped (the guess was wrong), or advisor is gone
        flush_std()
        os._exit(0)
    relocate(ctl, spec)
    ctl.startup.hold(started, time.time(), t)  # the wait is not part of the lead-in nor of its step
    ctl.startup.mark("released")


def relocate(ctl, spec: dict) -> None:
    """Take the trial's name and directory: the parent renamed this process's directory to it
    before the release, so files already open stay valid; paths still to come follow it."""
    ctl.spec = spec
    ctl.run.relocate(spec)
    if ctl.sandbox is not None:
        ctl.sandbox.relocate(ctl.run.dir)
        # started beside the baseline: what it created since is absent here too
        ctl.sandbox.hide_from(spec.get("hidden_file"))


def _drain_gpu() -> None:
    """Nothing of this process left running on the GPU while it waits."""
    try:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass
