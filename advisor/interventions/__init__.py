"""Fixes applied at run time inside the child process, one module per fix.

An intervention knows nothing about rules: a finding names the intervention that fixes it.
Each module defines ``NAME``, ``CHANGES_NUMERICS``, ``describe(params) -> str``,
``not_applicable(config, environment, params) -> str | None`` (why it cannot apply to this
script, judged from the baseline's observed config) and ``apply(params) -> None``, which
patches torch in the child before the user's script runs. The user's files are never
edited; ``patch_for`` in advisor.patch writes the equivalent source edit for the user.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# The note an intervention leaves when it finds at run time that it cannot apply
# (_patch.not_applied); the trials ladder (parent process, no torch) reads it.
NOT_APPLIED = "intervention not applied:"

MODULES = {
    "amp": "amp",
    "tf32": "tf32",
    "channels-last": "channels_last",
    "dataloader-workers": "dataloader",
    "precompute-samples": "precompute",
    "preload-dataset": "preload",
    "dali": "dali",
    "ddp": "ddp",
    "pin-memory": "dataloader",
    "set-to-none": "set_to_none",
    "fused-optimizer": "fused_optimizer",
    "cudnn-benchmark": "cudnn_benchmark",
    "torch-compile": "compile",
    "batch-size": "batch_size",
    "nan-loss": "nan_loss",
    "defer-syncs": "defer_syncs",
    "cached-batch": "cached_batch",   # a bound (the data-free ceiling), never a fix: advisor.ceiling
    "one-gpu": "one_gpu",             # a reference (ddp's scaling), never a fix: advisor.trials.scaling
}


# Fixes that change the batch each process sees (a larger batch; ddp's shard of it): their runs'
# batch is not held to the baseline's (measure.hold_batch).
BATCH_CHANGING = {"batch-size", "ddp"}


def get(name: str) -> ModuleType:
    if name not in MODULES:
        raise KeyError(f"no intervention {name!r}; known: {', '.join(sorted(MODULES))}")
    return importlib.import_module(f"advisor.interventions.{MODULES[name]}")


def parse_specs(text: str) -> list[dict]:
    """``--apply`` syntax → [{"name", "params"}]: ``NAME[:KEY=VALUE...]``, comma-separated,
    e.g. ``amp:dtype=float16,channels-last,dataloader-workers:num_workers=8:pin_memory=true``.
    Raises ValueError with a one-line reason."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, *pairs = item.split(":")
        if name not in MODULES:
            raise ValueError(f"no fix named {name!r}; known: {', '.join(sorted(MODULES))}")
        params = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise ValueError(f"{item!r}: parameters are KEY=VALUE, got {pair!r}")
            params[key] = _value(value)
        out.append({"name": name, "params": params})
    return out


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_all(interventions: list[dict]) -> list[str]:
    """Apply each {"name", "params"} in order; returns one description line per fix."""
    lines = []
    for item in interventions:
        mod = get(item["name"])
        params = dict(item.get("params") or {})
        params.setdefault("_name", item["name"])
        mod.apply(params)
        lines.append(mod.describe(params))
    return lines
