"""What the fixes' run-time parts (advisor.interventions), the DALI planner and the runner share
inside the script's process: the patching helpers (patching.py, torch imported), the call-site
finder (sites.py), the fixes' source texts (ddp_source.py, padding_source.py, amp_source.py,
samples_source.py).
Nothing here imports the runner, the fixes or the interventions, so each of them can build on it.

This module stays torch-free: the trials ladder reads NOT_APPLIED in the parent process.
"""

from __future__ import annotations

import os

# The note an intervention leaves when it finds at run time that it cannot apply
# (patching.not_applied); the trials ladder (parent process, no torch) reads it.
NOT_APPLIED = "intervention not applied:"

# What precompute-samples and preload-dataset both refuse on: a sample read twice differs.
# A property of the script's dataset, not of the fix: the ladder, having read it in one's
# refusal, skips the other without a process (trials.ladder, config "samples").
SAMPLES_VARY = "differs between two reads (random transforms)"

# A language model's output layer over a vocabulary: an nn.Linear of this many outputs or more
# (today's vocabularies: 32,000 in Llama 2 and Mistral, and up). The runner finds the logits by
# it (runner/logits.py); float8-training's text keeps that layer in high precision.
MIN_VOCAB = 32000


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) for a single process."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1
